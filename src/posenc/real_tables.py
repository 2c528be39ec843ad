"""Sinusoidal tables as real libraries build them, each with the declaration that
describes it to :func:`posenc.checks.check_sinusoidal_table` (chapter 12, tests).

Every builder is NumPy code written for this book following the library's documented
convention; the library and the class or function are named in its docstring. Each
builder takes the positions of the rows and the base, so that a test can rebuild the
same table with a bug in either (an off-by-one, a base typo) and see it named.

:func:`real_tables` returns the suite: Marian, M2M100 and Speech2Text (fairseq's
construction), Whisper's encoder, diffusers' timestep embeddings and 1-D sin-cos
position embeddings, at several widths (an odd one among them), in float32 and stored
in bfloat16 or float16.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from posenc import museum

FAIRSEQ_PADDING = 1  # M2M100's and Speech2Text's padding_idx: positions start at 2


class RealTable(NamedTuple):
    """A table as a library builds it, and how to declare it.

    ``declared`` holds the keyword arguments of ``check_sinusoidal_table`` that describe
    the table correctly; ``rebuild(positions, base)`` builds the same table with its
    rows at other positions or with another base, as the library's code would.
    """

    name: str
    table: np.ndarray
    declared: dict
    rebuild: Callable[[np.ndarray, float], np.ndarray]


def marian(positions, dim, *, base=10000.0) -> np.ndarray:
    """Hugging Face ``MarianSinusoidalPositionalEmbedding._init_weight``.

    Angles ``p / base**(2 * (j // 2) / dim)`` in float64 for every column ``j``; the
    sines of the even ``j`` fill the first ``ceil(dim / 2)`` columns, the cosines of the
    odd ``j`` the rest (the paper's frequencies in ``[sin | cos]`` halves, the lone
    column of an odd ``dim`` a sine), stored in float32.
    """
    positions = np.asarray(positions, dtype=np.float64)
    exponents = 2 * (np.arange(dim) // 2) / dim
    angles = positions[:, None] / np.power(float(base), exponents)[None, :]
    return np.hstack([np.sin(angles[:, 0::2]), np.cos(angles[:, 1::2])]).astype(np.float32)


def fairseq(positions, dim, *, base=10000.0, padding_row=None) -> np.ndarray:
    """fairseq's ``SinusoidalPositionalEmbedding.get_embedding`` as Hugging Face's
    ``M2M100SinusoidalPositionalEmbedding`` and ``Speech2TextSinusoidalPositionalEmbedding``
    compute it: every step in float32.

    ``half = dim // 2`` frequencies ``exp(-k * log(base) / (half - 1))`` (tensor2tensor's
    spacing), ``[sin | cos]`` halves, a zero column for an odd ``dim``, and the row
    ``padding_row`` (padding_idx) zeroed. Tokens are numbered from ``padding_idx + 1``.
    """
    step = np.float32(math.log(base) / (dim // 2 - 1))
    inverse = np.exp(np.arange(dim // 2, dtype=np.float32) * -step)
    angles = np.asarray(positions, dtype=np.float32)[:, None] * inverse[None, :]
    table = np.hstack([np.sin(angles), np.cos(angles)])
    if dim % 2:
        table = np.hstack([table, np.zeros((len(table), 1), dtype=np.float32)])
    if padding_row is not None:
        table[padding_row] = 0.0
    return table


def whisper(positions, channels, *, base=10000.0) -> np.ndarray:
    """Whisper's ``sinusoids(length, channels, max_timescale)`` (openai/whisper and Hugging
    Face ``WhisperEncoder``'s ``embed_positions``), in float32.

    ``channels // 2`` inverse timescales ``exp(-k * log(max_timescale) / (channels // 2 -
    1))`` and ``[sin | cos]`` halves; ``channels`` is even.
    """
    half = channels // 2
    increment = np.float32(math.log(base) / (half - 1))
    inverse = np.exp(-increment * np.arange(half, dtype=np.float32))
    scaled = np.asarray(positions, dtype=np.float32)[:, None] * inverse[None, :]
    return np.concatenate([np.sin(scaled), np.cos(scaled)], axis=1)


def timestep(positions, dim, *, base=10000.0, flip_sin_to_cos, downscale_freq_shift, scale=1.0):
    """diffusers' ``get_timestep_embedding`` (``Timesteps`` in the UNets and DiTs) at the
    timesteps ``positions / scale``, ``base`` being ``max_period``: see
    :func:`posenc.museum.timestep_embedding`.
    """
    timesteps = np.asarray(positions, dtype=np.float64) / scale
    return museum.timestep_embedding(
        timesteps,
        dim,
        flip_sin_to_cos=flip_sin_to_cos,
        downscale_freq_shift=downscale_freq_shift,
        scale=scale,
        max_period=base,
    )


def sincos_from_grid(positions, embed_dim, *, base=10000.0) -> np.ndarray:
    """diffusers' ``get_1d_sincos_pos_embed_from_grid(embed_dim, pos)`` (MAE's, used by
    ``PatchEmbed`` and the video DiTs), stored in float32 as the registered buffer is.

    ``omega = 1 / base**(k / (embed_dim / 2))`` in float64 (the paper's spacing),
    ``[sin | cos]`` halves; ``embed_dim`` is even.
    """
    omega = 1.0 / float(base) ** (np.arange(embed_dim // 2, dtype=np.float64) / (embed_dim / 2))
    out = np.outer(np.asarray(positions, dtype=np.float64), omega)
    return np.concatenate([np.sin(out), np.cos(out)], axis=1).astype(np.float32)


def _stored(builder, dtype: str):
    """``builder``'s table kept in ``dtype`` (a bfloat16 or float16 checkpoint) and read
    back as float32."""

    def build(positions, base):
        table = builder(positions, base)
        if dtype == "bfloat16":
            return museum.round_to_bfloat16(table)
        return table.astype(np.float16).astype(np.float32)

    return build


def _entry(name, builder, positions, declared, stored=None) -> RealTable:
    positions = np.asarray(positions, dtype=np.float64)
    base = declared.get("base", 10000.0)
    if stored is not None:
        builder = _stored(builder, stored)
        declared = {**declared, "stored_dtype": stored}
        name = f"{name}, stored in {stored}"
    return RealTable(name, builder(positions, base), declared, builder)


def _with(function, width, **keywords):
    """``function(positions, width, base=base, **keywords)`` as ``f(positions, base)``."""

    def build(positions, base):
        return function(positions, width, base=base, **keywords)

    return functools.update_wrapper(build, function)


def real_tables() -> list[RealTable]:
    """The suite: tables as the libraries build them, each with its declaration."""
    halves = {"layout": "concat"}
    t2t = {"layout": "concat", "spacing": "tensor2tensor"}
    tables = []
    marians = [(512, 512, None), (1024, 1024, None), (33, 64, None), (512, 512, "bfloat16")]
    for width, length, stored in marians:
        tables.append(
            _entry(
                f"Marian {length} x {width}",
                _with(marian, width),
                np.arange(length),
                halves,
                stored,
            )
        )
    for library, width, rows in [("M2M100", 1024, 1026), ("Speech2Text", 256, 6002)]:
        weights = {**t2t, "padding_idx": FAIRSEQ_PADDING}
        build = _with(fairseq, width, padding_row=FAIRSEQ_PADDING)
        tables.append(
            _entry(f"{library} weights {rows} x {width}", build, np.arange(rows), weights)
        )
        tables.append(
            _entry(f"{library} weights", build, np.arange(rows), weights, stored="bfloat16")
        )
        # the rows a sequence gathers: positions from padding_idx + 1, after 40 cached tokens
        for past in (0, 40):
            first = FAIRSEQ_PADDING + 1 + past
            tables.append(
                _entry(
                    f"{library} rows of a sequence after {past} cached tokens",
                    _with(fairseq, width),
                    first + np.arange(200),
                    {**t2t, "start": first},
                )
            )
    tables.append(
        _entry(
            "fairseq weights of odd width 65",
            _with(fairseq, 65, padding_row=FAIRSEQ_PADDING),
            np.arange(300),
            {**t2t, "padding_idx": FAIRSEQ_PADDING},
        )
    )
    for size, width in [("tiny", 384), ("base", 512), ("small", 768), ("large", 1280)]:
        tables.append(
            _entry(
                f"Whisper-{size} encoder 1500 x {width}",
                _with(whisper, width),
                np.arange(1500),
                t2t,
            )
        )
    tables.append(
        _entry("Whisper-large encoder", _with(whisper, 1280), np.arange(1500), t2t, "bfloat16")
    )
    tables.append(
        _entry("Whisper-tiny encoder", _with(whisper, 384), np.arange(1500), t2t, "float16")
    )
    steps = np.arange(1000)
    sd = {"flip_sin_to_cos": True, "downscale_freq_shift": 0}
    sd_declared = {"layout": "concat", "first": "cos", "positions": steps}
    diffusers = [
        ("Stable Diffusion UNet time_proj 320", 320, sd, sd_declared, steps),
        ("SDXL UNet time_proj 320", 320, sd, sd_declared, steps),
        (
            "DDPM (freq_shift=1, no flip) 128",
            128,
            {"flip_sin_to_cos": False, "downscale_freq_shift": 1},
            {**t2t, "positions": steps},
            steps,
        ),
        (
            "timestep embedding of odd width 65, freq_shift=1",
            65,
            {"flip_sin_to_cos": False, "downscale_freq_shift": 1},
            {**t2t, "positions": steps},
            steps,
        ),
        (
            "timestep embedding of odd width 65, freq_shift=0",
            65,
            {"flip_sin_to_cos": True, "downscale_freq_shift": 0},
            {**sd_declared, "odd_column": "zero"},
            steps,
        ),
    ]
    # SDXL's add_time_proj embeds image sizes and crops: Timesteps(256, True, 0)
    sizes = np.array([1024, 1024, 0, 0, 1024, 1024, 896, 1152, 64, 32, 896, 1152], dtype=float)
    diffusers.append(
        (
            "SDXL add_time_proj 256 (sizes, crops)",
            256,
            sd,
            {**sd_declared, "positions": sizes},
            sizes,
        )
    )
    # SD3 and flow-matching DiTs: fractional timesteps, sigma * 1000
    flow = np.float32(1000.0) * np.linspace(1.0, 0.0, 200, dtype=np.float32)
    diffusers.append(
        ("SD3 time_proj 256 (flow timesteps)", 256, sd, {**sd_declared, "positions": flow}, flow)
    )
    scaled = 1000.0 * np.linspace(0.0, 1.0, 100)
    diffusers.append(
        (
            "timestep embedding with scale=1000",
            64,
            {**sd, "scale": 1000.0},
            {**sd_declared, "positions": scaled},
            scaled,
        )
    )
    diffusers.append(
        (
            "timestep embedding with max_period=1e5",
            64,
            {"flip_sin_to_cos": False, "downscale_freq_shift": 0},
            {"layout": "concat", "positions": steps[:200], "base": 1e5},
            steps[:200],
        )
    )
    for name, width, keywords, declared, positions in diffusers:
        tables.append(_entry(name, _with(timestep, width, **keywords), positions, declared))
    tables.append(
        _entry(
            "Stable Diffusion UNet time_proj 320",
            _with(timestep, 320, **sd),
            steps,
            sd_declared,
            "bfloat16",
        )
    )
    for name, width, positions in [
        ("1-D sin-cos embedding 1152 (DiT width)", 1152, np.arange(256)),
        ("1-D sin-cos embedding 64", 64, np.arange(64)),
        ("1-D sin-cos temporal embedding, interpolation_scale=2", 1152, np.arange(32) / 2.0),
    ]:
        declared = {"layout": "concat", "positions": positions.astype(np.float64)}
        tables.append(_entry(name, _with(sincos_from_grid, width), positions, declared))
    tables.append(
        _entry(
            "1-D sin-cos embedding 1152",
            _with(sincos_from_grid, 1152),
            np.arange(256),
            {"layout": "concat", "positions": np.arange(256.0)},
            "bfloat16",
        )
    )
    return tables
