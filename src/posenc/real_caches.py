"""RoPE cos/sin caches as real libraries build them, each with the declaration that
describes it (chapter 12 and the checker's test suite).

Each builder follows one library's documented convention, in NumPy:

- Hugging Face transformers' rotary embedding (``LlamaRotaryEmbedding`` and the
  ``ROPE_INIT_FUNCTIONS`` of ``modeling_rope_utils``) for the rope types ``default``,
  ``linear``, ``dynamic``, ``yarn``, ``llama3`` and ``longrope``: ``inv_freq`` in
  float32, the angles ``position_ids * inv_freq`` in float32, ``cat((freqs, freqs))``
  (the two halves), cos and sin multiplied by ``attention_scaling`` and cast to the
  model's dtype; shape ``(batch, seq, dim)``;
- GPT-NeoX's partial rotary (``rotary_pct``): only ``int(head_size * rotary_pct)``
  features rotate, with frequencies spaced for that width; the older buffers
  ``cos_cached`` of shape ``(1, 1, seq, rotary_ndims)``;
- GPT-J (``create_sinusoidal_positions``): ``rotary_dim`` of a wider head, each pair's
  value twice in a row (``repeat_interleave``);
- diffusers' ``get_1d_rotary_pos_embed`` with ``use_real=True``: interleaved
  (``repeat_interleave_real=True``) or two halves, the frequencies in ``freqs_dtype``
  float32 or float64, cos and sin returned as float32.

Float32 steps are computed in float64 and rounded once to float32, so the caches are
the same on every machine (a float32 ``pow`` or ``cos`` from a library may differ by an
ulp between machines). bfloat16 results are returned as the float32 arrays of the
bfloat16 values.

:func:`build` takes a :class:`CacheSpec` and returns a :class:`RealCache`: ``cos``,
``sin`` and ``declared``, the keyword arguments of
:func:`posenc.checks.check_rope_cache` that describe the cache correctly. Its keyword
arguments ``shift``, ``base``, ``spacing``, ``exponent_bug`` and ``pi_factor`` build the
cache with a mistake while ``declared`` still describes what was meant.
:func:`real_caches` lists the specs of the suite.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from posenc.long_context import scaled_frequencies
from posenc.museum import round_to_bfloat16

__all__ = ["KINDS", "CacheSpec", "RealCache", "build", "real_caches"]

KINDS = ("hf", "neox", "gptj", "diffusers")
"""The libraries :func:`build` knows: Hugging Face's rotary embedding, GPT-NeoX, GPT-J
and diffusers' ``get_1d_rotary_pos_embed``."""


class RealCache(NamedTuple):
    """A cache as a library builds it, and the declaration that describes it."""

    name: str
    cos: np.ndarray
    sin: np.ndarray
    declared: dict


@dataclass(frozen=True)
class CacheSpec:
    """How one cache is built.

    ``dim`` is the rotated width (``rotary_dim`` for GPT-J, ``int(head * rotary_pct)``
    for GPT-NeoX), ``head`` the head's width where it is wider. ``start`` and ``length``
    give the positions, or ``positions`` (2-D, one row per batch entry, for Hugging
    Face). ``rope_type`` is one of Hugging Face's; ``factor`` and ``original`` its
    ``factor`` and ``original_max_position_embeddings``.
    """

    name: str
    kind: str
    dim: int
    base: float = 10000.0
    start: int = 0
    length: int = 512
    dtype: str = "float32"
    head: int | None = None
    rope_type: str = "default"
    factor: float = 1.0
    original: int = 4096
    batch: int = 1
    positions: tuple = field(default=())
    interleave: bool = True
    freqs_dtype: str = "float32"


def _f32(values) -> np.ndarray:
    """Values computed in float64, rounded once to float32 (one correctly rounded step)."""
    return np.asarray(values, dtype=np.float64).astype(np.float32)


