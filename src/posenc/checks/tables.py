"""Check a sinusoidal table and name the likely bug when it is wrong (chapter 12).

:func:`check_sinusoidal_table` compares a table with the paper's formula. When they
differ it does not stop at "differs": it searches a small space of known mistakes
and conventions for the one that reproduces the table, and reports each way in
which that explanation departs from what was asked for. The space has five axes:

- the column layout (interleaved or ``[sin | cos]`` halves);
- whether sine and cosine are swapped;
- the frequencies: the paper's ``base**(-2i/d)``, tensor2tensor's ``num_timescales - 1``
  spacing, twice too fast (the i-vs-2i double count) or twice too slow in the declared
  spacing, those of a table one column wider (an odd ``d_model`` truncated), or a base
  fitted to the table in the declared spacing (offered as a round number first);
- the positions: as asked, shifted, the same for every row (the batch axis used as
  the position axis), negated, their absolute values, or scaled;
- for an odd width, the lone last column: the sine of one more pair or zeros.

Departures are counted from what the caller declares: the layout, the spacing of the
frequencies (the paper's or tensor2tensor's), which of sine and cosine comes first in a
pair, the odd width's last column, the positions (a start, or any positions, fractional
ones included), a padding row and the precision the table was stored in. A table that
matches its declaration gives no finding; otherwise the explanation with the fewest
departures wins, and each departure is named in the declaration's own terms.

If no explanation reproduces every row, one that reproduces all but one or two rows
names a localized corruption: a row that repeats the row before, or the entries of a
row that differ. Then two kinds of rounding are told apart. Storage: every value lies
on the grid of a coarser format (float32, float16, bfloat16) and the table is within
that format's rounding of the formula. Arithmetic: with the error that angles computed
in a narrow format would add, an explanation matches, the error is past the tolerance
in many rows, and it grows with the angle (fitted, not assumed) at about the rate that
format's rounding gives. Anything else is reported as an unexplained deviation, with
its size. Tables that are not made of sine-cosine pairs at all (a transposed table is
named as such), zero rows, scaled tables and non-finite values get findings of their
own; axes of size 1 (a ``(length, 1, d_model)`` buffer) are dropped.

A wrong table costs about what a right one does: the search compares each explanation
on a sample of rows and confirms only the one that fits there on every row, a block of
rows at a time, without building the predicted table.
"""

from __future__ import annotations

import functools
import itertools
import math
from typing import NamedTuple

import numpy as np

from posenc import _validation
from posenc.checks.positions import (
    estimate_positions,
    jump_finding,
    jump_rows,
    jumped_positions,
    number,
    shift_finding,
)
from posenc.checks.tolerances import (
    ANGLE_ROUNDINGS,
    EPS,
    PRECISIONS,
    STORAGE,
    growth,
    growth_rate,
    on_grid,
)
from posenc.encoding import LAYOUTS, MAX_POSITION, sinusoidal

# The default tolerance never exceeds this: an entry further off is always reported.
MAX_TOLERANCE = 0.01
# Every sine-cosine pair of a table the search may explain has sin^2 + cos^2 within this of 1.
PAIR_NORM = 0.1
# Rows from which a base is fitted (consecutive, from the first): enough to fix it.
FIT_ROWS = 512
# Rows compared while searching; the winning explanation is then checked on all rows.
SAMPLE_ROWS = 24
# Rows compared at a time: a wrong explanation is rejected after its first block.
BLOCK_ROWS = 1024
FIRST_BLOCK = 6
# A corruption is localized when at most LOCAL_ROWS rows differ, and the table has at
# least LOCAL_SHARE times as many rows as differ.
LOCAL_ROWS = 2
LOCAL_SHARE = 10
# Rows whose errors are fitted for growth (evenly spread over the table).
ERROR_ROWS = 2048
# Angles computed in a narrow format put errors past the tolerance in at least this share
# of the rows, growing at no less than the format's unit roundoff / SLOPE_FACTOR per radian.
WIDESPREAD = 0.05
SLOPE_FACTOR = 8
# Such a comparison is only evidence where that bound is small: at least this fraction of
# the entries compared must have a bound below DISCRIMINATING.
DISCRIMINATING = 0.5
MIN_DISCRIMINATING = 0.25
FREQUENCY_MODELS = ("paper", "double", "half", "tensor2tensor", "wider", "fitted")
POSITION_MODELS = ("given", "shifted", "constant", "negated", "absolute", "scaled")
LONE_COLUMNS = ("sine", "zero")
SPACINGS = ("paper", "tensor2tensor")
FIRSTS = ("sin", "cos")


class Explanation(NamedTuple):
    """One point of the search space: how a table could have been built."""

    layout: str
    swapped: bool
    frequency: str
    positions: str
    lone: str


def _pair_columns(width: int, layout: str, lone: str = "sine") -> tuple[np.ndarray, np.ndarray]:
    """The sine and cosine columns of the ``width // 2`` full pairs in ``layout``.

    In the book's concat layout an odd width puts its lone sine among the sines; a
    zero-padded table (``lone="zero"``) keeps the halves together and pads at the end.
    """
    n = width // 2
    if layout == "interleaved":
        return np.arange(0, 2 * n, 2), np.arange(1, 2 * n, 2)
    first = n + width % 2 if lone == "sine" else n
    return np.arange(n), np.arange(first, first + n)


def _lone_column(width: int, layout: str, lone: str) -> int:
    """Where the lone column of an odd ``width`` sits."""
    if layout == "interleaved" or lone == "zero":
        return width - 1
    return width // 2


