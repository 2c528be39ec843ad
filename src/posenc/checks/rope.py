"""Check a RoPE cos/sin cache and name what is wrong with it (chapter 12).

Models that use RoPE keep the cosines and sines of every position's angles in a
cache. :func:`check_rope_cache` compares such a cache with the angles ``p * theta_i``
computed in float64 and, when they differ, tries the explanations that real code
produces, in order, until one reproduces the cache:

- the pairing: the two halves of the columns (``"half"``, as Hugging Face and
  GPT-NeoX store them) or each angle twice in a row (``"interleaved"``);
- an attention scale: cos and sin multiplied by a common factor (YaRN's);
- the angles computed in float32, float16 or bfloat16, an error that grows with the
  position (fitted, not assumed);
- partial rotary: frequencies spaced for another width than the cache's;
- a wrong base;
- scaled frequencies: position interpolation, NTK-aware, YaRN or Llama 3 scaling
  (:mod:`posenc.long_context`), with their factor.

A cache computed from float64 angles and declared correctly gives no finding.
"""

from __future__ import annotations

import math

import numpy as np

from posenc import _validation
from posenc.checks.tolerances import ANGLE_ROUNDINGS, EPS, PRECISIONS, growth, growth_rate
from posenc.long_context import scaled_frequencies

__all__ = ["PAIRINGS", "check_rope_cache"]

PAIRINGS = ("half", "interleaved")
# Context lengths tried for the scaling methods that need one (powers of two).
ORIGINAL_LENGTHS = tuple(2**k for k in range(7, 21))


def _pairs(values: np.ndarray, pairs: int, pairing: str) -> tuple[np.ndarray, bool]:
    """One column per pair from a cache of one column per feature, and whether every
    pair's value appears twice in the places ``pairing`` puts them."""
    if pairing == "half":
        first, second = values[:, :pairs], values[:, pairs : 2 * pairs]
    else:
        first, second = values[:, 0::2], values[:, 1::2]
    return first, bool(np.array_equal(first, second))


def _explained(cos, sin, positions, frequencies, tolerance, precision=None) -> bool:
    """Whether cos and sin (one column per pair, unit scale) are those of the angles
    ``positions * frequencies``, within ``tolerance`` (plus, when ``precision`` names a
    format, what computing the angles in it can cost)."""
    angles = positions[:, None] * frequencies[None, :]
    allowed = tolerance + 4 * 2.0**-53 * np.abs(angles)
    if precision is not None:
        allowed = allowed + ANGLE_ROUNDINGS * PRECISIONS[precision] * np.maximum(1, np.abs(angles))
    return bool(
        np.all(np.abs(cos - np.cos(angles)) <= allowed)
        and np.all(np.abs(sin - np.sin(angles)) <= allowed)
    )


