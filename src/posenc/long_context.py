"""Stretching RoPE past its training length: the scaled frequencies.

:func:`scaled_frequencies` returns, for one head, the rotation speed of every pair
(float64, ``head_dim // 2`` of them) and the factor by which a method multiplies cos
and sin. The methods, each written from its published description:

- ``"none"``: RoPE's θ_i = base^(-2i/d).
- ``"linear"``: position interpolation (Chen et al. 2023): every θ_i / factor, so
  positions up to factor · L turn no further than positions up to L did.
- ``"ntk"``: NTK-aware scaling (bloc97, 2023): the base becomes
  base · factor^(d/(d-2)), which leaves the fastest pair as it is and divides the
  slowest by factor.
- ``"dynamic_ntk"``: the same base change, recomputed from the current sequence
  length: base · (factor · seq_len / L - (factor - 1))^(d/(d-2)); RoPE unchanged while
  seq_len <= L.
- ``"yarn"``: YaRN (Peng et al. 2023). A pair that turns r_i = L θ_i / (2π) times within
  L keeps θ_i when r_i >= beta_fast, is interpolated (θ_i / factor) when r_i <=
  beta_slow, and is blended linearly in the pair index in between; the index range is
  rounded outward (floor, ceil). cos and sin are multiplied by 0.1 ln(factor) + 1, so
  the logits are multiplied by its square (YaRN's sqrt(1/t)).
- ``"llama3"``: Llama 3.1's scaling (Meta): a pair whose wavelength 2π/θ_i is shorter
  than L / high_freq_factor keeps θ_i, one longer than L / low_freq_factor gets
  θ_i / factor, and in between the two are blended by
  s = (L / wavelength - low_freq_factor) / (high_freq_factor - low_freq_factor).

L is ``original_length``, the context the model was trained at.
"""

from __future__ import annotations

import math

import numpy as np

from posenc._validation import choice, integer, positive_finite
from posenc.alternatives import rope_frequencies

__all__ = ["METHODS", "scaled_frequencies", "slowdowns", "turns", "yarn_temperature"]

METHODS = ("none", "linear", "ntk", "dynamic_ntk", "yarn", "llama3")
"""The methods :func:`scaled_frequencies` knows."""

_NEEDS_ORIGINAL_LENGTH = ("dynamic_ntk", "yarn", "llama3")


def _factor(value) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise TypeError(f"factor must be a real number, got {value!r}")
    factor = float(value)
    if not math.isfinite(factor) or factor < 1:
        raise ValueError(f"factor must be finite and >= 1, got {value!r}")
    return factor


def _yarn(theta, head_dim, base, factor, original_length, beta_fast, beta_slow):
    """YaRN's blend of θ_i (kept) and θ_i / factor (interpolated), by rotations in L."""

    def pair_index(rotations):
        # The pair i that turns `rotations` times within L: L θ_i = 2π rotations.
        return (
            head_dim * math.log(original_length / (rotations * 2 * math.pi)) / (2 * math.log(base))
        )

    low = max(math.floor(pair_index(beta_fast)), 0)
    high = min(math.ceil(pair_index(beta_slow)), head_dim - 1)
    if high == low:
        high += 0.001  # a step rather than a ramp, without dividing by zero
    ramp = np.clip((np.arange(theta.size) - low) / (high - low), 0.0, 1.0)
    # ramp 0: the fast pairs (index <= low) keep θ_i; ramp 1: slow ones are interpolated.
    return theta * (1 - ramp) + theta / factor * ramp


def _llama3(theta, factor, original_length, low_freq_factor, high_freq_factor):
    wavelength = 2 * math.pi / theta
    blend = (original_length / wavelength - low_freq_factor) / (high_freq_factor - low_freq_factor)
    blended = (1 - blend) * theta / factor + blend * theta
    out = np.where(wavelength > original_length / low_freq_factor, theta / factor, blended)
    return np.where(wavelength < original_length / high_freq_factor, theta, out)


def yarn_temperature(factor: float) -> float:
    """YaRN's attention scale for a stretch factor s, 0.1 ln s + 1 (1 for s <= 1); cos
    and sin are multiplied by it, so the logits by its square."""
    return 0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0


