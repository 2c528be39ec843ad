"""Check a RoPE cos/sin cache and name what is wrong with it (chapter 12).

Models that use RoPE keep the cosines and sines of every position's angles in a
cache. :func:`check_rope_cache` compares such a cache with the angles ``p * theta_i``
computed in float64, within the rounding of the cache's dtype (and of
``stored_dtype``, the format it was stored in), and, when they differ, tries the
explanations that real code produces until one reproduces the cache:

- the shape: ``(seq, d)``, ``(batch, seq, d)`` (identical rows, or one row of
  ``positions`` each), leading singleton axes squeezed, and an odd width named;
- the pairing: the two halves of the columns (``"half"``, as Hugging Face and
  GPT-NeoX store them) or each angle twice in a row (``"interleaved"``);
- an attention scale: cos and sin multiplied by a common factor (YaRN's, LongRoPE's);
- storage: every value on the bfloat16 or float16 grid, an undeclared storage format;
- the angles computed in float32, float16 or bfloat16, an error that grows with the
  position (accepted with ``allow=("float32_angles",)`` for float32);
- one or a few corrupted entries, named by row and column;
- cos and sin swapped, and sin with the wrong sign;
- positions shifted: an off-by-one, a KV-cache offset not added; rows whose positions
  jump (a position id repeated or skipped from some row on, as chunked prefill or
  packing can make), tried before any precision explanation;
- the frequencies rounded to bfloat16 or float16 (inv_freq cast with the model);
- two slips at once: cos and sin swapped, sin negated or an off-by-one, with one of the
  frequency findings below;
- the frequencies: the 2i exponent bug (``base**(-2*arange(0, d, 2)/d)``), a base
  off by a round factor (x10, a typo such as 10e4 for 1e4), partial rotary (frequencies
  spaced for the whole head), position interpolation, YaRN or Llama 3 scaling
  (:mod:`posenc.long_context`) with their factor (Llama 3's defaults tried at any
  positions), or another base (NTK-aware or dynamic NTK scaling is one).

A cache computed from float64 angles and declared correctly gives no finding. No
finding names a factor that rounds to 1.
"""

from __future__ import annotations

import math

import numpy as np

from posenc import _validation
from posenc.checks.positions import (
    estimate_position,
    estimate_positions,
    jump_finding,
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
    round_to,
)
from posenc.long_context import scaled_frequencies

__all__ = ["ALLOWANCES", "PAIRINGS", "check_rope_cache"]

PAIRINGS = ("half", "interleaved")
ALLOWANCES = ("float32_angles",)
"""What ``allow=`` may name: ``"float32_angles"`` accepts the error of angles computed
in float32 (Hugging Face's rotary embedding computes them so)."""
# Context lengths tried for the scaling methods that need one (powers of two).
ORIGINAL_LENGTHS = tuple(2**k for k in range(7, 21))
# Round factors tried for a base off by a factor, most likely first.
BASE_FACTORS = (10.0, 0.1, 100.0, 0.01, 1000.0, 0.001)
# At most this many entries (and 1% of them), in at most LOCAL_ROWS rows, are a local
# corruption rather than a wrong convention.
LOCAL_ENTRIES = 8
SWAPPED = (
    "cos and sin are swapped: the array passed as cos holds the sines and the one "
    "passed as sin the cosines; exchange them"
)
NEGATED = (
    "sin has the wrong sign: the cache holds sin(-p * theta), a rotation the other "
    "way (a sign slip in rotate_half or a conjugate); negate sin"
)
# Angles computed in a narrow format leave errors in at least this fraction of the rows.
WIDESPREAD = 0.05
LOCAL_ROWS = 2
# Copies of a pair this close are one form with noise, not the one-column-per-pair form.
NEAR_TWINS = 0.05
# Rows tried first (evenly spaced, first and last included) before a whole cache is.
SAMPLE_ROWS = 64


