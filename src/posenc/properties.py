"""Properties of the sinusoidal table that chapter 6 shows and checks.

Each pair i of columns holds ``(sin(p * w_i), cos(p * w_i))`` with the frequency
``w_i = base**(-2i/d_model)``. Moving from position p to p + k turns every pair by
the angle ``k * w_i``; everything here follows from that:

- :func:`wavelengths` — the period ``2 pi / w_i`` of each pair, a geometric
  progression from ``2 pi`` up to ``2 pi * base**((d - 2) / d)``;
- :func:`rotation_matrix` — the block-diagonal matrix ``M_k`` with
  ``PE(p + k) = M_k @ PE(p)`` for every p (for the table's rows, which the chapters
  write as row vectors: ``PE(p + k) = PE(p) @ M_k.T``);
- :func:`offset_dot_product` — ``PE(p) . PE(p + k) = sum_i cos(k * w_i)``, which
  depends on the offset k alone (and on its size, not its sign);
- :func:`diagonal_spread` — how far a score matrix is from a function of the offset:
  the spread (max - min) along each of its diagonals.

The last two need an even ``d_model``: with an odd one the final column is a
sine without its cosine, and neither statement holds.
"""

from __future__ import annotations

import numpy as np

from posenc import _validation
from posenc.encoding import MAX_POSITION, frequencies, layout_permutation, table_spec


def _even_d_model(d_model, *, base, what: str) -> np.ndarray:
    """Check ``d_model`` (even) and ``base``; return the pair frequencies."""
    spec = table_spec(1, d_model, base=base, start=0, dtype=np.float64, layout="interleaved")
    if spec.d_model % 2:
        raise ValueError(
            f"{what} needs an even d_model (sin/cos pairs), got d_model={spec.d_model}: "
            "the last column would be a sine without a cosine partner"
        )
    return spec.frequencies


def wavelengths(d_model, *, base=10000.0) -> np.ndarray:
    """The wavelength ``2 pi * base**(2i/d_model)`` of each pair i, in positions.

    Consecutive wavelengths differ by the factor ``base**(2/d_model)``. The longest
    is ``2 pi * base**((d_model - 2)/d_model)`` for even ``d_model``: short of
    ``2 pi * base`` by the factor ``base**(-2/d_model)``.
    """
    return 2 * np.pi / frequencies(d_model, base=base)


def rotation_matrix(offset, d_model, *, base=10000.0, layout="interleaved") -> np.ndarray:
    """The matrix ``M_k`` (``k = offset``) with ``PE(p + k) = M_k @ PE(p)`` for every p.

    For the interleaved layout it is block-diagonal: pair i gets the 2x2 block
    ``[[cos(k w_i), sin(k w_i)], [-sin(k w_i), cos(k w_i)]]``, a rotation by ``-k w_i``
    in the (sin, cos) plane. It is orthogonal, ``M_a @ M_b = M_{a+b}`` and
    ``M_{-k} = M_k.T``. ``layout="concat"`` gives the same matrix with rows and
    columns in that layout's order. ``offset`` is an integer, negative allowed, of
    size at most 2**53; ``d_model`` must be even.
    """
    offset = _validation.integer("offset", offset, minimum=-MAX_POSITION, maximum=MAX_POSITION)
    layout = _validation.choice("layout", layout, ("interleaved", "concat"))
    omega = _even_d_model(d_model, base=base, what="rotation_matrix")
    angles = offset * omega
    cos, sin = np.cos(angles), np.sin(angles)
    d = 2 * omega.size
    matrix = np.zeros((d, d), dtype=np.float64)
    even, odd = np.arange(0, d, 2), np.arange(1, d, 2)
    matrix[even, even] = cos
    matrix[even, odd] = sin
    matrix[odd, even] = -sin
    matrix[odd, odd] = cos
    if layout == "concat":
        order = layout_permutation(d)
        matrix = matrix[np.ix_(order, order)]
    return matrix


def offset_dot_product(offsets, d_model, *, base=10000.0) -> np.ndarray:
    """``PE(p) . PE(p + k)`` for each offset k in ``offsets``: ``sum_i cos(k * w_i)``.

    The value is the same for every position p (chapter 6 checks it against the
    table). It is ``d_model / 2`` at k = 0, the squared norm of every row, and
    symmetric in k. ``offsets`` is an int or an array-like of ints, each of size at
    most 2**53; the result has the shape of ``offsets``. ``d_model`` must be even.
    """
    offsets = _validation.integer_array("offsets", offsets, bound=MAX_POSITION)
    omega = _even_d_model(d_model, base=base, what="offset_dot_product")
    angles = offsets.astype(np.float64)[..., None] * omega
    return np.cos(angles).sum(axis=-1)


def diagonal_spread(scores) -> np.ndarray:
    """The spread (max - min) of a score matrix along each diagonal, one per offset.

    ``scores[query, key]`` is (q_len, k_len); entry ``j`` of the result belongs to the
    offset ``key - query = j - (q_len - 1)``, from ``-(q_len - 1)`` to ``k_len - 1``
    (the convention of :mod:`posenc.alternatives`). A score that depends on the offset
    alone has every spread zero, up to rounding. Masked entries (-inf, as a causal
    mask leaves them) are left out; a diagonal with nothing else has spread 0.
    """
    scores = _validation.floating_array("scores", scores, min_ndim=2)
    if scores.ndim != 2 or 0 in scores.shape:
        raise ValueError(f"scores must be a non-empty (q_len, k_len) matrix, got {scores.shape}")
    q_len, k_len = scores.shape
    spreads = []
    for j in range(1 - q_len, k_len):
        diagonal = np.diagonal(scores, j)
        kept = diagonal[diagonal != -np.inf]
        spreads.append(np.ptp(kept) if kept.size else 0.0)
    return np.array(spreads)
