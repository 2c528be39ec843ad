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

The explanation with the fewest departures wins. If none matches within the tolerance,
the search is repeated with the error that angles computed in float32, float16 or
bfloat16 arithmetic would add, and the first precision that explains the table is
named. Tables that are not made of sine-cosine pairs at all, zero
rows, scaled tables and non-finite values get findings of their own.
"""

from __future__ import annotations

import itertools
import math
from typing import NamedTuple

import numpy as np

from posenc import _validation
from posenc.encoding import LAYOUTS, MAX_POSITION, sinusoidal

# The default tolerance never exceeds this: an entry further off is always reported.
MAX_TOLERANCE = 0.01
# Every sine-cosine pair of a table the search may explain has sin^2 + cos^2 within this of 1.
PAIR_NORM = 0.1
# Rows from which a base is fitted (consecutive, from the first): enough to fix it.
FIT_ROWS = 512
# Rows compared while searching; the winning explanation is then checked on all rows.
SAMPLE_ROWS = 24
# Angles computed in a narrow format are off by up to about 3 roundings of it (position,
# frequency, product); an entry may then be off by ANGLE_ROUNDINGS * u * max(1, |angle|).
ANGLE_ROUNDINGS = 4
# Such a comparison is only evidence where that bound is small: at least this fraction of
# the entries compared must have a bound below DISCRIMINATING.
DISCRIMINATING = 0.5
MIN_DISCRIMINATING = 0.25
# Unit roundoff of the formats whose arithmetic the precision finding can name, finest first.
PRECISIONS = {"float32": 2.0**-24, "float16": 2.0**-11, "bfloat16": 2.0**-8}

FREQUENCY_MODELS = ("paper", "double", "half", "tensor2tensor", "wider", "fitted")
POSITION_MODELS = ("given", "shifted", "constant", "negated", "absolute")
LONE_COLUMNS = ("sine", "zero")


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


def _frequencies(model: str, width: int, base: float, fitted: float | None) -> np.ndarray:
    """The ``ceil(width / 2)`` angular frequencies of a frequency model."""
    m = (width + 1) // 2
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


def _wrap(angle: np.ndarray) -> np.ndarray:
    return (angle + np.pi) % (2 * np.pi) - np.pi


def _estimate_position(phases: np.ndarray, freqs: np.ndarray) -> float | None:
    """The position whose angles best explain one row's ``phases``, or None.

    The two lowest frequencies beat against each other: their phase difference turns
    with the small difference of the frequencies, which gives a first estimate over a
    long range (from -0.16 to 1.5 million at d_model = 512). Each frequency, from the lowest
    up, then refines it by the phase it has left over, as the digits of a number are
    read from the most significant down.
    """
    order = np.argsort(freqs[: len(phases)])
    order = order[freqs[order] > 0]
    if len(order) == 0:
        return None
    low = order[0]
    position = phases[low] / freqs[low]
    if len(order) > 1 and freqs[order[1]] > freqs[low]:
        beat = freqs[order[1]] - freqs[low]
        # a turn of the beat read in [-0.1, 0.9) turns: positions from a little below 0
        turn = (phases[order[1]] - phases[low] + 0.2 * np.pi) % (2 * np.pi) - 0.2 * np.pi
        position = turn / beat
    for k in order:
        position += _wrap(phases[k] - freqs[k] * position) / freqs[k]
    return float(position) if np.isfinite(position) else None


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
    phases = np.unwrap(_phases(table, layout, swapped, lone), axis=0)
    slopes = (phases[-1] - phases[0]) / (length - 1)
    i = np.arange(1, n)
    slopes = slopes[1:]
    usable = slopes > 0
    if not usable.any():
        return None
    estimates = -width * np.log(slopes[usable]) / (2 * i[usable])
    weights = (i[usable] * slopes[usable]) ** 2
    log_base = float(np.sum(weights * estimates) / np.sum(weights))
    if not 0 < log_base < 700:
        return None
    return math.exp(log_base)


def _tolerance(dtype: np.dtype, rows: np.ndarray, atol: float | None) -> np.ndarray:
    """Per-row tolerance: what computing the angles in the table's own dtype can cost.

    The largest angle of a row is its position (the first pair turns one radian per
    position), so a row gets ``4 * eps * max(1, |p|)``, with eps of the table's dtype,
    but never more than ``MAX_TOLERANCE``: past that the dtype cannot hold the angles,
    and a table that far off is reported whatever its dtype.
    """
    if atol is not None:
        return np.full(len(rows), atol)
    eps = max(float(np.finfo(dtype).eps), float(np.finfo(np.float64).eps))
    return np.minimum(4 * eps * np.maximum(1.0, np.abs(rows)), MAX_TOLERANCE)


def _sample(length: int) -> np.ndarray:
    """Row indices to search on: the first two, the last, and some evenly between."""
    picks = np.linspace(0, length - 1, min(length, SAMPLE_ROWS)).round().astype(np.int64)
    return np.unique(np.concatenate([[0, min(1, length - 1)], picks]))


class _Context(NamedTuple):
    table: np.ndarray  # float64 values
    dtype: np.dtype
    base: float
    start: int
    layout: str
    atol: float | None
    rows: np.ndarray  # table row indices that take part (not zero rows)


def _positions(model: str, ctx: _Context, shift: float | None) -> np.ndarray | None:
    """The positions of every table row under a position model, or None if undefined."""
    asked = ctx.start + np.arange(ctx.table.shape[0], dtype=np.float64)
    if model == "given":
        return asked
    if model == "negated":
        return -asked
    if model == "absolute":
        return np.abs(asked) if ctx.start < 0 else None
    if shift is None:
        return None
    if model == "shifted":
        return None if shift == ctx.start else shift + np.arange(ctx.table.shape[0])
    return np.full(ctx.table.shape[0], float(shift)) if ctx.table.shape[0] > 1 else None


def _departures(explanation: Explanation, ctx: _Context) -> int:
    asked = Explanation(ctx.layout, False, "paper", "given", "sine")
    return sum(a != b for a, b in zip(explanation, asked, strict=True))


def _explanations(ctx: _Context):
    """Every point of the search space, fewest departures first."""
    width = ctx.table.shape[1]
    lone = LONE_COLUMNS if width % 2 else ("sine",)
    points = [
        Explanation(*p)
        for p in itertools.product(LAYOUTS, (False, True), FREQUENCY_MODELS, POSITION_MODELS, lone)
    ]
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
    asked = ctx.start + which.astype(np.float64)
    larger = np.maximum(np.abs(asked), np.abs(positions[which]))
    tolerance = _tolerance(ctx.dtype, larger, ctx.atol)[:, None]
    if precision is not None:
        tolerance = tolerance + ANGLE_ROUNDINGS * PRECISIONS[precision] * np.maximum(1, sizes)
        if np.mean(tolerance < DISCRIMINATING) < MIN_DISCRIMINATING:
            return False
    return bool(np.all(error <= tolerance))


def _matches_formula(ctx: _Context) -> bool:
    """Whether the whole table is within tolerance of what was asked for.

    For positions from 0 up the reference is :func:`posenc.sinusoidal` in float64
    (fast, and within a few float64 roundings of the formula); negative starts are
    evaluated directly.
    """
    length, width = ctx.table.shape
    positions = _positions("given", ctx, None)
    if ctx.start >= 0:
        reference = sinusoidal(length, width, base=ctx.base, start=ctx.start, layout=ctx.layout)
    else:
        asked = Explanation(ctx.layout, False, "paper", "given", "sine")
        reference = _build(positions, width, asked, _frequencies("paper", width, ctx.base, None))[0]
    np.subtract(reference, ctx.table, out=reference)
    np.abs(reference, out=reference)
    return bool(np.all(reference <= _tolerance(ctx.dtype, positions, ctx.atol)[:, None]))


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
            if fitted is None or _is_named_base(fitted, ctx.base, width):
                continue
        freqs = _frequencies(explanation.frequency, width, ctx.base, fitted)
        shift = None
        if explanation.positions in ("shifted", "constant"):
            row = ctx.table[sample[:1]]
            estimate = _estimate_position(
                _phases(row, explanation.layout, explanation.swapped, explanation.lone)[0],
                freqs,
            )
            if estimate is None or abs(estimate) > MAX_POSITION:
                continue
            shift = float(round(estimate)) - float(sample[0])
            if explanation.positions == "constant":
                shift = float(round(estimate))
        positions = _positions(explanation.positions, ctx, shift)
        if positions is None:
            continue
        if _compare(ctx, explanation, freqs, positions, sample, precision) and _compare(
            ctx, explanation, freqs, positions, rows, precision
        ):
            return explanation, freqs, positions, fitted
    return None


def _is_named_base(fitted: float, base: float, width: int) -> bool:
    """True when a fitted base is one another frequency model already names."""
    named = [base, base**2, math.sqrt(base)]
    if width >= 4:
        named.append(base ** (width / (2 * max(width // 2 - 1, 1))))
    named.append(base ** (width / (width + 1)))
    return any(abs(math.log(fitted / b)) < 1e-6 for b in named if b > 0)


def _describe(explanation: Explanation, ctx: _Context, positions, fitted) -> list[str]:
    """One sentence for each way ``explanation`` departs from what was asked."""
    findings = []
    width = ctx.table.shape[1]
    if explanation.layout != ctx.layout:
        shape = {
            "interleaved": "sin and cos alternating, as in the paper",
            "concat": "all sines, then all cosines, as tensor2tensor and fairseq",
        }[explanation.layout]
        findings.append(
            f"the columns are in the {explanation.layout} layout ({shape}), not "
            f"{ctx.layout}: looks like a table saved in one layout read by code written "
            f"for the other"
        )
    if explanation.swapped:
        findings.append(
            "sin and cos are swapped: the sine columns hold cosines (position 0 reads "
            "1 where it should read 0)"
        )
    if explanation.frequency != "paper":
        findings.append(_frequency_finding(explanation.frequency, ctx.base, width, fitted))
    first = ctx.rows[0]
    if explanation.positions == "shifted":
        findings.append(_shift_finding(int(positions[0]), ctx.start))
    elif explanation.positions == "constant":
        findings.append(
            f"every row is the row of position {int(positions[first])}: the position "
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
    if explanation.lone == "zero":
        findings.append(
            "the last column is all zeros: zero-padding for an odd d_model (fairseq, "
            "tensor2tensor), not the sine of one more pair"
        )
    return findings


def _shift_finding(begins: int, start: int) -> str:
    """The sentence for rows that start at another position than asked."""
    shift = begins - start
    if shift == 2:
        why = "looks like fairseq's or M2M100's numbering, which starts at padding_idx + 1 = 2"
    elif abs(shift) == 1:
        why = "an off-by-one: positions counted from 1, or from 0 where 1 was meant"
    else:
        why = f"the positions are shifted by {shift} (a start offset added or forgotten?)"
    return f"rows start at position {begins}, not {start}: {why}"


def _frequency_finding(model: str, base: float, width: int, fitted: float | None) -> str:
    """The sentence for a frequency model other than the paper's."""
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
            "lowest is exactly 1/base (tensor2tensor, fairseq), not with the paper's "
            "2i/d_model"
        )
    if model == "wider":
        return (
            f"frequencies are spaced for d_model = {width + 1} but the table has {width} "
            f"columns: looks like an odd d_model that lost its last column "
            f"(d_model // 2 pairs)"
        )
    typo = " (10e4 is 100000, not 10000)" if _close(fitted, 10 * base) else ""
    return f"frequencies fit base = {fitted:.6g}, not {base:.6g}: wrong base{typo}"