class _Cache:
    """A 2-D cache at unit scale, in the columns of its own layout, and how to predict it."""

    def __init__(self, cos, sin, pairs, layout, tolerance, f32_log):
        self.cos, self.sin = cos, sin
        self.pairs, self.layout = pairs, layout  # layout: "half", "interleaved" or "pairs"
        self.tolerance = tolerance
        self.f32_log = f32_log  # None, or log(base) for the float32-angle allowance

    def expand(self, values: np.ndarray) -> np.ndarray:
        if self.layout == "half":
            return np.concatenate([values, values], axis=1)
        if self.layout == "interleaved":
            return np.repeat(values, 2, axis=1)
        return values

    def allowed(self, angles, precision=None, log_base=0.0):
        allowed = self.tolerance + 4 * 2.0**-53 * np.abs(angles)
        terms = [(precision, ANGLE_ROUNDINGS + (log_base or 0.0))] if precision else []
        if self.f32_log is not None:
            terms.append(("float32", ANGLE_ROUNDINGS + self.f32_log))
        for name, rounds in terms:
            allowed = allowed + rounds * PRECISIONS[name] * np.maximum(1, np.abs(angles))
        return allowed

    def errors(self, positions, freqs, *, swap=False, sign=1.0, rows=None):
        """|cache - prediction| of every entry (of ``rows``), and the angle of each."""
        cache_cos, cache_sin = self.cos, self.sin
        if rows is not None:
            positions, cache_cos, cache_sin = positions[rows], cache_cos[rows], cache_sin[rows]
        angles = self.expand(positions[:, None] * freqs[None, :])
        cos, sin = np.cos(angles), sign * np.sin(angles)
        if swap:
            cos, sin = sin, cos
        return np.maximum(np.abs(cache_cos - cos), np.abs(cache_sin - sin)), angles

    def fits(self, positions, freqs, precision=None, log_base=None, **how) -> bool:
        """Whether every entry is within the allowance of the prediction; a sample of
        rows is tried first, so that a wrong explanation is rejected quickly."""
        length = len(positions)
        sample = np.unique(np.linspace(0, length - 1, min(length, SAMPLE_ROWS)).astype(int))
        for rows in (sample, None) if length > 2 * SAMPLE_ROWS else (None,):
            error, angles = self.errors(positions, freqs, rows=rows, **how)
            if not np.all(error <= self.allowed(angles, precision, log_base)):
                return False
        return True


def _leading(values: np.ndarray) -> np.ndarray:
    while values.ndim > 2 and values.shape[0] == 1:
        values = values[0]
    return values


def _round_distinct(value: float, other: float) -> str | None:
    """``value`` with the fewest digits (3 to 6) that tell it from ``other``; None when
    even six digits do not (a factor that rounds to ``other``)."""
    for digits in range(3, 7):
        text = f"{value:.{digits}g}"
        if float(text) != float(f"{other:.{digits}g}"):
            return text
    return None


def check_rope_cache(
    cos,
    sin,
    *,
    base=10000.0,
    pairing="half",
    start=0,
    positions=None,
    rotary_dim=None,
    frequencies=None,
    attention_scale=1.0,
    stored_dtype=None,
    atol=None,
    allow=(),
) -> list[str]:
    """Check a RoPE cos/sin cache; name what explains it when it is wrong.

    ``cos`` and ``sin`` are NumPy arrays or torch tensors (any device, any float dtype,
    with or without ``requires_grad``) of the same shape, one row per position (row
    ``r`` is position ``start + r``, or ``positions[r]``), in one of these forms:

    - ``(positions, d)``, one column per rotated feature in the pairing's order: for
      ``"half"`` the d/2 pair values, then the same d/2 again (Hugging Face); for
      ``"interleaved"`` each pair's value twice in a row;
    - ``(positions, d // 2)``, one column per pair;
    - ``(batch, positions, ...)``: rows that are identical, or one row of a 2-D
      ``positions`` (batch, positions) each (Hugging Face's ``position_ids``); leading
      axes of size one, as in ``(1, 1, positions, d)``, are dropped.

    ``d`` is the number of rotated features: ``rotary_dim`` for partial rotary (which
    fixes the form), else read from the cache. The expected frequencies are
    ``base**(-2i/d)``, or ``frequencies`` (one per pair, as
    :func:`posenc.long_context.scaled_frequencies` returns them), and cos and sin are
    expected multiplied by ``attention_scale``. The tolerance is four units of
    rounding of the cache's dtype, times the scale, plus the rounding of
    ``stored_dtype`` (``"float32"``, ``"float16"`` or ``"bfloat16"``: the format the
    cache was stored in before it was converted to its present dtype), or ``atol``
    when given. ``allow=("float32_angles",)`` also accepts the error of angles
    computed in float32, as Hugging Face's rotary embedding computes them.

    Returns ``[]`` when the cache is what was declared, else one finding per problem.
    """
    cos_values, cos_dtype = _validation.floating_array_or_tensor("cos", cos)
    sin_values, sin_dtype = _validation.floating_array_or_tensor("sin", sin)
    if cos_values.shape != sin_values.shape:
        raise ValueError(
            f"cos and sin must have the same shape, got {cos_values.shape} and {sin_values.shape}"
        )
    cos_values, sin_values = _leading(cos_values), _leading(sin_values)
    if cos_values.ndim not in (2, 3):
        raise ValueError(
            f"cos and sin must be 2-D (positions, d) or (positions, d // 2), or 3-D with a "
            f"batch axis first, got shape {cos_values.shape}"
        )
    options = {
        "base": _validation.positive_finite("base", base),
        "pairing": _validation.choice("pairing", pairing, PAIRINGS),
        "attention_scale": _validation.positive_finite("attention_scale", attention_scale),
        "rotary_dim": rotary_dim,
        "frequencies": frequencies,
        "dtype": max((cos_dtype, sin_dtype), key=lambda name: EPS.get(name, 0.0)),
    }
    if rotary_dim is not None:
        options["rotary_dim"] = _validation.integer("rotary_dim", rotary_dim, minimum=2)
        if rotary_dim % 2:
            raise ValueError(f"rotary_dim must be even (pairs of features), got {rotary_dim}")
    if frequencies is not None:
        frequencies, _ = _validation.floating_array_or_tensor("frequencies", frequencies)
        frequencies = frequencies.astype(np.float64)
        if frequencies.ndim != 1 or not np.all(np.isfinite(frequencies)):
            raise ValueError(f"frequencies must be 1-D and finite, got shape {frequencies.shape}")
        if rotary_dim is not None and len(frequencies) != rotary_dim // 2:
            raise ValueError(
                f"frequencies must have rotary_dim // 2 = {rotary_dim // 2} entries, got "
                f"{len(frequencies)}"
            )
        options["frequencies"] = frequencies
    stored = None
    if stored_dtype is not None:
        name = stored_dtype if isinstance(stored_dtype, str) else str(stored_dtype)
        name = name.removeprefix("torch.")
        if not isinstance(stored_dtype, str) and name not in STORAGE:
            name = np.dtype(stored_dtype).name
        stored = _validation.choice("stored_dtype", name, tuple(STORAGE))
    options["stored"] = stored
    if atol is not None:
        atol = _validation.positive_finite("atol", atol)
    options["atol"] = atol
    allow = (allow,) if isinstance(allow, str) else tuple(allow)
    for item in allow:
        _validation.choice("allow", item, ALLOWANCES)
    options["float32_angles"] = "float32_angles" in allow

    grid = None
    if positions is not None:
        grid, _ = _validation.floating_array_or_tensor("positions", positions, integers=True)
        grid = grid.astype(np.float64)
    if cos_values.ndim == 3:
        return _check_batch(cos_values, sin_values, start, grid, options)
    if grid is not None and grid.ndim == 2:
        raise ValueError(
            f"positions must be 1-D (one per row), or 2-D (batch, positions) for a cache "
            f"with a batch axis, got shape {grid.shape}"
        )
    declared = _validation.positions_or_start(start, grid, cos_values.shape[0])
    return _check(cos_values, sin_values, declared, **options)


