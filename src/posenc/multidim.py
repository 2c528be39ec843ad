"""Positions in two and three dimensions: images, video, and images inside text.

- :func:`sincos_2d` — the fixed 2-D sine-cosine table of vision Transformers, as ViT
  and MAE (He et al., 2022) build it: half of the features encode the column (x)
  coordinate of a patch and half its row (y), each half a 1-D sinusoidal table of
  sines then cosines. Diffusion transformers use the same table; their convention for a
  grid of another size (diffusers' ``base_size`` and ``interpolation_scale``) squeezes
  its positions onto the range of the base grid, interpolating instead of
  extrapolating.
- :func:`grid_positions` — the (row, col) of each token of a grid read in raster order,
  the positions that axial RoPE (FLUX's ``axes_dim``; the axial form of Heo et al.,
  2024, "Rotary Position Embedding for Vision Transformer") rotates by, through
  ``posenc.rotary.RotaryEmbedding(..., axes_dims=...)``.
- :func:`mrope_position_ids` — the (3, seq) temporal, height and width ids of Qwen2-VL's
  multimodal RoPE (Wang et al., 2024) for a sequence of text spans and image or video
  grids, as its ``get_rope_index`` computes them for one sequence; the rotation itself is
  ``RotaryEmbedding(..., mrope_section=...)``.

Everything here is NumPy; the rotations live in :mod:`posenc.rotary` (PyTorch).
"""

from __future__ import annotations

import numpy as np

from posenc._validation import choice, integer, positive_finite

__all__ = ["grid_positions", "mrope_position_ids", "sincos_2d"]

MAX_GRID = 2**31  # a bound on one side of a grid: far beyond any image, far below overflow


def _axis_table(positions: np.ndarray, width: int, base: float) -> np.ndarray:
    """The 1-D table of MAE: [sin(p w_0 .. w_{k-1}), cos(p w_0 .. w_{k-1})], k = width / 2.

    w_i = base^(-i / k): sines first, then cosines (not interleaved).
    """
    k = width // 2
    speeds = base ** (-np.arange(k, dtype=np.float64) / k)
    angles = positions[:, None] * speeds[None, :]
    return np.concatenate((np.sin(angles), np.cos(angles)), axis=1)


def _axis_positions(n: int, base_size, interpolation_scale: float) -> np.ndarray:
    """Positions of n patches along one axis: 0 .. n - 1, or diffusers' squeezed ones."""
    positions = np.arange(n, dtype=np.float64)
    if base_size is None:
        return positions / interpolation_scale
    return positions / (n / base_size) / interpolation_scale


def sincos_2d(
    height,
    width,
    dim,
    *,
    base=10000.0,
    first="col",
    base_size=None,
    interpolation_scale=1.0,
) -> np.ndarray:
    """The 2-D sine-cosine table of a height x width grid of patches, (height * width, dim).

    Row ``r * width + c`` belongs to the patch in row r, column c (raster order). Half of
    the ``dim`` features (dim divisible by 4) encode one coordinate, half the other; each
    half is a 1-D table [sin(p w_i), cos(p w_i)] with w_i = base^(-i / (dim / 4)),
    i < dim / 4. ``first="col"`` (ViT, MAE, diffusers) puts the column (x) coordinate in
    the first half; ``first="row"`` the row.

    Positions along an axis of n patches are 0 .. n - 1, divided by
    ``interpolation_scale``; with ``base_size`` given, diffusers' convention
    p = arange(n) / (n / base_size) / interpolation_scale maps every grid onto the
    range of a base_size grid (interpolation rather than extrapolation).
    """
    height = integer("height", height, minimum=1, maximum=MAX_GRID)
    width = integer("width", width, minimum=1, maximum=MAX_GRID)
    dim = integer("dim", dim, minimum=4)
    if dim % 4:
        raise ValueError(
            f"dim must be divisible by 4 (two axes, each sines and cosines), got {dim}"
        )
    base = positive_finite("base", base)
    first = choice("first", first, ("col", "row"))
    if base_size is not None:
        base_size = positive_finite("base_size", base_size)
    interpolation_scale = positive_finite("interpolation_scale", interpolation_scale)
    half = dim // 2
    rows = _axis_table(_axis_positions(height, base_size, interpolation_scale), half, base)
    cols = _axis_table(_axis_positions(width, base_size, interpolation_scale), half, base)
    row_part = np.repeat(rows, width, axis=0)  # token r * width + c -> rows[r]
    col_part = np.tile(cols, (height, 1))  # token r * width + c -> cols[c]
    parts = (col_part, row_part) if first == "col" else (row_part, col_part)
    return np.concatenate(parts, axis=1)


