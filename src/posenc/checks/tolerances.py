"""Tolerances shared by the checkers: how much rounding each format costs, and how
to tell an error that grows with the angle (arithmetic in a narrow format) from one
that does not.

Imported by :mod:`posenc.checks.tables` and :mod:`posenc.checks.rope`; imports nothing
from them.
"""

from __future__ import annotations

import numpy as np

# Angles computed in a narrow format are off by up to about 3 roundings of it (position,
# frequency, product); an entry may then be off by ANGLE_ROUNDINGS * u * max(1, |angle|).
ANGLE_ROUNDINGS = 4
# Unit roundoff of the formats whose arithmetic the precision finding can name, finest first.
PRECISIONS = {"float32": 2.0**-24, "float16": 2.0**-11, "bfloat16": 2.0**-8}

# Machine epsilon of the dtypes a table may come in (bfloat16 from torch).
EPS = {"float64": 2.0**-52, "float32": 2.0**-23, "float16": 2.0**-10, "bfloat16": 2.0**-7}
# Unit roundoff of the formats a table may be declared (or found) to have been stored in.
STORAGE = {"float64": 2.0**-53, "float32": 2.0**-24, "float16": 2.0**-11, "bfloat16": 2.0**-8}
# An error that grows with the angle: over the angles compared, the largest errors of the
# top eighth of angles are at least this many times those of the bottom eighth.
GROWTH = 4.0


def growth(error: np.ndarray, sizes: np.ndarray) -> float | None:
    """How the error grows with the angle: the fitted error per radian, or None.

    Entries are sorted by the size of their angle and cut into eight groups; the error
    grows with the angle when the largest error of the last group is at least GROWTH
    times that of the first and the largest errors rise from group to group (a rank
    correlation of at least 0.7). The slope is then fitted through the origin on the
    largest error of each group against its largest angle.
    """
    used = sizes > 0
    if used.sum() < 16:
        return None
    order = np.argsort(sizes[used], kind="stable")
    err, size = error[used][order], sizes[used][order]
    groups = np.array_split(np.arange(len(size)), 8)
    top = np.array([err[g].max() for g in groups])
    reach = np.array([size[g].max() for g in groups])
    if top[-1] < GROWTH * max(top[0], 1e-300):
        return None
    ranks = np.argsort(np.argsort(top))
    if np.corrcoef(ranks, np.arange(len(top)))[0, 1] < 0.7:
        return None
    return float(np.sum(top * reach) / np.sum(reach * reach))


def growth_rate(name: str, roundings: float = ANGLE_ROUNDINGS) -> str:
    """How errors grow when angles are computed in the format ``name``: the bound the
    explanation was checked against (``roundings`` units of rounding per radian), never
    the fitted slope, whose digits depend on the machine that built the table (a libm or
    SIMD kernel one ulp apart moves them)."""
    return (
        f"as rounding angles to {name} does (at most {roundings:.3g} roundings "
        f"of {PRECISIONS[name]:.2g} per radian)"
    )


# Values other than 0 and +-1 needed before a storage grid counts as evidence.
GRID_EVIDENCE = 16


def on_grid(values: np.ndarray, dtype: str) -> list[str]:
    """The formats coarser than ``dtype`` whose grid holds every value, finest first.

    A grid is evidence only when values could have fallen off it: 0 and +-1 lie on
    every grid, so with fewer than ``GRID_EVIDENCE`` other values none is reported
    (a row at position 0 is all ones and zeros in any format).
    """
    finer = {"float64": 0, "float32": 1, "float16": 2, "bfloat16": 2}
    own = finer.get(dtype, 0)
    grids = []
    if np.sum((values != 0) & (np.abs(values) != 1)) < GRID_EVIDENCE:
        return grids
    with np.errstate(over="ignore"):
        as32 = values.astype(np.float32)
        on32 = bool(np.all(as32.astype(np.float64) == values))
        if on32 and own < 1:
            grids.append("float32")
        if own < 2 and np.all(values.astype(np.float16).astype(np.float64) == values):
            grids.append("float16")
        if own < 2 and on32 and np.all(as32.view(np.uint32) & 0xFFFF == 0):
            grids.append("bfloat16")
    return grids


def round_to(values: np.ndarray, name: str) -> np.ndarray:
    """``values`` rounded to the format ``name`` (to nearest, ties to even), as float64."""
    if name == "float16":
        return values.astype(np.float16).astype(np.float64)
    if name == "float32":
        return values.astype(np.float32).astype(np.float64)
    bits = values.astype(np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.astype(np.uint32).view(np.float32).astype(np.float64)