def _check_batch(cos, sin, start, grid, options) -> list[str]:
    """A (batch, positions, d) cache: each row against its positions, or identical rows."""
    batch, length = cos.shape[:2]
    if grid is not None and grid.ndim == 2:
        if grid.shape != (batch, length):
            raise ValueError(
                f"positions must have shape (batch, positions) = {(batch, length)}, got "
                f"{grid.shape}"
            )
        per_row = [_check(cos[b], sin[b], grid[b], **options) for b in range(batch)]
        if all(found == per_row[0] for found in per_row):
            return per_row[0]
        return [f"batch row {b}: {f}" for b, found in enumerate(per_row) for f in found]
    if not (
        np.array_equal(cos, cos[:1].repeat(batch, 0))
        and np.array_equal(sin, sin[:1].repeat(batch, 0))
    ):
        return [
            f"the {batch} batch rows of the cache differ: give positions of shape "
            f"({batch}, {length}), one row of positions per batch row (position_ids)"
        ]
    declared = _validation.positions_or_start(start, grid, length)
    return _check(cos[0], sin[0], declared, **options)


def _odd_width(width: int) -> str:
    return (
        f"the cache has an odd width, {width} columns: RoPE rotates pairs of features, so "
        f"a column was dropped or added (a slice such as [..., :rotary_dim - 1], or "
        f"rotary_dim = int(head_dim * rotary_pct) odd?)"
    )