def scaled_frequencies(
    head_dim: int,
    *,
    base: float = 10000.0,
    method: str = "none",
    factor: float = 1.0,
    original_length: int | None = None,
    seq_len: int | None = None,
    low_freq_factor: float = 1.0,
    high_freq_factor: float = 4.0,
    beta_fast: float = 32.0,
    beta_slow: float = 1.0,
) -> tuple[np.ndarray, float]:
    """(frequencies, attention_scale) for one head of width ``head_dim``.

    ``frequencies`` is float64 of shape (head_dim // 2,), the rotation speed of each
    pair, ready for ``posenc.alternatives.rope(..., frequencies=...)``;
    ``attention_scale`` multiplies cos and sin (1.0 except for YaRN), so it multiplies
    the query-key logits by its square. ``method`` is one of :data:`METHODS` (see the
    module docstring). ``original_length`` (the training context L) is needed by
    "dynamic_ntk", "yarn" and "llama3"; ``seq_len`` (the current length) by
    "dynamic_ntk" alone.

    Bad input raises, naming the value: an odd or < 2 head_dim, a factor < 1 or not
    finite, an unknown method, a missing original_length, a seq_len for a method that
    does not use it, beta_fast <= beta_slow, low_freq_factor >= high_freq_factor.
    """
    head_dim = integer("head_dim", head_dim, minimum=2)
    if head_dim % 2:
        raise ValueError(
            f"RoPE rotates pairs of features, so head_dim must be even, got {head_dim}"
        )
    base = positive_finite("base", base)
    method = choice("method", method, METHODS)
    factor = _factor(factor)
    if method in _NEEDS_ORIGINAL_LENGTH:
        if original_length is None:
            raise ValueError(f"method {method!r} needs original_length (the training context)")
        original_length = integer("original_length", original_length, minimum=1)
    if seq_len is not None and method != "dynamic_ntk":
        raise ValueError(
            f"seq_len={seq_len!r} is used by method 'dynamic_ntk' only, not {method!r}"
        )
    beta_fast = positive_finite("beta_fast", beta_fast)
    beta_slow = positive_finite("beta_slow", beta_slow)
    if beta_fast <= beta_slow:
        raise ValueError(f"beta_fast ({beta_fast}) must be greater than beta_slow ({beta_slow})")
    low_freq_factor = positive_finite("low_freq_factor", low_freq_factor)
    high_freq_factor = positive_finite("high_freq_factor", high_freq_factor)
    if low_freq_factor >= high_freq_factor:
        raise ValueError(
            f"low_freq_factor ({low_freq_factor}) must be smaller than high_freq_factor "
            f"({high_freq_factor})"
        )

    theta = rope_frequencies(head_dim, base=base)
    exponent = head_dim / (head_dim - 2) if head_dim > 2 else 1.0
    if method == "linear":
        return theta / factor, 1.0
    if method == "ntk":
        return rope_frequencies(head_dim, base=base * factor**exponent), 1.0
    if method == "dynamic_ntk":
        if seq_len is None:
            raise ValueError("method 'dynamic_ntk' needs seq_len (the current sequence length)")
        seq_len = integer("seq_len", seq_len, minimum=1)
        if seq_len <= original_length:
            return theta, 1.0
        grown = factor * seq_len / original_length - (factor - 1)
        return rope_frequencies(head_dim, base=base * grown**exponent), 1.0
    if method == "yarn":
        scale = yarn_temperature(factor)
        return _yarn(theta, head_dim, base, factor, original_length, beta_fast, beta_slow), scale
    if method == "llama3":
        return _llama3(theta, factor, original_length, low_freq_factor, high_freq_factor), 1.0
    return theta, 1.0


def turns(head_dim: int, length: int, *, base: float = 10000.0) -> np.ndarray:
    """r_i = L θ_i / 2π: how many turns each pair of a head makes within ``length``
    tokens. Pairs with r_i < 1 never complete a turn there."""
    length = integer("length", length, minimum=1)
    return length * rope_frequencies(head_dim, base=base) / (2 * math.pi)


def slowdowns(head_dim: int, *, base: float = 10000.0, **method) -> np.ndarray:
    """κ_i = θ_i / θ'_i: how much :func:`scaled_frequencies` with ``method`` (its
    keyword arguments: method, factor, original_length ...) slows each pair."""
    scaled, _ = scaled_frequencies(head_dim, base=base, **method)
    return rope_frequencies(head_dim, base=base) / scaled