def _inv_freq(dim, base, *, spacing=None, exponent_bug=False) -> np.ndarray:
    """``1 / base**(arange(0, dim, 2) / dim)`` with each step in float32.

    ``spacing`` divides by another width (partial rotary spaced for the head);
    ``exponent_bug`` doubles the exponent, ``base**(-2 * arange(0, dim, 2) / dim)``.
    """
    exponents = _f32(np.arange(0, dim, 2) * (2 if exponent_bug else 1) / (spacing or dim))
    powers = _f32(np.float64(np.float32(base)) ** exponents.astype(np.float64))
    return _f32(1.0 / powers.astype(np.float64))


def _longrope_factors(dim, factor):
    """Short and long rescale factors, one per pair, shaped like Phi-3's: 1 for the
    fast pairs, rising to about ``factor`` for the slow ones (long), a milder rise
    (short)."""
    ramp = np.linspace(0.0, 1.0, dim // 2) ** 2
    return 1.0 + 0.1 * ramp, 1.0 + (factor - 1.0) * ramp


def _declared(spec: CacheSpec, method: str, **lengths):
    """The float64 frequencies and attention scale :mod:`posenc.long_context` gives."""
    return scaled_frequencies(
        spec.dim, base=spec.base, method=method, factor=spec.factor, **lengths
    )


def _hf_frequencies(spec: CacheSpec, base, seq_len, spacing, exponent_bug):
    """(float32 inv_freq, attention scaling, declared float64 frequencies or None)."""
    dim, kind = spec.dim, spec.rope_type
    inv = _inv_freq(dim, base, spacing=spacing, exponent_bug=exponent_bug)
    declared = None
    scale = 1.0
    if kind == "linear":
        inv = _f32(inv / np.float32(spec.factor))
        declared, _ = _declared(spec, "linear")
    elif kind == "dynamic":
        if seq_len > spec.original:
            grown = spec.factor * seq_len / spec.original - (spec.factor - 1)
            inv = _inv_freq(dim, base * grown ** (dim / (dim - 2)), spacing=spacing)
        declared, _ = _declared(spec, "dynamic_ntk", original_length=spec.original, seq_len=seq_len)
    elif kind == "yarn":
        powers = _f32(1.0 / inv.astype(np.float64))
        extrapolated = _f32(1.0 / powers.astype(np.float64))
        interpolated = _f32(1.0 / _f32(spec.factor * powers.astype(np.float64)).astype(np.float64))

        def pair_index(rotations):
            ratio = spec.original / (rotations * 2 * math.pi)
            return dim * math.log(ratio) / (2 * math.log(base))

        low = max(math.floor(pair_index(32.0)), 0)
        high = min(math.ceil(pair_index(1.0)), dim - 1)
        if low == high:
            high += 0.001
        ramp = _f32(np.clip(_f32((np.arange(dim // 2) - low) / (high - low)), 0, 1))
        keep = _f32(1.0 - ramp.astype(np.float64))
        inv = _f32(
            _f32(interpolated * (1.0 - keep.astype(np.float64))).astype(np.float64)
            + _f32(extrapolated * keep.astype(np.float64))
        )
        declared, scale = _declared(spec, "yarn", original_length=spec.original)
    elif kind == "llama3":
        wavelength = _f32(2 * math.pi / inv.astype(np.float64))
        low_wavelength, high_wavelength = spec.original / 1.0, spec.original / 4.0
        scaled = np.where(wavelength > low_wavelength, _f32(inv / np.float32(spec.factor)), inv)
        smooth = _f32((spec.original / wavelength.astype(np.float64) - 1.0) / (4.0 - 1.0))
        blended = _f32(
            _f32((1 - smooth.astype(np.float64)) * scaled / spec.factor).astype(np.float64)
            + _f32(smooth * scaled.astype(np.float64))
        )
        medium = ~(wavelength < high_wavelength) & ~(wavelength > low_wavelength)
        inv = np.where(medium, blended, scaled).astype(np.float32)
        declared, _ = _declared(spec, "llama3", original_length=spec.original)
    elif kind == "longrope":
        short, long = _longrope_factors(dim, spec.factor)
        rescale = long if seq_len > spec.original else short
        powers = _f32(1.0 / inv.astype(np.float64))
        inv = _f32(1.0 / _f32(_f32(rescale) * powers.astype(np.float64)).astype(np.float64))
        declared = 1.0 / (rescale * spec.base ** (np.arange(0, dim, 2) / dim))
        scale = math.sqrt(1 + math.log(spec.factor) / math.log(spec.original))
    return inv, scale, declared


def _positions(spec: CacheSpec, shift: int) -> np.ndarray:
    if spec.positions:
        return np.asarray(spec.positions, dtype=np.int64) + shift
    return np.arange(spec.start, spec.start + spec.length, dtype=np.int64)[None, :] + shift


def _store(values, dtype):
    values = _f32(values)
    return round_to_bfloat16(values) if dtype == "bfloat16" else values


def build(
    spec: CacheSpec,
    *,
    shift=0,
    base=None,
    spacing=None,
    exponent_bug=False,
    pi_factor=1.0,
    inv_freq_bfloat16=False,
) -> RealCache:
    """The cache ``spec`` describes, and its declaration.

    The keyword arguments build it with a mistake (``declared`` stays the same): rows
    at positions moved by ``shift``, another ``base``, the frequencies spaced for
    ``spacing`` features, the doubled exponent, every frequency divided by
    ``pi_factor``, or (``inv_freq_bfloat16``) inv_freq rounded to bfloat16 before the
    angles are computed, as ``model.to(torch.bfloat16)`` leaves Hugging Face's buffer.
    """
    if spec.kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {spec.kind!r}")
    used_base = spec.base if base is None else base
    grid = _positions(spec, shift)
    declared: dict = {"base": spec.base}
    if spec.positions:
        declared["positions"] = np.asarray(spec.positions)
    else:
        declared["start"] = spec.start
    scale = 1.0
    if spec.kind == "diffusers":
        wide = np.float64 if spec.freqs_dtype == "float64" else np.float32
        exponents = np.arange(0, spec.dim, 2).astype(wide) * (2 if exponent_bug else 1)
        exponents = (exponents / (spacing or spec.dim)).astype(wide)
        freqs = (1.0 / (used_base ** exponents.astype(np.float64))).astype(wide)
        freqs = (freqs / pi_factor).astype(wide)
        angles = (grid[0].astype(np.float64)[:, None] * freqs[None, :]).astype(wide)
        cos, sin = np.cos(angles.astype(np.float64)), np.sin(angles.astype(np.float64))
        declared["pairing"] = "interleaved" if spec.interleave else "half"
        if spec.freqs_dtype == "float32":
            declared["allow"] = ("float32_angles",)
        repeat = spec.interleave
    else:
        seq_len = int(grid.max()) + 1
        if spec.kind == "hf":
            inv, scale, frequencies = _hf_frequencies(
                spec, used_base, seq_len, spacing, exponent_bug
            )
            if frequencies is not None:
                declared["frequencies"] = frequencies
            if scale != 1.0:
                declared["attention_scale"] = scale
        else:
            inv = _inv_freq(spec.dim, used_base, spacing=spacing, exponent_bug=exponent_bug)
        inv = _f32(inv / np.float32(pi_factor)) if pi_factor != 1.0 else inv
        inv = round_to_bfloat16(inv) if inv_freq_bfloat16 else inv
        angles = _f32(grid.astype(np.float32).astype(np.float64)[..., None] * inv)
        cos, sin = np.cos(angles.astype(np.float64)), np.sin(angles.astype(np.float64))
        cos, sin = _f32(cos), _f32(sin)
        declared["pairing"] = "interleaved" if spec.kind == "gptj" else "half"
        declared["allow"] = ("float32_angles",)
        repeat = spec.kind == "gptj"
    if repeat:
        cos, sin = np.repeat(cos, 2, axis=-1), np.repeat(sin, 2, axis=-1)
    else:
        cos, sin = np.concatenate([cos, cos], -1), np.concatenate([sin, sin], -1)
    if scale != 1.0:
        cos, sin = _f32(cos * scale), _f32(sin * scale)
    if spec.dtype == "bfloat16":
        declared["stored_dtype"] = "bfloat16"
    cos, sin = _store(cos, spec.dtype), _store(sin, spec.dtype)
    if spec.kind == "hf":
        if cos.shape[0] == 1 and spec.batch > 1:
            cos = np.repeat(cos, spec.batch, axis=0)
            sin = np.repeat(sin, spec.batch, axis=0)
    elif spec.kind == "neox":
        cos, sin = cos[None], sin[None]  # cos_cached: (1, 1, seq, rotary_ndims)
    else:
        cos, sin = cos[0] if cos.ndim == 3 else cos, sin[0] if sin.ndim == 3 else sin
    if spec.head is not None:
        declared["rotary_dim"] = spec.dim
    return RealCache(spec.name, cos, sin, declared)


def real_caches() -> list[CacheSpec]:
    """The suite: caches across head sizes 64, 80, 96, 128 and 256, bases 1e4, 5e5 and
    1e6, in float32 and stored in bfloat16."""
    two_rows = (tuple(range(0, 256)), tuple(range(300, 556)))
    return [
        CacheSpec("hf default d128 1e4", "hf", 128),
        CacheSpec("hf default d128 5e5 bf16", "hf", 128, base=5e5, dtype="bfloat16", start=7),
        CacheSpec("hf default d80 1e4", "hf", 80, length=384),
        CacheSpec("hf default d256 1e6 bf16", "hf", 256, base=1e6, dtype="bfloat16"),
        CacheSpec("hf default d64 1e4 batch", "hf", 64, positions=two_rows),
        CacheSpec("hf linear d128 x4", "hf", 128, rope_type="linear", factor=4.0),
        CacheSpec("hf dynamic d128 x2", "hf", 128, rope_type="dynamic", factor=2.0, original=256),
        CacheSpec(
            "hf yarn d128 x4", "hf", 128, rope_type="yarn", factor=4.0, original=4096, batch=2
        ),
        CacheSpec(
            "hf yarn d64 1e6 x8 bf16",
            "hf",
            64,
            base=1e6,
            rope_type="yarn",
            factor=8.0,
            original=2048,
            dtype="bfloat16",
        ),
        CacheSpec(
            "hf llama3 d128 5e5 x8",
            "hf",
            128,
            base=5e5,
            rope_type="llama3",
            factor=8.0,
            original=8192,
        ),
        CacheSpec(
            "hf longrope d96 long",
            "hf",
            96,
            rope_type="longrope",
            factor=32.0,
            original=4096,
            start=4000,
            length=256,
        ),
        CacheSpec(
            "hf longrope d96 short",
            "hf",
            96,
            rope_type="longrope",
            factor=32.0,
            original=4096,
        ),
        CacheSpec("hf stablelm partial d20 of 80", "hf", 20, head=80, length=256),
        CacheSpec("neox pythia d32 of 128", "neox", 32, head=128),
        CacheSpec("neox phi d32 of 80 bf16", "neox", 32, head=80, dtype="bfloat16"),
        CacheSpec("gptj d64 of 256", "gptj", 64, head=256),
        CacheSpec("diffusers d64 interleaved f32", "diffusers", 64),
        CacheSpec(
            "diffusers d64 halves f64", "diffusers", 64, interleave=False, freqs_dtype="float64"
        ),
        CacheSpec(
            "diffusers d128 1e4 f64 bf16", "diffusers", 128, freqs_dtype="float64", dtype="bfloat16"
        ),
        CacheSpec("diffusers d80 halves f32", "diffusers", 80, interleave=False),
    ]