def _check(
    cos_values,
    sin_values,
    declared,
    *,
    base,
    pairing,
    attention_scale,
    rotary_dim,
    frequencies,
    dtype,
    stored,
    atol,
    float32_angles,
) -> list[str]:
    width = cos_values.shape[1]
    pairs = None
    if frequencies is not None:
        pairs = len(frequencies)
    elif rotary_dim is not None:
        pairs = rotary_dim // 2
    if width % 2 and (
        (pairs is None and _one_column_missing(cos_values))
        or (pairs is not None and width != pairs)
    ):
        return [_odd_width(width)]
    # An odd width is the one-column-per-pair form only when the declaration fits it.
    odd = width % 2 == 1 and pairs is None
    if pairs is not None and width not in (pairs, 2 * pairs):
        raise ValueError(
            f"the cache has {width} columns, but {pairs} pairs need {2 * pairs} (one per "
            f"feature) or {pairs} (one per pair)"
        )
    if cos_values.size == 0:
        return []
    c = cos_values.astype(np.float64)
    s = sin_values.astype(np.float64)
    if not (np.all(np.isfinite(c)) and np.all(np.isfinite(s))):
        return ["cos or sin has entries that are not finite: overflow in the angles?"]

    findings: list[str] = []
    layout = "pairs"
    if width % 2 == 0 and (pairs is None or width == 2 * pairs):
        half = width // 2
        mismatches = {p: _mismatches(c, s, half, p) for p in PAIRINGS}
        other = "interleaved" if pairing == "half" else "half"
        few = max(1, min(LOCAL_ENTRIES, c.size // 100))
        if mismatches[pairing] == 0 or (mismatches[pairing] <= few and mismatches[other] > few):
            layout = pairing
        elif mismatches[other] <= few:
            where = "twice in a row" if other == "interleaved" else "in two halves"
            findings.append(
                f"the columns hold each pair's value {where}: pairing={other!r}, not "
                f"pairing={pairing!r}; rotating with the wrong pairing mixes features "
                f"of different pairs"
            )
            layout = other
        else:
            twins = _twins(c, s, half, pairing, declared, base)
            if twins is not None:
                return [*findings, twins]
            if _twin_gap(c, s, half, pairing) < NEAR_TWINS:
                layout = pairing  # every copy nearly equal: noise on the declared form
            elif pairs is not None:
                return [
                    "the columns do not hold each pair's value twice, neither in two "
                    "halves (pairing='half') nor twice in a row (pairing='interleaved')"
                ]
    pairs = width // 2 if layout != "pairs" else width
    d = 2 * pairs
    first = slice(0, pairs) if layout != "interleaved" else slice(0, None, 2)
    cos_pairs, sin_pairs = c[:, first], s[:, first]

    # Storage: the values lie on a coarser grid than the cache's dtype and declaration.
    own = max(STORAGE.get(dtype, 0.0), STORAGE[stored] if stored else 0.0)
    grids = [g for g in on_grid(np.concatenate([c.ravel(), s.ravel()]), dtype) if STORAGE[g] > own]
    found_grid = grids[-1] if grids else None
    rounding = max(own, STORAGE[found_grid] if found_grid else 0.0)

    # The scale: cos^2 + sin^2 is the same for every entry.
    norms = np.hypot(cos_pairs, sin_pairs)
    scale = float(np.median(norms))
    if scale == 0 or np.any(np.abs(norms / scale - 1) > 0.05):
        return [
            *findings,
            f"cos and sin are not the cosine and sine of one angle: cos^2 + sin^2 ranges "
            f"over {norms.min() ** 2:.3g}..{norms.max() ** 2:.3g}",
        ]
    # a common factor: off the declared one by more than the rounding, and by more than
    # the norms scatter (noise on every entry moves the median norm, but scatters it too)
    scatter = float(np.max(np.abs(norms - scale))) / scale
    if abs(scale / attention_scale - 1) > max(
        4 * rounding + 8 * EPS.get(dtype, 0.0) + 1e-12, 4 * scatter
    ):
        text = _round_distinct(scale, attention_scale)
        if text is not None:
            yarn = ""
            if scale > 1.005:
                stretch = math.exp((scale - 1) / 0.1)
                yarn = f"; YaRN's 0.1 ln(s) + 1 gives it for a stretch factor s = {stretch:.3g}"
            findings.append(
                f"cos and sin are multiplied by {text}, not attention_scale="
                f"{attention_scale:g}: an attention scale{yarn}; declare attention_scale="
            )
        else:
            scale = attention_scale
    else:
        scale = attention_scale
    eps = max(EPS.get(dtype, 0.0), EPS["float64"])
    expected = frequencies if frequencies is not None else base ** (-np.arange(pairs) * 2.0 / d)
    log_base = (
        max(math.log(base), float(np.log(1 / expected[expected > 0].min())))
        if np.any(expected > 0)
        else math.log(base)
    )

    def cache_with(rounding_unit):
        tolerance = atol if atol is not None else scale * (4 * eps + 2 * rounding_unit)
        return _Cache(
            c / scale,
            s / scale,
            pairs,
            layout,
            tolerance / scale,
            log_base + 4 if float32_angles else None,
        )

    cache = cache_with(own)
    if cache.fits(declared, expected):
        return findings
    if odd and not (found_grid and cache_with(rounding).fits(declared, expected)):
        return [*findings, _odd_width(width)]
    if found_grid is not None:
        cache = cache_with(rounding)
        storage = (
            f"every value lies on the {found_grid} grid: the cache was stored in "
            f"{found_grid} and converted back, a storage rounding, not a wrong angle or "
            f"factor; declare stored_dtype={found_grid!r}"
        )
        if cache.fits(declared, expected):
            error, _ = cache.errors(declared, expected)
            within = (
                f"converted back (it differs from the declared angles by up to "
                f"{error.max() * scale:.2g}, within {found_grid}'s rounding)"
            )
            return [*findings, storage.replace("converted back", within)]
        findings.append(storage)
    explained = _explain(cache, declared, expected, base, d, frequencies, log_base)
    if cache.f32_log is None and "no known mistake" in explained[-1]:
        # The same explanations, with float32 angles allowed: a cache built as torch
        # builds it (float32 angles) with another mistake as well.
        cache.f32_log = log_base + 4
        also = _explain(cache, declared, expected, base, d, frequencies, log_base)
        if "no known mistake" not in also[-1]:
            explained = [
                *also,
                "the angles also carry float32 rounding, as torch code that computes "
                "position * inv_freq in float32 does; declare allow=('float32_angles',) "
                "if that is how the cache is built",
            ]
    return findings + explained


def _twin_gap(c, s, half, pairing) -> float:
    """The largest difference between the two copies of any pair in ``pairing``."""
    first = np.arange(half) if pairing == "half" else np.arange(0, 2 * half, 2)
    second = first + half if pairing == "half" else first + 1
    return float(
        max(np.abs(c[:, first] - c[:, second]).max(), np.abs(s[:, first] - s[:, second]).max())
    )


def _twins(c, s, half, pairing, declared, base) -> str | None:
    """The finding for a cache whose two copies of a few pairs differ, or None.

    In either pairing every pair's value is stored twice. When only a few pairs' copies
    differ, one copy was written after the cache was built; the copy that still matches
    the declared angles (at the declared base) names the other as the changed one.
    """
    first = np.arange(half) if pairing == "half" else np.arange(0, 2 * half, 2)
    second = first + half if pairing == "half" else first + 1
    differ = np.any(c[:, first] != c[:, second], axis=0)
    differ |= np.any(s[:, first] != s[:, second], axis=0)
    pairs = np.flatnonzero(differ)
    if len(pairs) == 0 or len(pairs) > max(2, half // 16):
        return None
    sentences = []
    for j in pairs[:3]:
        a, b = int(first[j]), int(second[j])
        gap = np.maximum(np.abs(c[:, a] - c[:, b]), np.abs(s[:, a] - s[:, b]))
        rows = int(np.sum(gap > 0))
        angle = declared * base ** (-2.0 * j / (2 * half))
        off = [
            float(
                np.max(np.maximum(np.abs(c[:, k] - np.cos(angle)), np.abs(s[:, k] - np.sin(angle))))
            )
            for k in (a, b)
        ]
        text = (
            f"columns {a} and {b}, the two copies of pair {j}, differ by up to "
            f"{gap.max():.2g} in {rows} row{'s' if rows != 1 else ''}"
        )
        if min(off) < 1e-3 * max(off):
            good, bad = (a, b) if off[0] < off[1] else (b, a)
            text += f"; column {good} matches the declared angles, column {bad} does not"
        sentences.append(text)
    return (
        "; ".join(sentences) + f": pairing={pairing!r} stores each pair's value twice, and "
        f"one copy was changed after the cache was built (a write to one half of the "
        f"cache, or a slice that updates one copy)"
    )


def _mismatches(c, s, half, pairing) -> int:
    if pairing == "half":
        return int(np.sum(c[:, :half] != c[:, half:]) + np.sum(s[:, :half] != s[:, half:]))
    return int(np.sum(c[:, 0::2] != c[:, 1::2]) + np.sum(s[:, 0::2] != s[:, 1::2]))


def _one_column_missing(c) -> bool:
    """Whether an odd-width cache is a paired one with a column dropped or added."""
    width = c.shape[1]
    upper = (width + 1) // 2
    return bool(
        np.array_equal(c[:, : width - upper], c[:, upper:])
        or np.array_equal(c[:, : width - upper + 1], c[:, upper - 1 :])
        or np.array_equal(c[:, 0 : width - 1 : 2], c[:, 1::2])
    )


def _explain(cache: _Cache, declared, expected, base, d, frequencies, log_base) -> list[str]:
    """The findings for a cache that its declaration does not reproduce."""
    local = _local(cache, declared, expected)
    if local is not None:
        return local
    if cache.fits(declared, expected, swap=True):
        return [SWAPPED]
    if cache.fits(declared, expected, sign=-1.0):
        return [NEGATED]
    shifted = _shift(cache, declared, expected)
    if shifted is not None:
        return [shifted]
    # Two slips at once: cos and sin swapped or sin negated, and the positions shifted.
    for swap, sign in ((True, 1.0), (False, -1.0), (True, -1.0)):
        shifted = _shift(cache, declared, expected, swap=swap, sign=sign)
        if shifted is not None:
            return [*([SWAPPED] if swap else []), *([NEGATED] if sign < 0 else []), shifted]
    # Rows at the wrong positions from some row on: a repeated or skipped position id.
    jumped = _jump(cache, declared, expected)
    if jumped is not None:
        return [jumped]
    for swap in (False, True):
        rounded = _rounded_frequencies(cache, declared, expected, log_base, swap=swap)
        if rounded is not None:
            return [*([SWAPPED] if swap else []), rounded]
    # Angles computed in a narrow format: the declared frequencies, an error that grows,
    # and widespread: in many rows beyond what the next finer format's angles can cost
    # (one corrupted entry in a float32-angle cache is not float16 arithmetic).
    finer = None
    for name in PRECISIONS:
        extra = log_base if name == "float32" else 0.0
        if cache.fits(declared, expected, name, extra):
            error, angles = cache.errors(declared, expected)
            beyond = error > cache.allowed(angles, finer, log_base if finer == "float32" else 0.0)
            widespread = beyond.any(axis=1).mean() >= WIDESPREAD
            slope = growth(error, np.abs(angles))
            if _clean_start(cache, error, angles, beyond, name):
                break
            if widespread and slope is not None and slope >= PRECISIONS[name] / 16:
                row = int(np.argmax(error.max(axis=1)))
                rate = growth_rate(name, ANGLE_ROUNDINGS + extra)
                if name == "float32":
                    rate = (
                        rate[:-1] + f": {ANGLE_ROUNDINGS} for the product, ln(base) for the power)"
                    )
                    how = (
                        "positions times frequencies in float32, as Hugging Face's rotary "
                        "embedding computes them on purpose; if that is how the cache is "
                        "built, declare allow=('float32_angles',), otherwise compute the "
                        "angles in float64 and round once"
                    )
                else:
                    how = (
                        f"positions times frequencies in {name}, as torch code that builds "
                        f"the cache in the model's dtype does; compute them in float32 or "
                        f"float64 and round once"
                    )
                return [
                    f"errors grow with the position {rate}, up to "
                    f"{error.max():.2g} at position {number(declared[row])}: looks like "
                    f"angles computed in {name} ({how})"
                ]
            break
        finer = name
    found = _frequency_findings(cache, declared, expected, base, d, frequencies, log_base)
    if found is not None:
        return found
    # Two slips at once: other frequencies, and cos and sin swapped, sin negated or the
    # positions off by one.
    how = (cache.pairs, cache.layout, cache.tolerance, cache.f32_log)
    variants = [
        ([SWAPPED], _Cache(cache.sin, cache.cos, *how), 0.0),
        ([NEGATED], _Cache(cache.cos, -cache.sin, *how), 0.0),
        *(([shift_finding(declared[0] + k, declared[0])], cache, k) for k in (1.0, -1.0)),
    ]
    for before, other, shift in variants:
        found = _frequency_findings(
            other, declared + shift, expected, base, d, frequencies, log_base
        )
        if found is not None:
            return [*before, *found]
    error, _ = cache.errors(declared, expected)
    row, column = np.unravel_index(np.argmax(error), error.shape)
    return [
        f"the cache differs from the declared angles by up to {error[row, column]:.2g} "
        f"(position {number(declared[row])}, column {column}), and no known mistake "
        f"explains it"
    ]


def _clean_start(cache: _Cache, error, angles, beyond, name) -> bool:
    """Whether the first rows, where angles computed in ``name`` would leave an error
    above the finer allowance while that allowance is still far below a whole turn of a
    position, show none: then the format's arithmetic is not what made the later error."""
    rows = beyond.any(axis=1)
    if not rows.any():
        return False
    first = int(np.argmax(rows))
    top = np.abs(angles).max(axis=1)
    would = PRECISIONS[name] * np.maximum(top, 1e-300)
    telling = (would >= 4 * (cache.tolerance + 4 * 2.0**-53 * top)) & (
        (ANGLE_ROUNDINGS + 4) * would < 0.25
    )
    return int(telling[:first].sum()) >= 8


def _jump(cache: _Cache, declared, expected) -> str | None:
    """The finding for rows that are whole positions early or late from some row on
    (a position repeated or skipped), or None."""
    columns = slice(0, None, 2) if cache.layout == "interleaved" else slice(0, cache.pairs)
    phases = np.arctan2(cache.sin[:, columns], cache.cos[:, columns])
    actual = jumped_positions(estimate_positions(phases, expected), declared)
    if actual is None or not cache.fits(actual, expected):
        return None
    return jump_finding(declared, actual)


def _rounded_frequencies(cache: _Cache, declared, expected, log_base, swap=False) -> str | None:
    """The finding for frequencies rounded to bfloat16 or float16 (inv_freq held in the
    model's dtype), the angles then computed from them, or None."""
    for name in ("bfloat16", "float16"):
        rounded = round_to(expected, name)
        if np.array_equal(rounded, expected):
            continue
        if cache.fits(declared, rounded, swap=swap) or cache.fits(
            declared, rounded, "float32", log_base, swap=swap
        ):
            return (
                f"the frequencies are the declared ones rounded to {name}: inv_freq was held "
                f"in {name} (model.to(torch.{name}) casts the buffer) and the angles computed "
                f"from it; keep inv_freq in float32 (recompute it after the cast)"
            )
    return None


def _local(cache: _Cache, declared, expected) -> list[str] | None:
    """One or a few corrupted entries, named where they are, or None."""
    error, angles = cache.errors(declared, expected)
    bad = error > cache.allowed(angles)
    count = int(bad.sum())
    if count == 0 or count > min(LOCAL_ENTRIES, max(1, bad.size // 100)):
        return None
    rows, columns = np.nonzero(bad)
    if len(set(rows.tolist())) > LOCAL_ROWS:
        return None
    where = "; ".join(
        f"row {r} (position {number(declared[r])}), column {k} differs by {error[r, k]:.2g}"
        for r, k in zip(rows[:3], columns[:3], strict=True)
    )
    entries = "one entry" if count == 1 else f"{count} entries"
    return [
        f"{where}, while every other entry matches: {entries} corrupted (a local "
        f"corruption, not a wrong convention or factor)"
    ]


def _shift(cache: _Cache, declared, expected, *, swap=False, sign=1.0) -> str | None:
    """The finding for rows at positions shifted by a whole number, or None (``swap``
    and ``sign`` read the cache as cos and sin exchanged, or sin negated)."""
    columns = slice(0, None, 2) if cache.layout == "interleaved" else slice(0, cache.pairs)
    cos, sin = cache.cos[0, columns], cache.sin[0, columns]
    if swap:
        cos, sin = sin, cos
    phases = np.arctan2(sign * sin, cos)
    candidates = [1.0, -1.0]
    begins = estimate_position(phases, expected)
    if begins is not None and abs(begins - declared[0]) < 2**40:
        candidates.insert(0, float(round(begins - declared[0])))
    if declared[0] != 0:
        candidates.append(-float(declared[0]))
    for shift in dict.fromkeys(candidates):
        if shift == 0 or not cache.fits(declared + shift, expected, swap=swap, sign=sign):
            continue
        first, meant = declared[0] + shift, declared[0]
        if first == 0 and meant > 0:
            return (
                f"rows start at position 0, not {number(meant)}: the KV-cache offset "
                f"({number(meant)} cached tokens) was not added to the positions; build "
                f"the rows from position_ids that start at the cache length"
            )
        return shift_finding(first, meant)
    return None


def _frequency_findings(cache: _Cache, declared, expected, base, d, frequencies, log_base):
    """A finding naming other frequencies that reproduce the cache, or None."""

    def fits(freqs):
        return cache.fits(declared, freqs) or cache.fits(declared, freqs, "float32", log_base)

    pairs = d // 2
    i = np.arange(pairs, dtype=np.float64)
    plain = frequencies is None
    if plain and fits(base ** (-4 * i / d)):
        return [
            f"frequencies are base**(-4i/{d}), spaced for {d // 2} features, half the "
            f"cache's {d}: the 2i exponent bug, base**(-2 * arange(0, d, 2) / d), which "
            f"counts each pair twice; use arange(0, d, 2) / d"
        ]
    round_base = _round_base(fits, base, d, plain, [f for f in BASE_FACTORS if f > 1])
    if round_base is not None:
        return round_base
    # Llama 3's scaling with its published defaults, left undeclared.
    if plain:
        freqs, _ = scaled_frequencies(
            d, base=base, method="llama3", factor=8.0, original_length=8192
        )
        if fits(freqs):
            return [
                "frequencies are Llama 3 scaling (rope_scaling 'llama3' with its defaults: "
                "factor 8, low and high frequency factors 1 and 4, original context 8192) "
                "that was not declared; declare frequencies= from "
                "posenc.long_context.scaled_frequencies(method='llama3') to check it as such"
            ]
    fitted = _fitted_frequencies(cache, declared)
    exponent = _fitted_exponent(fitted) if fitted is not None else None
    # Partial rotary: the declared base, spaced for a wider head than the rotated width.
    if plain and exponent is not None and exponent > 0:
        width = math.log(base) / exponent
        whole = round(width)
        if abs(width - whole) < 0.02 * whole and whole % 2 == 0 and whole > d:
            for other in dict.fromkeys((whole, whole - 2, whole + 2)):
                if fits(base ** (-2 * i / other)):
                    return [
                        f"frequencies are spaced for {other} features, base**(-2i/{other}), "
                        f"not for the cache's {d}: looks like partial rotary, rotary_dim = "
                        f"{d} of a head of {other}, with the frequencies spaced for the "
                        f"head; space them for the rotated part, arange(0, {d}, 2) / {d}"
                    ]
    # A base smaller by a round factor, once partial rotary does not explain it.
    round_base = _round_base(fits, base, d, plain, [f for f in BASE_FACTORS if f < 1])
    if round_base is not None:
        return round_base
    # Every frequency divided by one factor: position interpolation.
    if fitted is not None and fitted[-1] > 0:
        slowest = float(expected[-1] / fitted[-1])
        factors = sorted({_round(slowest, 2), _round(slowest, 1), float(round(slowest))})
        for factor in [f for f in factors if f >= 1.05 or 0 < f <= 0.95]:
            if fits(expected / factor):
                whose = "the declared frequencies" if not plain else "base**(-2i/d)"
                return [
                    f"every frequency is {whose} divided by {factor:g}: position "
                    f"interpolation (rope_scaling 'linear', factor {factor:g}) that was not "
                    f"declared; declare frequencies= with it, or remove it"
                ]
        if plain and slowest >= 1.05:
            for method in ("yarn", "llama3"):
                for length in ORIGINAL_LENGTHS:
                    for factor in factors:
                        if factor < 1.05:
                            continue
                        freqs, _ = scaled_frequencies(
                            d, base=base, method=method, factor=factor, original_length=length
                        )
                        if fits(freqs):
                            return [
                                f"frequencies are {method} scaling with factor {factor:g} and "
                                f"original_length {length} (posenc.long_context); declare "
                                f"frequencies= (and attention_scale=) to check it as such"
                            ]
    # Another base (NTK-aware scaling is one).
    if plain and exponent is not None and exponent > 0:
        fitted_base = math.exp(exponent * d)
        for candidate in (
            _round(fitted_base, 3),
            _round(fitted_base, 4),
            _round(fitted_base, 6),
            fitted_base,
        ):
            if _round(candidate / base, 6) == 1 or not fits(candidate ** (-2 * i / d)):
                continue
            ntk = ""
            factor = (candidate / base) ** ((d - 2) / d)
            if factor > 1.01 and abs(factor - round(factor)) < 0.01:
                ntk = (
                    f"; NTK-aware scaling gives this base for alpha = {round(factor)}: "
                    f"the alpha of a static 'ntk' factor, or what dynamic NTK ('dynamic') "
                    f"computes as factor * length / original - (factor - 1) (factor 2 at "
                    f"twice the original context gives 3)"
                )
            if candidate > base and float(f"{candidate:.2g}") != candidate:
                ntk += (
                    "; a larger base is also what dynamic NTK scaling (rope_scaling "
                    "'dynamic') computes once the sequence passes the original context, "
                    "raising the base with the sequence length: if the model uses it, "
                    "declare the base it computes for this length"
                )
            return [
                f"frequencies fit base = {number(candidate)}, not {number(base)}: a wrong base{ntk}"
            ]
    return None


def _round_base(fits, base, d, plain, factors) -> list[str] | None:
    """The finding for frequencies of a base off by one of ``factors``, or None."""
    i = np.arange(d // 2, dtype=np.float64)
    for factor in factors if plain else ():
        if fits((base * factor) ** (-2 * i / d)):
            typo = ""
            if base == 1e4 and factor == 10:
                typo = " (a typo such as 10e4, which is 100000, for 1e4)"
            how = f"{factor:g} times" if factor > 1 else f"1/{1 / factor:g} of"
            return [
                f"frequencies fit base = {number(base * factor)}, {how} the declared base "
                f"{number(base)}{typo}: a wrong base; fix the base where the cache is built"
            ]
    return None


def _fitted_frequencies(cache: _Cache, positions) -> np.ndarray | None:
    """Each pair's rotation speed, read from its phase along the rows, or None.

    The positions must advance by a constant step of at most one (so that no pair turns
    by more than a radian from row to row and no turn is missed).
    """
    if len(positions) < 3:
        return None
    steps = np.diff(positions)
    if not np.allclose(steps, steps[0]) or not 0 < steps[0] <= 1:
        return None
    columns = slice(0, cache.pairs) if cache.layout != "interleaved" else slice(0, None, 2)
    phases = np.unwrap(np.arctan2(cache.sin[:, columns], cache.cos[:, columns]), axis=0)
    return np.polyfit(positions, phases, 1)[0]


def _fitted_exponent(fitted: np.ndarray) -> float | None:
    """``log(base) / d`` for the frequencies ``base**(-2i/d)`` that best fit ``fitted``."""
    i = np.arange(1, len(fitted))
    slopes = fitted[1:]
    usable = slopes > 0
    if not usable.any():
        return None
    weights = (i[usable] * slopes[usable]) ** 2
    estimates = -np.log(slopes[usable]) / (2 * i[usable])
    return float(np.sum(weights * estimates) / np.sum(weights))


def _round(value: float, digits: int = 3) -> float:
    return float(f"{value:.{digits}g}")
