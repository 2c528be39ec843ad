"""Check a sinusoidal table and name the likely bug when it is wrong (chapter 12).

:func:`check_sinusoidal_table` compares a table with the paper's formula. When they
differ it does not stop at "differs": it searches a small space of known mistakes
and conventions for the one that reproduces the table, and reports each way in
which that explanation departs from what was asked for. The space has five axes:

- the column layout (interleaved or ``[sin | cos]`` halves);
- whether sine and cosine are swapped;
- the frequencies: the paper's ``base**(-2i/d)``, twice too fast (the i-vs-2i double
  count), twice too slow, tensor2tensor's ``num_timescales - 1`` spacing, those of a
  table one column wider (an odd ``d_model`` truncated), or a base fitted to the table;
- the positions: as asked, shifted, the same for every row (the batch axis used as
  the position axis), negated, or their absolute values;
- for an odd width, the lone last column: the sine of one more pair or zeros.

Departures are counted from what the caller declares: the layout, the spacing of the
frequencies (the paper's or tensor2tensor's), which of sine and cosine comes first in a
pair, the positions (a start, or any positions, fractional ones included), a padding row
and the precision the table was stored in. A table that matches its declaration gives no
finding; otherwise the explanation with the fewest departures wins, and each departure is
named in the declaration's own terms.

If nothing matches within the tolerance, two kinds of rounding are told apart. Storage:
every value lies on the grid of a coarser format (float32, float16, bfloat16) and the
table is within that format's rounding of the formula. Arithmetic: with the error that
angles computed in a narrow format would add, an explanation matches, and the error is
seen to grow with the angle (fitted, not assumed). Anything else is reported as an
unexplained deviation, with its size. Tables that are not made of sine-cosine pairs at
all, zero rows, scaled tables and non-finite values get findings of their own.
"""

from __future__ import annotations

import itertools
import math
from typing import NamedTuple

import numpy as np

from posenc import _validation
from posenc.checks.positions import estimate_position, number, shift_finding
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