def grid_positions(height, width) -> np.ndarray:
    """(row, col) of every token of a height x width grid in raster order, int64 (h * w, 2)."""
    height = integer("height", height, minimum=1, maximum=MAX_GRID)
    width = integer("width", width, minimum=1, maximum=MAX_GRID)
    rows, cols = np.divmod(np.arange(height * width, dtype=np.int64), width)
    return np.stack((rows, cols), axis=1)


def mrope_position_ids(segments) -> np.ndarray:
    """Qwen2-VL's (temporal, height, width) position ids of one sequence, int64 (3, seq).

    ``segments`` is a list of text spans (an int: that many tokens) and grids (a tuple
    ``(t, h, w)``: an image with t = 1, or a video; one token per cell, after merging).
    Text tokens carry the same id on the three axes, counting on from the current start.
    A grid starting at ``start`` gives its t * h * w tokens, in (t, h, w) raster order,
    the ids (start + t_idx, start + h_idx, start + w_idx). After every segment the next
    start is the largest id so far plus one.

    >>> mrope_position_ids([2, (1, 2, 2), 1])
    array([[0, 1, 2, 2, 2, 2, 4],
           [0, 1, 2, 2, 3, 3, 4],
           [0, 1, 2, 3, 2, 3, 4]])
    """
    if not isinstance(segments, list | tuple):
        raise TypeError(
            f"segments must be a list of text lengths (int) and grids ((t, h, w)), got {segments!r}"
        )
    if not segments:
        raise ValueError(f"segments must name at least one text span or grid, got {segments!r}")
    pieces, start = [], 0
    for index, segment in enumerate(segments):
        name = f"segments[{index}]"
        if isinstance(segment, tuple | list):
            t, h, w = _grid(name, segment)
            t_idx, h_idx, w_idx = np.meshgrid(
                np.arange(t), np.arange(h), np.arange(w), indexing="ij"
            )
            ids = start + np.stack((t_idx.ravel(), h_idx.ravel(), w_idx.ravel()))
        elif isinstance(segment, int | np.integer) and not isinstance(segment, bool | np.bool_):
            length = integer(f"{name} (a text length)", segment, minimum=1, maximum=MAX_GRID)
            ids = np.broadcast_to(start + np.arange(length), (3, length))
        else:
            raise TypeError(
                f"{name} must be a text length (int) or a grid (t, h, w), got {segment!r}"
            )
        pieces.append(ids.astype(np.int64))
        start = int(ids.max()) + 1
    return np.concatenate(pieces, axis=1)


def _grid(name: str, segment) -> tuple[int, int, int]:
    if len(segment) != 3:
        raise ValueError(f"{name} must be a grid of three sizes (t, h, w), got {segment!r}")
    for size in segment:
        if isinstance(size, bool | np.bool_) or not isinstance(size, int | np.integer):
            raise TypeError(f"{name} must be three ints (t, h, w), got {segment!r}")
    if any(size < 1 for size in segment):
        raise ValueError(f"{name} must have sizes >= 1, got {tuple(segment)!r}")
    if any(size > MAX_GRID for size in segment):
        raise ValueError(f"{name} must have sizes at most 2**31, got {tuple(segment)!r}")
    return tuple(int(size) for size in segment)