def _fitted_frequencies(cos, sin, positions) -> np.ndarray | None:
    """Each pair's rotation speed, read from its phase along the rows, or None.

    The positions must advance by a constant step of at most one (so that no pair turns
    by more than a radian from row to row and no turn is missed).
    """
    if len(positions) < 3:
        return None
    steps = np.diff(positions)
    if not np.allclose(steps, steps[0]) or not 0 < steps[0] <= 1:
        return None
    phases = np.unwrap(np.arctan2(sin, cos), axis=0)
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
) -> list[str]:
    """Check a RoPE cos/sin cache; name what explains it when it is wrong.

    ``cos`` and ``sin`` are NumPy arrays or torch tensors (any device, any float dtype,
    with or without ``requires_grad``) of the same shape, one row per position (row
    ``r`` is position ``start + r``, or ``positions[r]``), in one of two forms:

    - ``(positions, d)``, one column per rotated feature in the pairing's order: for
      ``"half"`` the d/2 pair values, then the same d/2 again (Hugging Face); for
      ``"interleaved"`` each pair's value twice in a row;
    - ``(positions, d // 2)``, one column per pair.

    ``d`` is the number of rotated features: ``rotary_dim`` for partial rotary (which
    fixes the form), else read from the cache. The expected frequencies are
    ``base**(-2i/d)``, or ``frequencies`` (one per pair, as
    :func:`posenc.long_context.scaled_frequencies` returns them), and cos and sin are
    expected multiplied by ``attention_scale``. The tolerance is four units of
    rounding of the cache's dtype, times the scale: angles computed in float64 and
    rounded once stay within it at any position, float32 angles do not.

    Returns ``[]`` when the cache is what was declared, else one finding per problem.
    """
    cos_values, cos_dtype = _validation.floating_array_or_tensor("cos", cos)
    sin_values, sin_dtype = _validation.floating_array_or_tensor("sin", sin)
    if cos_values.shape != sin_values.shape:
        raise ValueError(
            f"cos and sin must have the same shape, got {cos_values.shape} and {sin_values.shape}"
        )
    if cos_values.ndim != 2:
        raise ValueError(
            f"cos and sin must be 2-D (positions, d) or (positions, d // 2), got shape "
            f"{cos_values.shape}"
        )
    length, width = cos_values.shape
    base = _validation.positive_finite("base", base)
    pairing = _validation.choice("pairing", pairing, PAIRINGS)
    attention_scale = _validation.positive_finite("attention_scale", attention_scale)
    declared = _validation.positions_or_start(start, positions, length)
    if rotary_dim is not None:
        rotary_dim = _validation.integer("rotary_dim", rotary_dim, minimum=2)
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
    if cos_values.size == 0:
        return []
    c = cos_values.astype(np.float64)
    s = sin_values.astype(np.float64)
    if not (np.all(np.isfinite(c)) and np.all(np.isfinite(s))):
        return ["cos or sin has entries that are not finite: overflow in the angles?"]

    findings: list[str] = []
    # The form: one column per feature (each pair's value twice) or one per pair.
    pairs = None
    if frequencies is not None:
        pairs = len(frequencies)
    elif rotary_dim is not None:
        pairs = rotary_dim // 2
    if pairs is not None and width not in (pairs, 2 * pairs):
        raise ValueError(
            f"the cache has {width} columns, but {pairs} pairs need {2 * pairs} (one per "
            f"feature) or {pairs} (one per pair)"
        )
    per_feature = width % 2 == 0 and (pairs is None or width == 2 * pairs)
    if per_feature:
        pairs = width // 2
        other = "interleaved" if pairing == "half" else "half"
        cos_pairs, repeated = _pairs(c, pairs, pairing)
        sin_pairs, sin_repeated = _pairs(s, pairs, pairing)
        if not (repeated and sin_repeated):
            cos_other, repeated = _pairs(c, pairs, other)
            sin_other, sin_repeated = _pairs(s, pairs, other)
            if repeated and sin_repeated:
                where = "twice in a row" if other == "interleaved" else "in two halves"
                findings.append(
                    f"the columns hold each pair's value {where}: pairing={other!r}, not "
                    f"pairing={pairing!r}; rotating with the wrong pairing mixes features "
                    f"of different pairs"
                )
                cos_pairs, sin_pairs = cos_other, sin_other
            elif pairs is not None and frequencies is None and rotary_dim is None:
                per_feature = False  # read it as one column per pair
            else:
                return [
                    "the columns do not hold each pair's value twice, neither in two halves "
                    "(pairing='half') nor twice in a row (pairing='interleaved')"
                ]
    if not per_feature:
        pairs = width
        cos_pairs, sin_pairs = c, s
    d = 2 * pairs

    # The scale: cos^2 + sin^2 is the same for every entry.
    norms = np.hypot(cos_pairs, sin_pairs)
    scale = float(np.median(norms))
    eps = max(EPS.get(cos_dtype, 0.0), EPS.get(sin_dtype, 0.0), EPS["float64"])
    if scale == 0 or np.any(np.abs(norms / scale - 1) > 0.05):
        return [
            *findings,
            f"cos and sin are not the cosine and sine of one angle: cos^2 + sin^2 ranges "
            f"over {norms.min() ** 2:.3g}..{norms.max() ** 2:.3g}",
        ]
    if abs(scale / attention_scale - 1) > 8 * eps + 1e-12:
        yarn = ""
        if scale > 1:
            stretch = math.exp((scale - 1) / 0.1)
            yarn = f"; YaRN's 0.1 ln(s) + 1 gives it for a stretch factor s = {stretch:.3g}"
        findings.append(
            f"cos and sin are multiplied by {scale:.6g}, not attention_scale="
            f"{attention_scale:g}: an attention scale{yarn}"
        )
    else:
        scale = attention_scale
    cos_unit, sin_unit = cos_pairs / scale, sin_pairs / scale
    tolerance = 4 * eps

    expected = frequencies if frequencies is not None else base ** (-np.arange(pairs) * 2.0 / d)
    if _explained(cos_unit, sin_unit, declared, expected, tolerance):
        return findings
    # Angles computed in a narrow format: the declared frequencies, an error that grows.
    for name in PRECISIONS:
        if _explained(cos_unit, sin_unit, declared, expected, tolerance, name):
            angles = declared[:, None] * expected[None, :]
            error = np.maximum(np.abs(cos_unit - np.cos(angles)), np.abs(sin_unit - np.sin(angles)))
            if growth(error, np.abs(angles)) is not None:
                row = int(np.argmax(error.max(axis=1)))
                return [
                    *findings,
                    f"errors grow with the position {growth_rate(name)}, up to "
                    f"{error.max():.2g} at position {declared[row]:g}: "
                    f"looks like angles computed in {name} (positions times frequencies in "
                    f"{name}, as torch code that builds the cache in the model's dtype "
                    f"does); compute them in float64 and round once",
                ]
            break
    fitted = _fitted_frequencies(cos_unit, sin_unit, declared)
    if fitted is not None:
        findings_for = _frequency_findings(
            cos_unit, sin_unit, declared, fitted, expected, base, d, tolerance, frequencies
        )
        if findings_for is not None:
            return findings + findings_for
    angles = declared[:, None] * expected[None, :]
    error = np.maximum(np.abs(cos_unit - np.cos(angles)), np.abs(sin_unit - np.sin(angles)))
    row, column = np.unravel_index(np.argmax(error), error.shape)
    return [
        *findings,
        f"the cache differs from the declared angles by up to {error[row, column]:.2g} "
        f"(position {declared[row]:g}, pair {column}), and no known mistake explains it",
    ]