def _frequencies(
    model: str, width: int, base: float, fitted: float | None, lone: str = "sine"
) -> np.ndarray:
    """The ``ceil(width / 2)`` angular frequencies of a frequency model.

    A zero-padded odd width (``lone="zero"``) is the table of width ``width - 1`` with a
    zero column added, as fairseq and diffusers build it: its frequencies are those of
    the even width (the last one, of the zero column, is never used).
    """
    m = (width + 1) // 2
    if lone == "zero" and width % 2:
        width -= 1
    i = np.arange(m, dtype=np.float64)
    if model == "paper":
        return base ** (-2 * i / width)
    if model == "double":
        return base ** (-4 * i / width)
    if model == "half":
        return base ** (-i / width)
    if model == "tensor2tensor":
        return base ** (-i / max(width // 2 - 1, 1))
    if model == "wider":
        return base ** (-2 * i / (width + 1))
    return fitted ** (-2 * i / width)


def _build(rows: np.ndarray, width: int, explanation: Explanation, freqs: np.ndarray):
    """The table (float64) that ``explanation`` predicts at the positions ``rows``.

    Also returns, for each entry, the size of the angle it is the sine or cosine of
    (zero for a zero column).
    """
    angle = rows[:, None] * freqs[None, :]
    sine, cosine = np.sin(angle), np.cos(angle)
    if explanation.swapped:
        sine, cosine = cosine, sine
    table = np.zeros((len(rows), width))
    sizes = np.zeros((len(rows), width))
    n = width // 2
    sin_cols, cos_cols = _pair_columns(width, explanation.layout, explanation.lone)
    table[:, sin_cols] = sine[:, :n]
    table[:, cos_cols] = cosine[:, :n]
    sizes[:, sin_cols] = sizes[:, cos_cols] = np.abs(angle[:, :n])
    if width % 2 and explanation.lone == "sine":
        lone = _lone_column(width, explanation.layout, "sine")
        table[:, lone] = sine[:, n]
        sizes[:, lone] = np.abs(angle[:, n])
    return table, sizes


def _phases(table: np.ndarray, layout: str, swapped: bool, lone: str) -> np.ndarray:
    """``atan2(sin, cos)`` of each full pair of ``table`` read as ``layout``."""
    width = table.shape[1]
    sin_cols, cos_cols = _pair_columns(width, layout, lone)
    sine, cosine = table[:, sin_cols], table[:, cos_cols]
    if swapped:
        sine, cosine = cosine, sine
    return np.arctan2(sine, cosine)


def _fitted_base(table: np.ndarray, layout: str, swapped: bool, lone: str) -> float | None:
    """The base whose frequencies explain how fast each pair's phase turns, or None.

    Each full pair's phase is unwrapped along the rows (a step is at most one
    radian, so no turn is missed) and its slope read over all of them; ``log base``
    is then the weighted mean of ``-width * log(slope_i) / (2 i)``, each pair weighted
    by how precisely its slope fixes the base.
    """
    length, width = table.shape
    n = width // 2
    if length < 2 or n < 2:
        return None
    spaced_for = width - 1 if lone == "zero" and width % 2 else width
    phases = np.unwrap(_phases(table, layout, swapped, lone), axis=0)
    slopes = (phases[-1] - phases[0]) / (length - 1)
    i = np.arange(1, n)
    slopes = slopes[1:]
    usable = slopes > 0
    if not usable.any():
        return None
    estimates = -spaced_for * np.log(slopes[usable]) / (2 * i[usable])
    weights = (i[usable] * slopes[usable]) ** 2
    log_base = float(np.sum(weights * estimates) / np.sum(weights))
    if not 0 < log_base < 700:
        return None
    return math.exp(log_base)


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


def _scaled(ctx: _Context, explanation: Explanation, freqs, sample) -> list[np.ndarray]:
    """Candidate positions ``a + s * declared`` with ``s != 1``, fitted to the rows.

    The position of each sampled row is estimated from its phases, a line is fitted
    through them, and ``s`` and ``a`` are offered rounded to 1, 2, ... significant
    digits (a scale is usually a round number: 1000, 1/4), then unrounded.
    """
    if len(sample) < 3:
        return []
    phases = _phases(ctx.table[sample], explanation.layout, explanation.swapped, explanation.lone)
    estimates = [estimate_position(row, freqs) for row in phases]
    if any(e is None for e in estimates):
        return []
    asked = ctx.positions[sample]
    if np.ptp(asked) == 0:
        return []
    scale, offset = np.polyfit(asked, np.array(estimates), 1)
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


def _compare(ctx: _Context, explanation: Explanation, freqs, positions, which, precision):
    """Whether ``explanation`` reproduces the table rows ``which``.

    The tolerance is that of the larger of the positions asked for and explained
    (capped, so that explaining a table by huge positions gains nothing), plus,
    when ``precision`` names a format, what angles computed in it can cost.
    """
    predicted, sizes = _build(positions[which], ctx.table.shape[1], explanation, freqs)
    error = np.abs(ctx.table[which] - predicted)
    larger = np.maximum(np.abs(ctx.positions[which]), np.abs(positions[which]))
    tolerance = _tolerance(ctx.dtype, larger, ctx.atol, ctx.stored)[:, None]
    if precision is not None:
        tolerance = tolerance + ANGLE_ROUNDINGS * PRECISIONS[precision] * np.maximum(1, sizes)
        if np.mean(tolerance < DISCRIMINATING) < MIN_DISCRIMINATING:
            return False
    return bool(np.all(error <= tolerance))


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


def _search(ctx: _Context, fitted_cache: dict, precision: str | None = None):
    """The first explanation (fewest departures) that reproduces the table, or None."""
    width = ctx.table.shape[1]
    rows = ctx.rows
    sample = rows[_sample(len(rows))]
    for explanation in _explanations(ctx):
        key = (explanation.layout, explanation.swapped, explanation.lone)
        fitted = None
        if explanation.frequency == "fitted":
            if key not in fitted_cache:
                fitted_cache[key] = _fitted_base(ctx.table[rows[:FIT_ROWS]], *key)
            fitted = fitted_cache[key]
            if fitted is None or _is_named_base(fitted, ctx.base, width, explanation.lone):
                continue
        freqs = _frequencies(explanation.frequency, width, ctx.base, fitted, explanation.lone)
        if explanation.positions == "scaled":
            candidates = _scaled(ctx, explanation, freqs, sample)
        else:
            shift = None
            if explanation.positions in ("shifted", "constant"):
                row = ctx.table[sample[:1]]
                estimate = estimate_position(
                    _phases(row, explanation.layout, explanation.swapped, explanation.lone)[0],
                    freqs,
                )
                if estimate is None or abs(estimate) > MAX_POSITION:
                    continue
                shift = float(round(estimate))
                if explanation.positions == "shifted":
                    shift = float(round(estimate - ctx.positions[sample[0]]))
            candidates = [_positions(explanation.positions, ctx, shift)]
        for positions in candidates:
            if positions is None:
                continue
            if _compare(ctx, explanation, freqs, positions, sample, precision) and _compare(
                ctx, explanation, freqs, positions, rows, precision
            ):
                return explanation, freqs, positions, fitted
    return None


def _is_named_base(fitted: float, base: float, width: int, lone: str = "sine") -> bool:
    """True when a fitted base is one another frequency model already names."""
    if lone == "zero" and width % 2:
        width -= 1
    named = [base, base**2, math.sqrt(base)]
    if width >= 4:
        named.append(base ** (width / (2 * max(width // 2 - 1, 1))))
    named.append(base ** (width / (width + 1)))
    return any(abs(math.log(fitted / b)) < 1e-6 for b in named if b > 0)


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
            "tensor2tensor's spacing pads an odd d_model with"
        )
    if width % 2 and explanation.lone == "zero" and asked.lone == "sine":
        findings.append(
            f"the last column is all zeros: the table of width {width - 1} with a zero "
            f"column added for an odd d_model (fairseq, tensor2tensor, diffusers), not "
            f"the sine of one more pair"
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


def _close(a: float, b: float) -> bool:
    return abs(math.log(a / b)) < 1e-6


def _errors(ctx: _Context, explanation: Explanation, freqs, positions):
    """Error and angle size of every entry of the rows that take part, under an explanation."""
    rows = ctx.rows
    predicted, sizes = _build(positions[rows], ctx.table.shape[1], explanation, freqs)
    return np.abs(ctx.table[rows] - predicted), sizes


def _precision(ctx: _Context, error, positions, name: str) -> str:
    """The finding for angles computed in the format ``name``: where the error is worst."""
    row, column = np.unravel_index(np.argmax(error), error.shape)
    return (
        f"errors grow with the angle {growth_rate(name)}, up to {error[row, column]:.2g} at "
        f"position {number(positions[ctx.rows][row])} (column {column}): looks like angles "
        f"computed in {name}"
    )


def _storage(error, name: str) -> str:
    """The finding for a table rounded to the format ``name`` when it was stored."""
    return (
        f"every value lies on the {name} grid and the table is within {name}'s rounding "
        f"of the formula (largest error {error.max():.2g}): the "
        f"table was stored in {name} and converted back, a storage rounding, not an error "
        f"in the angles; declare stored_dtype={name!r}"
    )


def _unexplained(ctx: _Context) -> str:
    """The finding for a table of sine-cosine pairs that no explanation reproduces."""
    freqs = _frequencies(ctx.asked.frequency, ctx.table.shape[1], ctx.base, None, ctx.asked.lone)
    error, _sizes = _errors(ctx, ctx.asked, freqs, ctx.positions)
    row, column = np.unravel_index(np.argmax(error), error.shape)
    return (
        f"the table is made of sine-cosine pairs but differs from what was declared by up "
        f"to {error[row, column]:.2g} (position {number(ctx.positions[ctx.rows][row])}, column "
        f"{column}); the error is not a storage grid and does not grow with the angle, and "
        f"no known bug explains it"
    )


def _not_pairs(ctx: _Context) -> list[str]:
    """Findings for a table whose columns do not form sine-cosine pairs."""
    values = ctx.table[ctx.rows]
    mean, std = float(values.mean()), float(values.std())
    sin_cols, cos_cols = _pair_columns(values.shape[1], ctx.layout)
    norms = values[:, sin_cols] ** 2 + values[:, cos_cols] ** 2
    described = (
        f"sin^2 + cos^2 ranges over {norms.min():.2g}..{norms.max():.2g}, not 1"
        if norms.size
        else "no pairs"
    )
    findings = [f"the columns are not sine-cosine pairs ({described}): not a sinusoidal table"]
    if values.size > 1 and std > 0 and abs(mean) <= 5 * std / math.sqrt(values.size):
        findings.append(
            f"values have mean {mean:.2g} and standard deviation {std:.2g}: looks like a "
            f"random weight initialisation overwrote the table"
        )
    return findings


def _column_exponent(ctx: _Context) -> bool:
    """Whether column ``c`` is the sine (even c) or cosine (odd c) at ``base**(-2c/d)``.

    That is the published double-counting loop: ``2 * i`` for the sine of column ``i``
    and ``2 * (i + 1)`` for the cosine in column ``i + 1``.
    """
    width = ctx.table.shape[1]
    if width < 4 or ctx.layout != "interleaved":
        return False
    column = np.arange(width)
    positions = ctx.positions[ctx.rows]
    angle = positions[:, None] * ctx.base ** (-2 * column / width)
    predicted = np.where(column % 2 == 0, np.sin(angle), np.cos(angle))
    tolerance = _tolerance(ctx.dtype, positions, ctx.atol, ctx.stored)[:, None]
    return bool(np.all(np.abs(ctx.table[ctx.rows] - predicted) <= tolerance))


def _made_of_pairs(values: np.ndarray) -> bool:
    """Whether some layout makes every column pair a point of the unit circle."""
    width = values.shape[1]
    for layout, lone in itertools.product(LAYOUTS, LONE_COLUMNS):
        sine, cosine = _pair_columns(width, layout, lone)
        norms = values[:, sine] ** 2 + values[:, cosine] ** 2
        if np.all(np.abs(norms - 1) <= PAIR_NORM):
            return True
    return False


def _scale(values: np.ndarray, layout: str) -> float | None:
    """The common norm of every sine-cosine pair if they share one other than 1."""
    for candidate in (layout, *[other for other in LAYOUTS if other != layout]):
        sin_cols, cos_cols = _pair_columns(values.shape[1], candidate)
        if len(sin_cols) == 0:
            return None
        norms = np.sqrt(values[:, sin_cols] ** 2 + values[:, cos_cols] ** 2)
        scale = float(np.median(norms))
        if scale > 0 and np.all(np.abs(norms / scale - 1) < 1e-3) and abs(scale - 1) > 1e-3:
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
    padding_idx=None,
    stored_dtype=None,
    atol=None,
) -> list[str]:
    """Check ``table`` against the sinusoidal formula and the declared conventions;
    name the likely bugs.

    ``table`` is ``(length, d_model)``: a NumPy array or a torch tensor (any device,
    any float dtype, with or without ``requires_grad``). Row ``r`` should be position
    ``start + r`` (``start`` may be negative, as for relative offsets), or
    ``positions[r]`` when ``positions`` (1-D, one per row, fractional allowed) is
    given instead. The conventions are declared in the table's own terms:

    - ``layout``: ``"interleaved"`` (sin, cos, sin, cos, ...) or ``"concat"`` (all
      sines, then all cosines);
    - ``spacing``: ``"paper"`` (``base**(-2i/d_model)``) or ``"tensor2tensor"``
      (``base**(-i/(d_model/2 - 1))``, the lowest frequency exactly ``1/base``);
    - ``first``: ``"sin"`` or ``"cos"``, which of the two comes first in each pair;
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
    if array.ndim != 2:
        raise ValueError(f"table must be 2-D (length, d_model), got shape {array.shape}")
    length = array.shape[0]
    base = _validation.positive_finite("base", base)
    layout = _validation.choice("layout", layout, LAYOUTS)
    spacing = _validation.choice("spacing", spacing, SPACINGS)
    first = _validation.choice("first", first, FIRSTS)
    declared = _validation.positions_or_start(start, positions, length, bound=MAX_POSITION)
    if padding_idx is not None:
        padding_idx = _validation.integer("padding_idx", padding_idx, minimum=0)
        if padding_idx >= max(length, 1):
            raise ValueError(
                f"padding_idx must be a row of the table, in [0, {length - 1}], got {padding_idx}"
            )
    stored = 0.0
    if stored_dtype is not None:
        name = np.dtype(stored_dtype).name if not isinstance(stored_dtype, str) else stored_dtype
        stored = STORAGE[_validation.choice("stored_dtype", str(name), tuple(STORAGE))]
    if atol is not None:
        atol = _validation.positive_finite("atol", atol)
    if array.size == 0:
        return []
    values = array.astype(np.float64)
    if not np.all(np.isfinite(values)):
        bad = np.argwhere(~np.isfinite(values))
        return [
            f"{len(bad)} entries are not finite, the first at row {bad[0][0]}, column "
            f"{bad[0][1]}: overflow or a division by zero in the angles?"
        ]
    width = values.shape[1]
    # tensor2tensor's spacing comes with its zero column for an odd width (fairseq,
    # M2M100); the paper's with the sine of one more pair (posenc.sinusoidal)
    lone = "zero" if spacing == "tensor2tensor" else "sine"
    asked = Explanation(layout, first == "cos", spacing, "given", lone)
    ctx = _Context(values, dtype, base, declared, asked, atol, np.arange(length), stored)
    findings = []
    if padding_idx is not None:
        if np.all(values[padding_idx] == 0):
            ctx = ctx._replace(rows=ctx.rows[ctx.rows != padding_idx])
        else:
            findings.append(
                f"row {padding_idx} (padding_idx) is not all zeros: the padding row was "
                f"not zeroed, or padding_idx is another row"
            )
            ctx = ctx._replace(rows=ctx.rows[ctx.rows != padding_idx])
    if len(ctx.rows) == 0 or _matches_formula(ctx):
        return findings
    zero = np.all(values == 0, axis=1)
    zero[[r for r in range(length) if r not in set(ctx.rows.tolist())]] = False
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
        ctx = ctx._replace(rows=np.array([r for r in ctx.rows if not zero[r]]))
    scale = _scale(values[ctx.rows], layout)
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
    if not _made_of_pairs(ctx.table[ctx.rows]):
        return findings + _not_pairs(ctx)
    fitted_cache: dict = {}  # the base fitted for each way of reading the columns
    found = _search(ctx, fitted_cache)
    if found is not None:
        explanation, freqs, positions_found, fitted = found
        return findings + _describe(explanation, ctx, positions_found, fitted)
    # Storage: every value on a coarser grid, and the table within that grid's rounding.
    for name in on_grid(ctx.table[ctx.rows], dtype):
        stored_ctx = ctx._replace(stored=max(ctx.stored, STORAGE[name]))
        found = _search(stored_ctx, fitted_cache)
        if found is not None:
            explanation, freqs, positions_found, fitted = found
            error, _ = _errors(stored_ctx, explanation, freqs, positions_found)
            described = _describe(explanation, stored_ctx, positions_found, fitted)
            return findings + described + [_storage(error, name)]
    # Arithmetic: angles computed in a narrow format, seen growing with the angle.
    for name in PRECISIONS:
        found = _search(ctx, fitted_cache, name)
        if found is None:
            continue
        explanation, freqs, positions_found, fitted = found
        error, sizes = _errors(ctx, explanation, freqs, positions_found)
        if growth(error, sizes) is not None:
            described = _describe(explanation, ctx, positions_found, fitted)
            return findings + described + [_precision(ctx, error, positions_found, name)]
        break  # the first precision that fits shows no growth: not arithmetic
    return [*findings, _unexplained(ctx)]