def _close(a: float, b: float) -> bool:
    return abs(math.log(a / b)) < 1e-6


def _precision(ctx: _Context, explanation: Explanation, freqs, positions, name: str) -> str:
    """The finding for angles computed in the format ``name``: where the error is worst."""
    rows = ctx.rows
    predicted = _build(positions[rows], ctx.table.shape[1], explanation, freqs)[0]
    error = np.abs(ctx.table[rows] - predicted)
    row, column = np.unravel_index(np.argmax(error), error.shape)
    return (
        f"errors grow with the angle, up to {error[row, column]:.2g} at position "
        f"{int(positions[rows][row])} (column {column}): looks like angles computed in {name}"
    )


def _unexplained(ctx: _Context) -> str:
    """The finding for a table of sine-cosine pairs that no explanation reproduces."""
    asked = Explanation(ctx.layout, False, "paper", "given", "sine")
    positions = _positions("given", ctx, None)
    freqs = _frequencies("paper", ctx.table.shape[1], ctx.base, None)
    predicted = _build(positions[ctx.rows], ctx.table.shape[1], asked, freqs)[0]
    error = np.abs(ctx.table[ctx.rows] - predicted)
    row, column = np.unravel_index(np.argmax(error), error.shape)
    return (
        f"the table is made of sine-cosine pairs but differs from the formula by up to "
        f"{error[row, column]:.2g} (position {int(positions[ctx.rows][row])}, column "
        f"{column}), and no known bug explains it"
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
    positions = ctx.start + ctx.rows.astype(np.float64)
    angle = positions[:, None] * ctx.base ** (-2 * column / width)
    predicted = np.where(column % 2 == 0, np.sin(angle), np.cos(angle))
    tolerance = _tolerance(ctx.dtype, positions, ctx.atol)[:, None]
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
    table, *, base=10000.0, start=0, layout="interleaved", atol=None
) -> list[str]:
    """Check ``table`` against the paper's sinusoidal formula; name the likely bugs.

    ``table`` is ``(length, d_model)``; row ``r`` should be position ``start + r``
    (``start`` may be negative, as for relative offsets), in ``layout`` with ``base``.
    Returns an empty list when every entry is within ``atol`` of the formula, otherwise
    one readable finding per problem, each naming the likely bug where the table lets
    the check tell. The default ``atol`` is what computing the angles in the table's
    own dtype can cost: ``4 * eps * max(1, |position|)`` for each row, but never more
    than ``MAX_TOLERANCE`` (0.01). Correct float16, float32 and float64 tables pass,
    and so do tables whose angles were computed in float32 while that costs less
    than 0.01 (the PyTorch tutorial's, up to tens of thousands of positions).
    """
    array = _validation.floating_array("table", table)
    if array.ndim != 2:
        raise ValueError(f"table must be 2-D (length, d_model), got shape {array.shape}")
    base = _validation.positive_finite("base", base)
    start = _validation.integer("start", start, minimum=-MAX_POSITION, maximum=MAX_POSITION)
    layout = _validation.choice("layout", layout, LAYOUTS)
    if atol is not None:
        atol = _validation.positive_finite("atol", atol)
    length = array.shape[0]
    if start + length > MAX_POSITION:
        raise ValueError(f"start + length must be at most 2**53, got {start} + {length}")
    if array.size == 0:
        return []
    values = array.astype(np.float64)
    if not np.all(np.isfinite(values)):
        bad = np.argwhere(~np.isfinite(values))
        return [
            f"{len(bad)} entries are not finite, the first at row {bad[0][0]}, column "
            f"{bad[0][1]}: overflow or a division by zero in the angles?"
        ]
    ctx = _Context(values, array.dtype, base, start, layout, atol, np.arange(length))
    if _matches_formula(ctx):
        return []
    findings = []
    zero = np.all(values == 0, axis=1)
    if zero.all():
        return ["the table is all zeros: the sinusoids were never written (or were erased)"]
    if zero.any():
        listed = np.flatnonzero(zero)
        findings.append(
            f"row{'s' if len(listed) > 1 else ''} {', '.join(map(str, listed[:5]))} "
            f"{'are' if len(listed) > 1 else 'is'} all zeros: looks like a padding row "
            f"(padding_idx) of an embedding"
        )
        ctx = ctx._replace(rows=np.flatnonzero(~zero))
    scale = _scale(values[ctx.rows], layout)
    if scale is not None:
        findings.append(f"every sine-cosine pair has norm {scale:.6g}, not 1: the table is scaled")
        ctx = ctx._replace(table=values / scale)
    if _column_exponent(ctx):
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
        explanation, freqs, positions, fitted = found
        return findings + _describe(explanation, ctx, positions, fitted)
    for name in PRECISIONS:
        found = _search(ctx, fitted_cache, name)
        if found is not None:
            explanation, freqs, positions, fitted = found
            return (
                findings
                + _describe(explanation, ctx, positions, fitted)
                + [_precision(ctx, explanation, freqs, positions, name)]
            )
    return [*findings, _unexplained(ctx)]
