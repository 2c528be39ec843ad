"""The sinusoidal positional encoding of "Attention Is All You Need" (chapters 2-5).

``sinusoidal`` is the entry point the rest of the book uses. Every angle it needs
is computed in float64: chapter 5 measures why (the angle ``pos * omega`` is the
error that matters, not the form of ``div_term``). It builds the table by angle
addition (chapter 11, :mod:`posenc.fast`), with sin and cos computed only for a few
exact angles and every row made of products and sums.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from posenc import _validation, fast

LAYOUTS = ("interleaved", "concat")

# Positions are exact in float64 only up to 2**53.
MAX_POSITION = 2**53


class TableSpec(NamedTuple):
    """The checked arguments shared by every function that builds a table."""

    length: int
    d_model: int
    base: float
    start: int
    dtype: np.dtype
    layout: str

    @property
    def positions(self) -> np.ndarray:
        """The positions ``start, ..., start + length - 1`` as exact float64 values."""
        return np.arange(self.start, self.start + self.length, dtype=np.float64)

    @property
    def pair_exponents(self) -> np.ndarray:
        """``2i / d_model`` for each sin/cos pair i (ceil(d_model / 2) of them)."""
        return np.arange(0, self.d_model, 2, dtype=np.float64) / self.d_model

    @property
    def frequencies(self) -> np.ndarray:
        """``base**(-2i/d_model)`` for each pair i, computed in float64."""
        return self.base**-self.pair_exponents


def table_spec(length, d_model, *, base, start, dtype, layout) -> TableSpec:
    """Check the arguments of a table-building function; raise at the first bad one."""
    length = _validation.integer("length", length, minimum=0)
    d_model = _validation.integer("d_model", d_model, minimum=1)
    base = _validation.positive_finite("base", base)
    start = _validation.integer("start", start, minimum=0)
    dtype = _validation.floating_dtype("dtype", dtype)
    layout = _validation.choice("layout", layout, LAYOUTS)
    if start + length > MAX_POSITION:
        raise ValueError(
            f"start + length must be at most 2**53 (positions exact in float64), "
            f"got start={start}, length={length}"
        )
    return TableSpec(length, d_model, base, start, dtype, layout)


def frequencies(d_model, *, base=10000.0) -> np.ndarray:
    """The angular frequency ``base**(-2i/d_model)`` of each sin/cos pair i, in float64.

    Pair i turns by this many radians per position; ``sinusoidal`` uses exactly these
    values. There are ``ceil(d_model / 2)`` of them, from 1 down towards ``1 / base``.
    """
    spec = table_spec(1, d_model, base=base, start=0, dtype=np.float64, layout="interleaved")
    return spec.frequencies


def layout_permutation(d_model) -> np.ndarray:
    """Column order that turns an interleaved table into a concatenated one.

    ``interleaved[:, layout_permutation(d)]`` equals the ``layout="concat"`` table:
    the sin columns 0, 2, 4, ... first, then the cos columns 1, 3, 5, ....
    ``np.argsort`` of the result maps back.
    """
    d_model = _validation.integer("d_model", d_model, minimum=1)
    return np.concatenate([np.arange(0, d_model, 2), np.arange(1, d_model, 2)])


def _arrange(table: np.ndarray, layout: str) -> np.ndarray:
    """Return an interleaved ``table`` in ``layout`` (a copy only when reordering)."""
    if layout == "interleaved":
        return table
    return table[:, layout_permutation(table.shape[1])]


def sinusoidal(
    length,
    d_model,
    *,
    base=10000.0,
    start=0,
    dtype=np.float64,
    layout="interleaved",
    out=None,
) -> np.ndarray:
    """The sinusoidal position table, shape ``(length, d_model)``.

    Row r is position ``start + r``. Column ``2i`` is ``sin(p / base**(2i/d_model))``
    and column ``2i + 1`` the cosine of the same angle; with an odd ``d_model`` the
    last column is the sine of one more pair. ``layout="concat"`` puts all sine
    columns first, then all cosine columns (tensor2tensor's arrangement).

    Every angle is computed in float64, at any position up to 2**53. The table is
    built by angle addition (chapter 11, :mod:`posenc.fast`): a float64 table is
    within a few units of float64 rounding of direct evaluation, a float32 table
    within 2.4e-7 of the exact values (four float32 roundings), and a float16 table
    is the float64 one rounded once. Each row depends on its position alone, so
    ``sinusoidal(n, d, start=s)`` equals rows ``s:`` of ``sinusoidal(s + n, d)``.

    ``out``, optional, is an existing C-contiguous, writeable array of shape
    ``(length, d_model)`` and dtype ``dtype`` to write the table into (and return);
    anything else raises, naming what was given. Writing into memory already in use
    skips the cost of fresh pages (chapter 11).
    """
    spec = table_spec(length, d_model, base=base, start=start, dtype=dtype, layout=layout)
    if out is not None:
        _check_out(out, spec)
    return fast.table(spec, out=out)


def _check_out(out, spec: TableSpec) -> None:
    if not isinstance(out, np.ndarray):
        raise TypeError(f"out must be a NumPy array, got {type(out).__name__}")
    shape = (spec.length, spec.d_model)
    if out.shape != shape:
        raise ValueError(f"out must have shape {shape}, got {out.shape}")
    if out.dtype != spec.dtype:
        raise TypeError(
            f"out must have dtype {spec.dtype} (the dtype argument), got {out.dtype}; "
            f"pass dtype={out.dtype.name!r} to build a table of that dtype"
        )
    if not out.flags.c_contiguous or not out.flags.writeable:
        raise ValueError(
            f"out must be C-contiguous and writeable, got "
            f"c_contiguous={out.flags.c_contiguous}, writeable={out.flags.writeable}"
        )