def _frequency_findings(cos, sin, positions, fitted, expected, base, d, tolerance, declared):
    """A finding naming other frequencies that reproduce the cache, or None."""

    def fits(freqs):
        return any(
            _explained(cos, sin, positions, freqs, tolerance, p) for p in (None, *PRECISIONS)
        )

    pairs = d // 2
    i = np.arange(pairs, dtype=np.float64)
    exponent = _fitted_exponent(fitted)
    # Partial rotary: the declared base, spaced for another width.
    if exponent is not None and exponent > 0:
        width = math.log(base) / exponent
        whole = round(width)
        if abs(width - whole) < 0.02 and whole % 2 == 0 and whole != d:
            other = round(width)
            if fits(base ** (-2 * i / other)):
                return [
                    f"frequencies are spaced for {other} features, base**(-2i/{other}), "
                    f"not for the cache's {d}: looks like partial rotary, rotary_dim = "
                    f"{min(d, other)} of a head of {max(d, other)}, with the frequencies "
                    f"spaced for the {'head' if other > d else 'rotated part'}"
                ]
    # Scaled frequencies (posenc.long_context), when the declared ones are the plain ones.
    if declared is None:
        slowest = float(expected[-1] / fitted[-1]) if fitted[-1] > 0 else 0.0
        factors = sorted({_round(slowest, 2), _round(slowest, 1), float(round(slowest))} - {0.0})
        for factor in [f for f in factors if f >= 1]:
            if fits(expected / factor):
                return [
                    f"every frequency is divided by {factor:g}: position interpolation "
                    f"(rope_scaling 'linear', factor {factor:g}); declare frequencies="
                ]
            for method in ("yarn", "llama3"):
                for length in ORIGINAL_LENGTHS:
                    freqs, _ = scaled_frequencies(
                        d, base=base, method=method, factor=factor, original_length=length
                    )
                    if fits(freqs):
                        return [
                            f"frequencies are {method} scaling with factor {factor:g} and "
                            f"original_length {length} (posenc.long_context); declare "
                            f"frequencies= (and attention_scale=) to check it as such"
                        ]
    # A wrong base (NTK-aware scaling is one).
    if exponent is not None and exponent > 0:
        fitted_base = math.exp(exponent * d)
        for candidate in (_round(fitted_base, 4), _round(fitted_base, 6), fitted_base):
            if fits(candidate ** (-2 * i / d)):
                ntk = ""
                factor = (candidate / base) ** ((d - 2) / d)
                if declared is None and factor > 1.01 and abs(factor - round(factor)) < 0.01:
                    ntk = (
                        f"; NTK-aware scaling with factor {round(factor)} gives this base "
                        f"(rope_scaling 'ntk'/'dynamic')"
                    )
                return [
                    f"frequencies fit base = {candidate:.6g}, not {base:.6g}: a wrong base{ntk}"
                ]
    return None