@functools.lru_cache(maxsize=256)
def _frequencies(
    model: str,
    width: int,
    base: float,
    fitted: float | None,
    lone: str = "sine",
    spacing: str = "paper",
) -> np.ndarray:
    """The ``ceil(width / 2)`` angular frequencies of a frequency model.

    ``"double"``, ``"half"`` and ``"fitted"`` keep the declared ``spacing`` and change
    the base (to ``base**2``, ``sqrt(base)`` or the fitted one): a bug or another base
    in a tensor2tensor-spaced table stays tensor2tensor-spaced. A zero-padded odd width
    (``lone="zero"``) is the table of width ``width - 1`` with a zero column added, as
    fairseq and diffusers build it: its frequencies are those of the even width (the
    last one, of the zero column, is never used).
    """
    m = (width + 1) // 2
    if lone == "zero" and width % 2:
        width -= 1
    i = np.arange(m, dtype=np.float64)

    def spaced(how: str, b: float) -> np.ndarray:
        if how == "tensor2tensor":
            return b ** (-i / max(width // 2 - 1, 1))
        return b ** (-2 * i / width)

    if model in ("paper", "tensor2tensor"):
        freqs = spaced(model, base)
    elif model == "double":
        freqs = spaced(spacing, base**2)
    elif model == "half":
        freqs = spaced(spacing, math.sqrt(base))
    elif model == "wider":
        freqs = base ** (-2 * i / (width + 1))
    else:
        freqs = spaced(spacing, fitted)
    freqs.flags.writeable = False  # cached: shared by every caller
    return freqs


def _build(rows: np.ndarray, width: int, explanation: Explanation, freqs: np.ndarray, sized=True):
    """The table (float64) that ``explanation`` predicts at the positions ``rows``.

    Also returns, for each entry, the size of the angle it is the sine or cosine of
    (zero for a zero column), or None unless ``sized``.
    """
    angle = rows[:, None] * freqs[None, :]
    sine, cosine = np.sin(angle), np.cos(angle)
    if explanation.swapped:
        sine, cosine = cosine, sine
    table = np.zeros((len(rows), width))
    n = width // 2
    sin_cols, cos_cols = _pair_columns(width, explanation.layout, explanation.lone)
    table[:, _as_slice(sin_cols)] = sine[:, :n]
    table[:, _as_slice(cos_cols)] = cosine[:, :n]
    lone = _lone_column(width, explanation.layout, "sine")
    if width % 2 and explanation.lone == "sine":
        table[:, lone] = sine[:, n]
    if not sized:
        return table, None
    sizes = np.zeros((len(rows), width))
    sizes[:, sin_cols] = sizes[:, cos_cols] = np.abs(angle[:, :n])
    if width % 2 and explanation.lone == "sine":
        sizes[:, lone] = np.abs(angle[:, n])
    return table, sizes


def _row_errors(values: np.ndarray, rows: np.ndarray, explanation: Explanation, freqs, slack=0.0):
    """The largest error of each row of ``values`` against the table ``explanation``
    predicts at the positions ``rows``, less ``slack * max(1, |angle|)`` for each
    entry: :func:`_build` without building the table."""
    width = values.shape[1]
    n = width // 2
    angle = rows[:, None] * freqs[None, :]
    allowed = slack * np.maximum(1.0, np.abs(angle)) if slack else 0.0
    first, second = (np.cos, np.sin) if explanation.swapped else (np.sin, np.cos)
    worst = np.full(len(rows), -np.inf)
    sin_cols, cos_cols = _pair_columns(width, explanation.layout, explanation.lone)
    for function, columns in ((first, sin_cols), (second, cos_cols)):
        part = function(angle[:, :n])
        np.subtract(part, values[:, _as_slice(columns)], out=part)
        np.abs(part, out=part)
        if slack:
            np.subtract(part, allowed[:, :n], out=part)
        np.maximum(worst, np.max(part, axis=1, initial=-np.inf), out=worst)
    if width % 2:
        lone = _lone_column(width, explanation.layout, explanation.lone)
        if explanation.lone == "sine":
            error = np.abs(values[:, lone] - first(angle[:, n]))
            error -= allowed[:, n] if slack else 0.0
        else:
            error = np.abs(values[:, lone]) - slack
        np.maximum(worst, error, out=worst)
    return worst


def _as_slice(columns: np.ndarray):
    """Evenly spaced column indices as a slice (a strided view is faster to fill)."""
    return _slice_of(columns.tobytes()) or columns


@functools.lru_cache(maxsize=64)
def _slice_of(packed: bytes) -> slice | None:
    columns = np.frombuffer(packed, dtype=np.int64)
    if len(columns) > 1 and np.all(np.diff(columns) == columns[1] - columns[0]):
        return slice(int(columns[0]), int(columns[-1]) + 1, int(columns[1] - columns[0]))
    return None


def _phases(table: np.ndarray, layout: str, swapped: bool, lone: str) -> np.ndarray:
    """``atan2(sin, cos)`` of each full pair of ``table`` read as ``layout``."""
    width = table.shape[1]
    sin_cols, cos_cols = _pair_columns(width, layout, lone)
    sine, cosine = table[:, sin_cols], table[:, cos_cols]
    if swapped:
        sine, cosine = cosine, sine
    return np.arctan2(sine, cosine)


def _fitted_base(
    table: np.ndarray,
    positions: np.ndarray,
    layout: str,
    swapped: bool,
    lone: str,
    spacing: str = "paper",
) -> float | None:
    """The base whose frequencies, in the declared ``spacing``, explain how fast each
    pair's phase turns, or None.

    Rows are sorted by position, and each full pair's phase unwrapped along them and
    its slope read from the first to the last; a pair counts where that slope turns
    it by less than a quarter turn between neighbouring rows (else a turn could have
    been missed). Each such pair gives ``log base`` as ``-log(slope_i) * d_model /
    (2 i)`` (the paper's spacing) or ``-log(slope_i) * (d_model / 2 - 1) / i``
    (tensor2tensor's); the median of them is the fitted base.
    """
    width = table.shape[1]
    n = width // 2
    order = np.argsort(positions, kind="stable")
    positions = positions[order]
    keep = np.concatenate([[True], np.diff(positions) > 0])
    positions, table = positions[keep], table[order][keep]
    if len(positions) < 2 or n < 2:
        return None
    spaced_for = width - 1 if lone == "zero" and width % 2 else width
    per_step = max(spaced_for // 2 - 1, 1) if spacing == "tensor2tensor" else spaced_for / 2
    phases = np.unwrap(_phases(table, layout, swapped, lone), axis=0)
    slopes = (phases[-1] - phases[0]) / (positions[-1] - positions[0])
    i = np.arange(1, n)
    slopes = slopes[1:]
    usable = (slopes > 0) & (slopes * np.max(np.diff(positions)) < np.pi / 2)
    if not usable.any():
        return None
    log_base = float(np.median(-per_step * np.log(slopes[usable]) / i[usable]))
    if not 0 < log_base < 700:
        return None
    return math.exp(log_base)


def _round_bases(fitted: float) -> list[float]:
    """A fitted base rounded to 1, 2, 3 and 4 significant digits, then as fitted: a
    base is usually a round number (100000, 500000), and it is named as one."""
    bases = []
    for digits in (1, 2, 3, 4, None):
        b = fitted if digits is None else float(f"{fitted:.{digits}g}")
        if b > 1 and b not in bases:
            bases.append(b)
    return bases


def _tolerance(dtype: str, rows: np.ndarray, atol: float | None, stored: float = 0.0) -> np.ndarray:
    """Per-row tolerance: what computing the angles in the table's own dtype can cost.

    The largest angle of a row is its position (the first pair turns one radian per
    position), so a row gets ``4 * eps * max(1, |p|)``, with eps of the table's dtype,
    but never more than ``MAX_TOLERANCE``: past that the dtype cannot hold the angles,
    and a table that far off is reported whatever its dtype.
    """
    if atol is not None:
        return np.full(len(rows), atol)
    eps = max(EPS.get(str(dtype), 0.0), EPS["float64"])
    return np.minimum(4 * eps * np.maximum(1.0, np.abs(rows)), MAX_TOLERANCE) + stored


def _sample(length: int) -> np.ndarray:
    """Row indices to search on: the first two, the last, and some evenly between."""
    picks = np.linspace(0, length - 1, min(length, SAMPLE_ROWS)).round().astype(np.int64)
    return np.unique(np.concatenate([[0, min(1, length - 1)], picks]))


class _Context(NamedTuple):
    table: np.ndarray  # float64 values
    dtype: str  # the name of the table's own dtype ("bfloat16" for a torch tensor)
    base: float
    positions: np.ndarray  # the declared position of every row (float64)
    asked: Explanation  # the declared conventions
    atol: float | None
    rows: np.ndarray  # table row indices that take part (not zero rows)
    stored: float = 0.0  # unit roundoff of the format the table was stored in

    @property
    def layout(self) -> str:
        return self.asked.layout


def _taking_part(ctx: _Context) -> np.ndarray:
    """The rows of the table that take part (the table itself, not a copy, when all do)."""
    if len(ctx.rows) == len(ctx.table):
        return ctx.table
    return ctx.table[ctx.rows]


def _positions(model: str, ctx: _Context, shift: float | None) -> np.ndarray | None:
    """The positions of every table row under a position model, or None if undefined.

    ``shift`` is the whole number of positions the rows are moved by (``"shifted"``) or
    the one position every row has (``"constant"``); ``"scaled"`` is made in
    :func:`_scaled`.
    """
    asked = ctx.positions
    if model == "given":
        return asked
    if model == "negated":
        return -asked
    if model == "absolute":
        return np.abs(asked) if np.any(asked < 0) else None
    if shift is None:
        return None
    if model == "shifted":
        return None if shift == 0 else asked + shift
    return np.full(ctx.table.shape[0], float(shift)) if ctx.table.shape[0] > 1 else None


def _estimates(ctx: _Context, explanation: Explanation, freqs, sample, cache: dict) -> np.ndarray:
    """The position each row of ``sample`` reads as under ``explanation`` (NaN where
    none), computed once per way of reading the columns and set of frequencies."""
    key = ("estimates", explanation.layout, explanation.swapped, explanation.lone, freqs.tobytes())
    if key not in cache:
        phases = _phases(
            ctx.table[sample], explanation.layout, explanation.swapped, explanation.lone
        )
        cache[key] = estimate_positions(phases, freqs)
    return cache[key]


def _scaled(ctx: _Context, explanation: Explanation, freqs, sample, cache) -> list[np.ndarray]:
    """Candidate positions ``a + s * declared`` with ``s != 1``, fitted to the rows.

    The position of each sampled row is estimated from its phases, a line is fitted
    through them, and ``s`` and ``a`` are offered rounded to 1, 2, ... significant
    digits (a scale is usually a round number: 1000, 1/4), then unrounded.
    """
    if len(sample) < 3:
        return []
    estimates = _estimates(ctx, explanation, freqs, sample, cache)
    if not np.all(np.isfinite(estimates)):
        return []
    asked = ctx.positions[sample]
    if np.ptp(asked) == 0:
        return []
    scale, offset = np.polyfit(asked, estimates, 1)
    if not np.isfinite(scale) or abs(scale - 1) < 1e-6 or scale <= 0:
        return []  # a scale of 1 is a shift; a negative one, negated positions
    candidates = []
    for digits in (1, 2, 3, 4, 6, 9, None):
        s = scale if digits is None else float(f"{scale:.{digits}g}")
        a = float(np.round(offset)) if abs(offset - np.round(offset)) < 0.5 else offset
        positions = a + s * ctx.positions
        if abs(s - 1) > 1e-9 and not any(np.array_equal(positions, c) for c in candidates):
            candidates.append(positions)
    return candidates


def _departures(explanation: Explanation, ctx: _Context) -> int:
    return sum(a != b for a, b in zip(explanation, ctx.asked, strict=True))


def _explanations(ctx: _Context):
    """Every point of the search space, fewest departures first."""
    width = ctx.table.shape[1]
    lone = LONE_COLUMNS if width % 2 else ("sine",)
    points = [
        Explanation(*p)
        for p in itertools.product(LAYOUTS, (False, True), FREQUENCY_MODELS, POSITION_MODELS, lone)
    ]
    # a zero-padded odd width is an even table plus zeros: "wider" has no meaning there
    points = [p for p in points if not (p.lone == "zero" and p.frequency == "wider")]
    if width == 1:  # a single sine column has no pairs to lay out or swap
        points = [p for p in points if p.layout == ctx.layout and not p.swapped]
    return sorted(points, key=lambda p: _departures(p, ctx))


def _bad_rows(
    ctx: _Context, explanation: Explanation, freqs, positions, which, precision, allowed=0
):
    """The rows among ``which`` that ``explanation`` does not reproduce, or None when
    there are more than ``allowed`` of them (or the comparison cannot tell).

    The tolerance is that of the larger of the positions asked for and explained
    (capped, so that explaining a table by huge positions gains nothing), plus,
    when ``precision`` names a format, what angles computed in it can cost. Rows are
    compared a block at a time, and the comparison stops at the first block that has
    too many bad rows: a wrong explanation is rejected in about the time of its first
    block.
    """
    bad = []
    edges = [0, *range(FIRST_BLOCK, len(which), BLOCK_ROWS), len(which)]
    for begin, end in itertools.pairwise(edges):
        block = which[begin:end]
        larger = np.maximum(np.abs(ctx.positions[block]), np.abs(positions[block]))
        tolerance = _tolerance(ctx.dtype, larger, ctx.atol, ctx.stored)
        slack = 0.0
        if precision is not None:
            slack = ANGLE_ROUNDINGS * PRECISIONS[precision]
            angles = np.abs(positions[block][:, None] * freqs[None, :])
            bounds = tolerance[:, None] + slack * np.maximum(1.0, angles)
            if np.mean(bounds < DISCRIMINATING) < MIN_DISCRIMINATING:
                return None
        error = _row_errors(ctx.table[block], positions[block], explanation, freqs, slack)
        wrong = block[error > tolerance]
        bad.extend(wrong.tolist())
        if len(bad) > allowed:
            return None
    return np.array(bad, dtype=np.int64)


def _compare(ctx: _Context, explanation: Explanation, freqs, positions, which, precision):
    """Whether ``explanation`` reproduces every one of the table rows ``which``."""
    return _bad_rows(ctx, explanation, freqs, positions, which, precision) is not None


def _matches_formula(ctx: _Context) -> bool:
    """Whether every row that takes part is within tolerance of what was declared.

    For the paper's table at positions 0, 1, 2, ... or from any start the reference is
    :func:`posenc.sinusoidal` in float64 (fast, and within a few float64 roundings of
    the formula); anything else is evaluated directly.
    """
    length, width = ctx.table.shape
    positions = ctx.positions
    start = positions[0] if length else 0.0
    plain = ctx.asked == Explanation(ctx.layout, False, "paper", "given", "sine")
    consecutive = np.array_equal(positions, start + np.arange(length)) and start >= 0
    if plain and consecutive and start.is_integer():
        reference = sinusoidal(length, width, base=ctx.base, start=int(start), layout=ctx.layout)
    else:
        freqs = _frequencies(ctx.asked.frequency, width, ctx.base, None, ctx.asked.lone)
        reference = _build(positions, width, ctx.asked, freqs)[0]
    np.subtract(reference, ctx.table, out=reference)
    np.abs(reference, out=reference)
    tolerance = _tolerance(ctx.dtype, positions, ctx.atol, ctx.stored)[:, None]
    return bool(np.all(reference[ctx.rows] <= tolerance[ctx.rows]))


def _search(ctx: _Context, fitted_cache: dict, precision: str | None = None, local: int = 0):
    """The first explanation (fewest departures) that reproduces the table, or None.

    Returns ``(explanation, freqs, positions, fitted, bad)``, ``bad`` being the rows it
    does not reproduce: none, or with ``local`` at most that many rows (a localized
    corruption in a table the explanation otherwise fits).
    """
    width = ctx.table.shape[1]
    rows = ctx.rows
    sample = rows[_sample(len(rows))]
    spacing = ctx.asked.frequency
    if local:
        local = min(local, len(rows) // LOCAL_SHARE)
        if local == 0:
            return None
    for explanation in _explanations(ctx):
        key = (explanation.layout, explanation.swapped, explanation.lone)
        bases = [None]
        if explanation.frequency == "fitted":
            if key not in fitted_cache:
                fit = rows[:FIT_ROWS]
                fitted_cache[key] = _fitted_base(ctx.table[fit], ctx.positions[fit], *key, spacing)
            if ("bases", key) not in fitted_cache:
                fitted = fitted_cache[key]
                fitted_cache["bases", key] = (
                    []
                    if fitted is None
                    else [b for b in _round_bases(fitted) if not _is_named_base(b, ctx, key[2])]
                )
            bases = fitted_cache["bases", key]
        for fitted in bases:
            freqs = _frequencies(
                explanation.frequency, width, ctx.base, fitted, explanation.lone, spacing
            )
            for positions in _candidates(ctx, explanation, freqs, sample, fitted_cache):
                if _bad_rows(ctx, explanation, freqs, positions, sample, precision, local) is None:
                    continue
                bad = _bad_rows(ctx, explanation, freqs, positions, rows, precision, local)
                if bad is not None:
                    return explanation, freqs, positions, fitted, bad
    return None


def _candidates(ctx: _Context, explanation: Explanation, freqs, sample, cache) -> list:
    """The positions of the rows that a position model offers, to be compared."""
    if explanation.positions == "scaled":
        return _scaled(ctx, explanation, freqs, sample, cache)
    shift = None
    if explanation.positions in ("shifted", "constant"):
        estimate = _estimates(ctx, explanation, freqs, sample, cache)[0]
        if not np.isfinite(estimate) or abs(estimate) > MAX_POSITION:
            return []
        shift = float(round(estimate))
        if explanation.positions == "shifted":
            shift = float(round(estimate - ctx.positions[sample[0]]))
    positions = _positions(explanation.positions, ctx, shift)
    return [] if positions is None else [positions]


def _is_named_base(fitted: float, ctx: _Context, lone: str = "sine") -> bool:
    """True when a fitted base gives the frequencies another frequency model names."""
    width = ctx.table.shape[1]
    spacing = ctx.asked.frequency
    mine = _frequencies("fitted", width, ctx.base, fitted, lone, spacing)
    for model in FREQUENCY_MODELS[:-1]:
        if model == "wider" and lone == "zero":
            continue
        theirs = _frequencies(model, width, ctx.base, None, lone, spacing)
        if np.allclose(mine, theirs, rtol=1e-4, atol=0):
            return True
    return False


def _describe(explanation: Explanation, ctx: _Context, positions, fitted) -> list[str]:
    """One sentence for each way ``explanation`` departs from what was declared."""
    findings = []
    width = ctx.table.shape[1]
    asked = ctx.asked
    if explanation.layout != asked.layout:
        shape = {
            "interleaved": "sin and cos alternating, as in the paper",
            "concat": "all sines, then all cosines, as tensor2tensor and fairseq",
        }[explanation.layout]
        findings.append(
            f"the columns are in the {explanation.layout} layout ({shape}), not "
            f"layout={asked.layout!r}: a table saved in one layout read by code written "
            f"for the other, or declare layout={explanation.layout!r}"
        )
    if explanation.swapped != asked.swapped:
        first, declared = ("cos", "sin") if explanation.swapped else ("sin", "cos")
        findings.append(
            f"sin and cos are swapped relative to first={declared!r}: each pair has its "
            f"{first} first (position 0 reads {'1' if first == 'cos' else '0'} in the "
            f"pair's first column); declare first={first!r} if that is the convention"
        )
    if explanation.frequency != asked.frequency:
        findings.append(
            _frequency_finding(explanation.frequency, asked.frequency, ctx.base, width, fitted)
        )
    first = ctx.rows[0]
    if explanation.positions == "shifted":
        findings.append(shift_finding(positions[first], ctx.positions[first]))
    elif explanation.positions == "scaled":
        step = (positions[-1] - positions[0]) / (ctx.positions[-1] - ctx.positions[0])
        findings.append(
            f"the rows are at positions {positions[first]:.6g}, {positions[first + 1]:.6g}, "
            f"... ({step:.6g} times the declared ones): scaled or fractional positions, "
            f"as diffusers' timestep embeddings (scale=1000) or position interpolation "
            f"make them; declare them with positions="
            if len(positions) > first + 1
            else f"the row is at position {positions[first]:.6g}"
        )
    elif explanation.positions == "constant":
        findings.append(
            f"every row is the row of position {number(positions[first])}: the position "
            f"does not advance along the rows; looks like the batch axis used as the "
            f"position axis"
        )
    elif explanation.positions == "negated":
        findings.append(
            "the sine columns have the wrong sign (positions negated): looks like j - i "
            "used for the relative position i - j"
        )
    elif explanation.positions == "absolute":
        findings.append(
            "rows of negative positions repeat those of positive ones, so the sine terms "
            "of the past have the wrong sign: looks like |i - j| used for i - j"
        )
    if width % 2 and explanation.lone == "sine" and asked.lone == "zero":
        findings.append(
            "the last column is the sine of one more pair, not the zero column that "
            "tensor2tensor's spacing or odd_column='zero' declares for an odd d_model; "
            "declare odd_column='sine' if that is the convention"
        )
    if width % 2 and explanation.lone == "zero" and asked.lone == "sine":
        findings.append(
            f"the last column is all zeros: the table of width {width - 1} with a zero "
            f"column added for an odd d_model (fairseq, tensor2tensor, diffusers), not "
            f"the sine of one more pair; declare odd_column='zero' if that is the convention"
        )
    return findings


def _frequency_finding(
    model: str, declared: str, base: float, width: int, fitted: float | None
) -> str:
    """The sentence for a frequency model other than the declared one."""
    if model == "double":
        also = " (at d_model = 4 also tensor2tensor's spacing)" if width == 4 else ""
        return (
            f"frequencies fall 2x too fast (as if base were {base**2:.6g}): looks like "
            f"i-vs-2i double counting (2i in the exponent where i already steps by 2){also}"
        )
    if model == "half":
        return (
            f"frequencies fall 2x too slowly (as if base were {math.sqrt(base):.6g}): "
            f"looks like the exponent i/d_model instead of 2i/d_model"
        )
    if model == "tensor2tensor":
        return (
            "frequencies are spaced with num_timescales - 1 in the denominator, so the "
            "lowest is exactly 1/base (spacing='tensor2tensor': tensor2tensor, fairseq, "
            "M2M100, Whisper), not spacing='paper' (2i/d_model)"
        )
    if model == "paper" and declared == "tensor2tensor":
        return (
            "frequencies are spaced as in the paper, base**(-2i/d_model) "
            "(spacing='paper'), not with num_timescales - 1 as spacing='tensor2tensor' "
            "declares"
        )
    if model == "wider":
        return (
            f"frequencies are spaced for d_model = {width + 1} but the table has {width} "
            f"columns: looks like an odd d_model that lost its last column "
            f"(d_model // 2 pairs)"
        )
    typo = (
        f"; if {base:g} was meant, look for 10e4, which is 100000, written for 1e4"
        if _close(fitted, 10 * base) and _close(base, 1e4)
        else ""
    )
    return (
        f"frequencies fit base = {fitted:.6g}, not {base:.6g}: declare base={fitted:.6g} "
        f"if the model uses it (diffusers' max_period, for instance){typo}; otherwise a "
        f"wrong base"
    )


def _localized(ctx: _Context, explanation, freqs, positions, bad) -> list[str]:
    """One finding per row that the explanation fits everywhere else."""
    findings = []
    width = ctx.table.shape[1]
    for row in bad:
        r = int(row)
        if r > 0 and np.array_equal(ctx.table[r], ctx.table[r - 1]):
            findings.append(
                f"row {r} repeats row {r - 1} (position {number(ctx.positions[r])} holds the "
                f"values of position {number(ctx.positions[r - 1])}): a row copied over its "
                f"neighbour, or a position index that did not advance; the rest of the table "
                f"is right"
            )
            continue
        predicted, _ = _build(positions[[r]], width, explanation, freqs)
        error = np.abs(ctx.table[r] - predicted[0])
        tolerance = _tolerance(ctx.dtype, np.abs(positions[[r]]), ctx.atol, ctx.stored)[0]
        columns = np.flatnonzero(error > tolerance)
        worst = int(columns[np.argmax(error[columns])]) if len(columns) else 0
        where = (
            f"column {worst} differs by {error[worst]:.2g}"
            if len(columns) == 1
            else f"{len(columns)} columns differ, by up to {error[worst]:.2g} (column {worst})"
        )
        findings.append(
            f"row {r} (position {number(ctx.positions[r])}), {where} from the formula, "
            f"while every other row is right: a localized corruption (an entry overwritten "
            f"or edited), not a rounding"
        )
    return findings


def _close(a: float, b: float) -> bool:
    return abs(math.log(a / b)) < 1e-6


def _errors(ctx: _Context, explanation: Explanation, freqs, positions):
    """Error and angle size of every entry of up to ERROR_ROWS rows that take part (evenly
    spread, the first and last among them), under an explanation, and those rows."""
    rows = ctx.rows
    if len(rows) > ERROR_ROWS:
        rows = rows[np.linspace(0, len(rows) - 1, ERROR_ROWS).round().astype(np.int64)]
    predicted, sizes = _build(positions[rows], ctx.table.shape[1], explanation, freqs)
    return np.abs(ctx.table[rows] - predicted), sizes, rows


def _worst(ctx: _Context, explanation: Explanation, freqs, positions) -> tuple[float, int, int]:
    """The largest error over all rows that take part, its row and its column."""
    errors = np.concatenate(
        [
            _row_errors(ctx.table[block], positions[block], explanation, freqs)
            for block in np.array_split(ctx.rows, max(1, len(ctx.rows) // BLOCK_ROWS))
        ]
    )
    row = int(ctx.rows[np.argmax(errors)])
    predicted, _ = _build(positions[[row]], ctx.table.shape[1], explanation, freqs, sized=False)
    error = np.abs(ctx.table[row] - predicted[0])
    column = int(np.argmax(error))
    return float(error[column]), row, column


def _precision(ctx: _Context, worst, positions, name: str) -> str:
    """The finding for angles computed in the format ``name``: where the error is worst."""
    error, row, column = worst
    return (
        f"errors grow with the angle {growth_rate(name)}, up to {error:.2g} at "
        f"position {number(positions[row])} (column {column}): looks like angles "
        f"computed in {name}"
    )


def _storage(worst, name: str) -> str:
    """The finding for a table rounded to the format ``name`` when it was stored."""
    return (
        f"every value lies on the {name} grid and the table is within {name}'s rounding "
        f"of the formula (largest error {worst[0]:.2g}): the "
        f"table was stored in {name} and converted back, a storage rounding, not an error "
        f"in the angles; declare stored_dtype={name!r}"
    )


def _unexplained(ctx: _Context) -> str:
    """The finding for a table of sine-cosine pairs that no explanation reproduces."""
    asked = ctx.asked
    freqs = _frequencies(asked.frequency, ctx.table.shape[1], ctx.base, None, asked.lone)
    error, row, column = _worst(ctx, asked, freqs, ctx.positions)
    return (
        f"the table is made of sine-cosine pairs but differs from what was declared by up "
        f"to {error:.2g} (position {number(ctx.positions[row])}, column "
        f"{column}); the error is not a storage grid and does not grow with the angle, and "
        f"no known bug explains it"
    )


def _not_pairs(ctx: _Context) -> list[str]:
    """Findings for a table whose columns do not form sine-cosine pairs."""
    values = _taking_part(ctx)
    mean, std = float(values.mean()), float(values.std())
    sin_cols, cos_cols = _pair_columns(values.shape[1], ctx.layout)
    norms = values[:, sin_cols] ** 2 + values[:, cos_cols] ** 2
    described = (
        f"sin^2 + cos^2 ranges over {norms.min():.2g}..{norms.max():.2g}, not 1"
        if norms.size
        else "no pairs"
    )
    findings = [f"the columns are not sine-cosine pairs ({described}): not a sinusoidal table"]
    few = _few_bad_pairs(values, norms, sin_cols, cos_cols)
    if few is not None:
        findings = [few]
    if values.size > 1 and std > 0 and abs(mean) <= 5 * std / math.sqrt(values.size):
        findings.append(
            f"values have mean {mean:.2g} and standard deviation {std:.2g}: looks like a "
            f"random weight initialisation overwrote the table"
        )
    return findings


def _few_bad_pairs(values, norms, sin_cols, cos_cols) -> str | None:
    """The finding naming the columns of the few pairs that are not sine-cosine pairs
    (at most 2, or 5% of the pairs) when all others are, or None."""
    if not norms.size:
        return None
    off = np.flatnonzero(np.any(np.abs(norms - 1) > PAIR_NORM, axis=0))
    if not 0 < len(off) <= max(2, len(sin_cols) // 20):
        return None
    columns = sorted({int(c) for k in off for c in (sin_cols[k], cos_cols[k])})
    how = _copies(values, columns)
    pairs = "pair" if len(off) == 1 else "pairs"
    return (
        f"the columns are not sine-cosine pairs in {len(off)} {pairs} of {len(sin_cols)} "
        f"(columns {', '.join(map(str, columns))}), while every other pair is one: {how}"
    )


def _copies(values, columns) -> str:
    """Which of ``columns`` are copies of another column of ``values``, as a finding's end."""
    copies = []
    for column in columns:
        same = [
            other
            for other in range(values.shape[1])
            if other != column and np.array_equal(values[:, column], values[:, other])
        ]
        if same:
            copies.append(f"column {column} is a copy of column {same[0]}")
    if copies:
        return "; ".join(copies) + " (a column duplicated, or written to the wrong index)"
    return "those columns were overwritten or built with another formula"


def _few_columns(ctx: _Context) -> str | None:
    """The finding for a table that differs from its declaration in a few columns only
    (at most 2, or 5% of them), each named, or None."""
    asked = ctx.asked
    width = ctx.table.shape[1]
    freqs = _frequencies(asked.frequency, width, ctx.base, None, asked.lone)
    error, _sizes, rows = _errors(ctx, asked, freqs, ctx.positions)
    tolerance = _tolerance(ctx.dtype, ctx.positions[rows], ctx.atol, ctx.stored)
    off = np.flatnonzero(np.any(error > tolerance[:, None], axis=0))
    if not 0 < len(off) <= max(2, width // 20):
        return None
    copies = _copies(_taking_part(ctx), [int(c) for c in off])
    if " is a copy of " not in copies:
        return None
    listed = ", ".join(map(str, off))
    return (
        f"column{'s' if len(off) > 1 else ''} {listed} differ{'' if len(off) > 1 else 's'} "
        f"from what was declared while every other column matches: {copies}"
    )


def _column_exponent(ctx: _Context) -> bool:
    """Whether column ``c`` is the sine (even c) or cosine (odd c) at ``base**(-2c/d)``.

    That is the published double-counting loop: ``2 * i`` for the sine of column ``i``
    and ``2 * (i + 1)`` for the cosine in column ``i + 1``.
    """
    width = ctx.table.shape[1]
    if width < 4 or ctx.layout != "interleaved":
        return False
    column = np.arange(width)
    for rows in (ctx.rows[_sample(len(ctx.rows))], ctx.rows):  # a sample first: fast "no"
        positions = ctx.positions[rows]
        angle = positions[:, None] * ctx.base ** (-2 * column / width)
        predicted = np.where(column % 2 == 0, np.sin(angle), np.cos(angle))
        tolerance = _tolerance(ctx.dtype, positions, ctx.atol, ctx.stored)[:, None]
        if not np.all(np.abs(ctx.table[rows] - predicted) <= tolerance):
            return False
    return True


def _made_of_pairs(values: np.ndarray, sampled: bool = False) -> bool:
    """Whether some layout makes every column pair a point of the unit circle (in the
    rows of :func:`_sample` only, when ``sampled``)."""
    width = values.shape[1]
    sample = values[_sample(len(values))]
    for layout, lone in itertools.product(LAYOUTS, LONE_COLUMNS):
        sine, cosine = _pair_columns(width, layout, lone)
        if all(
            np.all(np.abs(part[:, sine] ** 2 + part[:, cosine] ** 2 - 1) <= PAIR_NORM)
            for part in ((sample,) if sampled else (sample, values))  # a fast "no" first
        ):
            return True
    return False


def _scale(values: np.ndarray, layout: str) -> float | None:
    """The common norm of every sine-cosine pair if they share one other than 1."""
    sample = values[_sample(len(values))]
    for candidate in (layout, *[other for other in LAYOUTS if other != layout]):
        sin_cols, cos_cols = _pair_columns(values.shape[1], candidate)
        if len(sin_cols) == 0:
            return None
        scale = None
        for part in (sample, values):  # a sample first: a fast "no"
            norms = np.sqrt(part[:, sin_cols] ** 2 + part[:, cos_cols] ** 2)
            scale = scale or float(np.median(norms))
            if not (scale > 0 and np.all(np.abs(norms / scale - 1) < 1e-3)):
                break
            if abs(scale - 1) <= 1e-3:
                return None
        else:
            return scale
    return None


def check_sinusoidal_table(
    table,
    *,
    base=10000.0,
    start=0,
    positions=None,
    layout="interleaved",
    spacing="paper",
    first="sin",
    odd_column=None,
    padding_idx=None,
    stored_dtype=None,
    atol=None,
) -> list[str]:
    """Check ``table`` against the sinusoidal formula and the declared conventions;
    name the likely bugs.

    ``table`` is ``(length, d_model)``: a NumPy array or a torch tensor (any device,
    any float dtype, with or without ``requires_grad``); axes of size 1 are dropped, so
    a ``(length, 1, d_model)`` or ``(1, length, d_model)`` buffer is checked as it is
    registered, and a ``(d_model, length)`` table is named as transposed. Row ``r``
    should be position ``start + r`` (``start`` may be negative, as for relative
    offsets), or ``positions[r]`` when ``positions`` (1-D, one per row, fractional
    allowed) is given instead. The conventions are declared in the table's own terms:

    - ``layout``: ``"interleaved"`` (sin, cos, sin, cos, ...) or ``"concat"`` (all
      sines, then all cosines);
    - ``spacing``: ``"paper"`` (``base**(-2i/d_model)``) or ``"tensor2tensor"``
      (``base**(-i/(d_model/2 - 1))``, the lowest frequency exactly ``1/base``);
    - ``first``: ``"sin"`` or ``"cos"``, which of the two comes first in each pair;
    - ``odd_column``: for an odd ``d_model``, ``"sine"`` (the sine of one more pair) or
      ``"zero"`` (the even table with a zero column added); by default ``"zero"`` with
      tensor2tensor's spacing and ``"sine"`` with the paper's;
    - ``padding_idx``: a row that must be all zeros (fairseq, M2M100);
    - ``stored_dtype``: ``"float32"``, ``"float16"`` or ``"bfloat16"`` (or
      ``"float64"``), the precision the table was stored in before it was converted
      to its present dtype; its rounding is then allowed.

    Returns an empty list when every entry is within ``atol`` of what was declared,
    otherwise one readable finding per problem, naming the likely bug or the
    convention that explains the table, in the declaration's own terms. The default
    ``atol`` is what computing the angles in the table's own dtype can cost:
    ``4 * eps * max(1, |position|)`` for each row, but never more than
    ``MAX_TOLERANCE`` (0.01), plus the rounding of ``stored_dtype``.
    """
    array, dtype = _validation.floating_array_or_tensor("table", table)
    while array.ndim > 2 and 1 in array.shape:
        array = array.reshape([n for k, n in enumerate(array.shape) if k != array.shape.index(1)])
    if array.ndim != 2:
        raise ValueError(f"table must be 2-D (length, d_model), got shape {array.shape}")
    findings = []
    count = None if positions is None else np.shape(positions)[0] if np.ndim(positions) else None
    if (
        count is not None
        and count == array.shape[1] != array.shape[0]
        and np.all(np.isfinite(array))
        and _made_of_pairs(array.T.astype(np.float64))
        and not _made_of_pairs(array.astype(np.float64))
    ):
        findings.append(_transposed_finding(array.shape))
        array = array.T
    declaration = {
        "base": _validation.positive_finite("base", base),
        "layout": _validation.choice("layout", layout, LAYOUTS),
        "spacing": _validation.choice("spacing", spacing, SPACINGS),
        "first": _validation.choice("first", first, FIRSTS),
        "odd_column": None
        if odd_column is None
        else _validation.choice("odd_column", odd_column, LONE_COLUMNS),
    }
    if padding_idx is not None:
        padding_idx = _validation.integer("padding_idx", padding_idx, minimum=0)
        if padding_idx >= max(array.shape[0], 1):
            raise ValueError(
                f"padding_idx must be a row of the table, in [0, {array.shape[0] - 1}], "
                f"got {padding_idx}"
            )
    stored = 0.0
    if stored_dtype is not None:
        name = np.dtype(stored_dtype).name if not isinstance(stored_dtype, str) else stored_dtype
        stored = STORAGE[_validation.choice("stored_dtype", str(name), tuple(STORAGE))]
    if atol is not None:
        atol = _validation.positive_finite("atol", atol)
    declared = _validation.positions_or_start(start, positions, array.shape[0], bound=MAX_POSITION)
    if array.size == 0:
        return findings
    values = array.astype(np.float64)
    if not np.all(np.isfinite(values)):
        bad = np.argwhere(~np.isfinite(values))
        return [
            *findings,
            f"{len(bad)} entries are not finite, the first at row {bad[0][0]}, column "
            f"{bad[0][1]}: overflow or a division by zero in the angles?",
        ]
    arguments = (dtype, declaration, declared, padding_idx, stored, atol)
    found = _check(values, *arguments)
    if not findings and _untransposed(found):
        again = _transposed(values, positions, start, *arguments)
        if again is not None:
            return [_transposed_finding(values.shape), *again]
    return findings + found


def _transposed(values, positions, start, dtype, declaration, declared, padding_idx, stored, atol):
    """The findings for ``values.T`` when that is a sinusoidal table (its columns,
    the zero ones left out, are sine-cosine pairs and some explanation fits), or None."""
    probe = values[:, _sample(values.shape[1])].T  # some columns, the zero ones left out
    probe = probe[np.any(probe != 0, axis=1)]
    if len(probe) == 0 or not _made_of_pairs(probe, sampled=True):
        return None
    if positions is None:
        transposed = _validation.positions_or_start(
            start, None, values.shape[1], bound=MAX_POSITION
        )
    elif len(declared) == values.shape[1]:
        transposed = declared
    else:
        return None
    if padding_idx is not None and padding_idx >= values.shape[1]:
        return None
    rows = np.ascontiguousarray(values.T)
    again = _check(rows, dtype, declaration, transposed, padding_idx, stored, atol)
    return None if _untransposed(again) else again


def _transposed_finding(shape) -> str:
    return (
        f"the table is (d_model, length) = {tuple(shape)}: transposed; its columns are the "
        f"positions, pass table.T (or index the table as table[position], not table[:, position])"
    )


def _untransposed(findings: list[str]) -> bool:
    """Whether findings say the table is no sinusoidal table as it stands."""
    return any("not sine-cosine pairs" in f or "no known bug explains" in f for f in findings)


def _check(values, dtype, declaration, declared, padding_idx, stored, atol) -> list[str]:
    """The findings for a finite 2-D float64 table under a validated declaration."""
    length, width = values.shape
    layout, spacing = declaration["layout"], declaration["spacing"]
    # tensor2tensor's spacing comes with its zero column for an odd width (fairseq,
    # M2M100); the paper's with the sine of one more pair (posenc.sinusoidal)
    lone = declaration["odd_column"] or ("zero" if spacing == "tensor2tensor" else "sine")
    asked = Explanation(layout, declaration["first"] == "cos", spacing, "given", lone)
    base = declaration["base"]
    ctx = _Context(values, dtype, base, declared, asked, atol, np.arange(length), stored)
    findings = []
    if padding_idx is not None:
        if not np.all(values[padding_idx] == 0):
            findings.append(
                f"row {padding_idx} (padding_idx) is not all zeros: the padding row was "
                f"not zeroed, or padding_idx is another row"
            )
        ctx = ctx._replace(rows=ctx.rows[ctx.rows != padding_idx])
    if len(ctx.rows) == 0 or _matches_formula(ctx):
        return findings
    zero = np.all(values == 0, axis=1)
    if padding_idx is not None:
        zero[padding_idx] = False
    if zero[ctx.rows].all():
        return [
            *findings,
            "the table is all zeros: the sinusoids were never written (or were erased)",
        ]
    if zero.any():
        listed = np.flatnonzero(zero)
        findings.append(
            f"row{'s' if len(listed) > 1 else ''} {', '.join(map(str, listed[:5]))} "
            f"{'are' if len(listed) > 1 else 'is'} all zeros: looks like a padding row "
            f"of an embedding (declare it with padding_idx=)"
        )
        ctx = ctx._replace(rows=ctx.rows[~zero[ctx.rows]])
    scale = _scale(_taking_part(ctx), layout)
    if scale is not None:
        findings.append(f"every sine-cosine pair has norm {scale:.6g}, not 1: the table is scaled")
        ctx = ctx._replace(table=values / scale)
    if width > 1 and _column_exponent(ctx):
        findings.append(
            "every column has its own frequency, base**(-2c/d_model) for column c: the "
            "sine and cosine of a pair do not share one, and frequencies fall 2x too fast; "
            "looks like i-vs-2i double counting, with 2 * i for the sine and 2 * (i + 1) "
            "for the cosine"
        )
        return findings
    # the sampled rows decide whether to search; a table that only some rows keep from
    # being pairs is told from its explanation (localized) or, failing one, below
    if not _made_of_pairs(_taking_part(ctx), sampled=True):
        return findings + _not_pairs(ctx)
    explained = _explain(ctx)
    if _untransposed(explained) and not _made_of_pairs(_taking_part(ctx)):
        return findings + _not_pairs(ctx)
    return findings + explained


def _explain(ctx: _Context) -> list[str]:
    """The findings for a table of sine-cosine pairs that differs from its declaration.

    In order: an explanation that reproduces every row; one that reproduces all but a
    few rows (a localized corruption, each such row named); storage in a coarser
    format; angles computed in a narrow format; else an unexplained deviation.
    """
    few = _few_columns(ctx)  # a column copied over another: named before any search
    if few is not None:
        return [few]
    jumped = _jump(ctx)  # a position repeated or skipped: before any search
    if jumped is not None:
        return jumped
    fitted_cache: dict = {}  # the base fitted for each way of reading the columns
    found = _search(ctx, fitted_cache)
    if found is not None:
        explanation, _freqs, positions, fitted, _bad = found
        return _describe(explanation, ctx, positions, fitted)
    found = _search(ctx, fitted_cache, local=LOCAL_ROWS)
    if found is not None:
        explanation, freqs, positions, fitted, bad = found
        described = _describe(explanation, ctx, positions, fitted)
        return described + _localized(ctx, explanation, freqs, positions, bad)
    # Storage: every value on a coarser grid, and the table within that grid's rounding.
    sample = ctx.table[ctx.rows[_sample(len(ctx.rows))]]
    grids = on_grid(sample, ctx.dtype)  # a sample first: a fast "no"
    if grids:
        grids = [name for name in on_grid(_taking_part(ctx), ctx.dtype) if name in grids]
    for name in grids:
        stored_ctx = ctx._replace(stored=max(ctx.stored, STORAGE[name]))
        found = _search(stored_ctx, fitted_cache)
        if found is not None:
            explanation, freqs, positions, fitted, _bad = found
            worst = _worst(stored_ctx, explanation, freqs, positions)
            described = _describe(explanation, stored_ctx, positions, fitted)
            return [*described, _storage(worst, name)]
        jumped = _jump(stored_ctx)
        if jumped is not None:
            return [
                *jumped,
                f"every value lies on the {name} grid: the table was stored in {name} and "
                f"converted back; declare stored_dtype={name!r}",
            ]
    # Arithmetic: angles computed in a narrow format, the error widespread and growing
    # with the angle at about the rate that format's rounding makes it grow.
    for name in PRECISIONS:
        found = _search(ctx, fitted_cache, name)
        if found is None:
            continue
        explanation, freqs, positions, fitted, _bad = found
        error, sizes, rows = _errors(ctx, explanation, freqs, positions)
        if _arithmetic(ctx, error, sizes, positions[rows], name):
            described = _describe(explanation, ctx, positions, fitted)
            worst = _worst(ctx, explanation, freqs, positions)
            return [*described, _precision(ctx, worst, positions, name)]
        break  # the first precision that fits shows no growth: not arithmetic
    return [_unexplained(ctx)]


def _jump(ctx: _Context) -> list[str] | None:
    """The finding for rows that are whole positions early or late from some row on (a
    position repeated or skipped, a row inserted or dropped) in a table otherwise as
    declared, or None."""
    asked = ctx.asked
    width = ctx.table.shape[1]
    freqs = _frequencies(asked.frequency, width, ctx.base, None, asked.lone)
    phases = _phases(_taking_part(ctx), asked.layout, asked.swapped, asked.lone)
    if phases.shape[1] == 0:
        return None
    declared = ctx.positions[ctx.rows]
    actual = jumped_positions(estimate_positions(phases, freqs[: phases.shape[1]]), declared)
    if actual is None:
        return None
    if np.any(np.diff(jump_rows(declared, actual)) == 1):
        return None  # one row off and the next back: a row overwritten, named as local
    positions = ctx.positions.copy()
    positions[ctx.rows] = actual
    if not _matches_formula(ctx._replace(positions=positions)):
        return None
    return [jump_finding(declared, actual, ctx.rows)]


def _arithmetic(ctx: _Context, error, sizes, positions, name: str) -> bool:
    """Whether errors look like angles computed in ``name``: off the tolerance in at
    least WIDESPREAD of the rows, growing with the angle, and at a slope within
    SLOPE_FACTOR of what that format's rounding gives."""
    tolerance = _tolerance(ctx.dtype, np.abs(positions), ctx.atol, ctx.stored)
    off = np.mean(np.any(error > tolerance[:, None], axis=1))
    slope = growth(error, sizes)
    if slope is None or off < WIDESPREAD:
        return False
    # refused when the first rows, where that format's error would show and a whole
    # position would not hide in it, are exact: the later error has another cause
    beyond = np.any(error > tolerance[:, None], axis=1)
    first = int(np.argmax(beyond))
    would = PRECISIONS[name] * sizes.max(axis=1)
    telling = (would >= 4 * tolerance) & ((ANGLE_ROUNDINGS + 4) * would < 0.25)
    if int(telling[:first].sum()) >= 8:
        return False
    return PRECISIONS[name] / SLOPE_FACTOR <= slope <= ANGLE_ROUNDINGS * PRECISIONS[name]
