"""The chapters' ways of building the sinusoidal table, kept side by side.

All share the signature of :func:`posenc.sinusoidal` and compute the same
formula; they differ in how, and in which dtype the arithmetic happens:

- :func:`naive_loops` (chapter 3): a double loop in Python floats, one entry at a time.
- :func:`vectorized` (chapter 4): one broadcast product, positions times frequencies,
  with the frequencies in the power form ``1 / base**(2i/d)``; arithmetic in ``dtype``.
- :func:`log_space` (chapter 5): the same, with the frequencies written
  ``exp(2i * -ln(base) / d)`` (the ``div_term`` of many code bases); arithmetic in ``dtype``.
- :func:`angle_addition` (chapter 11): sin and cos in float64 only for the digits of
  each position, every row a complex product of two of them; what
  :func:`posenc.sinusoidal` uses.

The two vectorized variants compute in ``dtype`` on purpose: chapter 5 measures what
that costs. In float16, positions above 65504 overflow to infinity and their rows
are NaN (NumPy warns). :func:`posenc.sinusoidal` computes in float64 and never does.
A base too large for ``dtype`` is refused.
"""

from __future__ import annotations

import math

import numpy as np

from posenc import fast
from posenc.encoding import _arrange, table_spec


def _fill_from_angles(angles: np.ndarray, d_model: int, dtype: np.dtype) -> np.ndarray:
    """An interleaved table from the (length, pairs) angles: sin in even, cos in odd columns.

    The sines and cosines are computed into fresh contiguous arrays and then copied
    into their columns, exactly as the chapters' code does. (Writing them straight into
    the strided columns with ``out=`` saves one temporary, see the deep dive on chapter 4, but NumPy
    may then take another code path, which on some processors rounds differently.)
    """
    table = np.empty((angles.shape[0], d_model), dtype=dtype)
    table[:, 0::2] = np.sin(angles)
    table[:, 1::2] = np.cos(angles[:, : d_model // 2])
    return table


def naive_loops(
    length, d_model, *, base=10000.0, start=0, dtype=np.float64, layout="interleaved"
) -> np.ndarray:
    """Entry by entry: column j belongs to pair i = j // 2 and uses exponent 2i / d_model."""
    spec = table_spec(length, d_model, base=base, start=start, dtype=dtype, layout=layout)
    table = np.zeros((spec.length, spec.d_model), dtype=spec.dtype)
    for row in range(spec.length):
        pos = spec.start + row
        for column in range(spec.d_model):
            i = column // 2  # the pair index, not the column index
            angle = pos / spec.base ** (2 * i / spec.d_model)
            table[row, column] = math.sin(angle) if column % 2 == 0 else math.cos(angle)
    return _arrange(table, spec.layout)


def _base_in_dtype(spec):
    largest = float(np.finfo(spec.dtype).max)
    if spec.base > largest:
        raise ValueError(
            f"base={spec.base!r} does not fit dtype {spec.dtype} (largest {largest:g})"
        )
    return spec.dtype.type(spec.base)


def _broadcast(spec, frequencies: np.ndarray) -> np.ndarray:
    positions = spec.positions.astype(spec.dtype)  # each position rounded once to dtype
    angles = positions[:, None] * frequencies[None, :]
    return _arrange(_fill_from_angles(angles, spec.d_model, spec.dtype), spec.layout)


def vectorized(
    length, d_model, *, base=10000.0, start=0, dtype=np.float64, layout="interleaved"
) -> np.ndarray:
    """Positions as a column times d_model/2 frequencies as a row, all in ``dtype``."""
    spec = table_spec(length, d_model, base=base, start=start, dtype=dtype, layout=layout)
    two_i = np.arange(0, spec.d_model, 2, dtype=spec.dtype)
    frequencies = 1 / _base_in_dtype(spec) ** (two_i / spec.dtype.type(spec.d_model))
    return _broadcast(spec, frequencies)


def log_space(
    length, d_model, *, base=10000.0, start=0, dtype=np.float64, layout="interleaved"
) -> np.ndarray:
    """As :func:`vectorized`, with ``div_term = exp(2i * -ln(base) / d_model)``."""
    spec = table_spec(length, d_model, base=base, start=start, dtype=dtype, layout=layout)
    two_i = np.arange(0, spec.d_model, 2, dtype=spec.dtype)
    div_term = np.exp(two_i * (-np.log(_base_in_dtype(spec)) / spec.d_model))
    return _broadcast(spec, div_term)


def angle_addition(
    length, d_model, *, base=10000.0, start=0, dtype=np.float64, layout="interleaved"
) -> np.ndarray:
    """Rows as products of exact block starts and exact offsets (:mod:`posenc.fast`)."""
    spec = table_spec(length, d_model, base=base, start=start, dtype=dtype, layout=layout)
    return fast.table(spec)
