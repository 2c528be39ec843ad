"""Scaled dot-product attention in NumPy (chapter 1).

Attention(Q, K, V) = softmax(Q Kᵀ / sqrt(d_k) + B) V, as in Vaswani et al. (2017),
with an optional additive bias ``B`` (how ALiBi and T5 inject position, chapter 8)
and an optional boolean mask (True where a query may look at a key).

Shapes follow one rule: the last two axes are (sequence, features) and any leading
axes (batch, heads) must be identical for q, k and v. ``bias`` and ``mask`` end in
(q_len, k_len) and may omit or set to 1 leading axes, which then apply to every
batch element or head. Nothing else is broadcast: a shape that does not fit raises
``ValueError`` naming the shapes.
"""

from __future__ import annotations

import math

import numpy as np

from posenc._validation import boolean_array, broadcasts_into, floating_array

__all__ = ["scaled_dot_product_attention", "self_attention", "softmax"]


def softmax(scores: np.ndarray) -> np.ndarray:
    """Softmax over the last axis, shifted by the row maximum so ``exp`` cannot overflow.

    ``-inf`` entries get weight exactly 0. A row whose entries are all ``-inf``
    has no defined softmax and raises ``ValueError``.
    """
    scores = floating_array("scores", scores, min_ndim=1)
    row_max = scores.max(axis=-1, keepdims=True)
    if not np.all(np.isfinite(row_max)):
        bad = np.argwhere(~np.isfinite(row_max[..., 0]))
        raise ValueError(
            "every row of scores needs at least one finite entry; "
            f"row {tuple(int(i) for i in bad[0])} has none (all keys masked?)"
        )
    weights = np.exp(scores - row_max)
    weights /= weights.sum(axis=-1, keepdims=True)
    return weights


def _score_modifier(name: str, value, expected: tuple[int, ...], *, boolean: bool):
    array = boolean_array(name, value) if boolean else floating_array(name, value)
    if (
        array.ndim < 2
        or array.shape[-2:] != expected[-2:]
        or not broadcasts_into(array.shape, expected)
    ):
        raise ValueError(
            f"{name} must have shape (..., q_len, k_len) = {expected} "
            f"(leading axes may be 1 or omitted), got {array.shape}"
        )
    return array


def scaled_dot_product_attention(q, k, v, *, bias=None, mask=None):
    """Scaled dot-product attention.

    Parameters
    ----------
    q : array (..., q_len, d_k), floating
    k : array (..., k_len, d_k), floating, same leading axes as ``q``
    v : array (..., k_len, d_v), floating, same leading axes as ``q``
    bias : array (..., q_len, k_len), floating, optional
        Added to the scaled scores before the softmax; ``-inf`` forbids a key.
    mask : array (..., q_len, k_len), bool, optional
        True where the query may attend to the key.

    Returns
    -------
    output : array (..., q_len, d_v)
    weights : array (..., q_len, k_len), rows summing to 1
    """
    q = floating_array("q", q, min_ndim=2)
    k = floating_array("k", k, min_ndim=2)
    v = floating_array("v", v, min_ndim=2)
    if q.shape[:-2] != k.shape[:-2] or q.shape[:-2] != v.shape[:-2]:
        raise ValueError(
            "q, k and v must share their leading (batch/head) axes, got shapes "
            f"q={q.shape}, k={k.shape}, v={v.shape}"
        )
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"q and k must have the same feature size d_k, got shapes q={q.shape}, k={k.shape}"
        )
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(
            "k and v must have the same number of positions (k_len), got shapes "
            f"k={k.shape}, v={v.shape}"
        )
    if q.shape[-1] == 0:
        raise ValueError(f"d_k must be at least 1, got shapes q={q.shape}, k={k.shape}")
    if k.shape[-2] == 0:
        raise ValueError(f"there must be at least one key, got k={k.shape}")

    score_shape = (*q.shape[:-1], k.shape[-2])
    # A Python float (not a NumPy scalar) keeps float32 inputs in float32.
    scores = (q @ np.swapaxes(k, -1, -2)) / math.sqrt(q.shape[-1])
    if bias is not None:
        scores = scores + _score_modifier("bias", bias, score_shape, boolean=False)
    if mask is not None:
        keep = _score_modifier("mask", mask, score_shape, boolean=True)
        scores = np.where(keep, scores, -np.inf)
    weights = softmax(scores)
    return weights @ v, weights


def self_attention(x, w_q, w_k, w_v, *, bias=None):
    """Single-head self-attention: queries, keys and values are projections of ``x``.

    Parameters
    ----------
    x : array (..., length, d_model), floating
    w_q, w_k : arrays (d_model, d_k)
    w_v : array (d_model, d_v)
    bias : array (..., length, length), optional, as in
        :func:`scaled_dot_product_attention`.

    Returns
    -------
    output : array (..., length, d_v)
    weights : array (..., length, length)
    """
    x = floating_array("x", x, min_ndim=2)
    d_model = x.shape[-1]
    w_q, w_k, w_v = (floating_array(n, w) for n, w in (("w_q", w_q), ("w_k", w_k), ("w_v", w_v)))
    for name, w in (("w_q", w_q), ("w_k", w_k), ("w_v", w_v)):
        if w.ndim != 2 or w.shape[0] != d_model:
            raise ValueError(
                f"{name} must have shape (d_model, features) with d_model = {d_model} "
                f"(the last axis of x, shape {x.shape}), got {w.shape}"
            )
    if w_q.shape != w_k.shape:
        raise ValueError(
            f"w_q and w_k must have the same shape, got w_q={w_q.shape}, w_k={w_k.shape}"
        )
    return scaled_dot_product_attention(x @ w_q, x @ w_k, x @ w_v, bias=bias)
