"""A Transformer encoder block in NumPy, and the positional encoding added to its input
(chapter 7).

The block is the original post-norm layout of Vaswani et al. (2017)::

    h = layer_norm(x + multi_head_attention(x))
    y = layer_norm(h + feed_forward(h))

and the input it sees is ``embedding[tokens] * sqrt(d_model) + PE``. Arrays are
``(length, d_model)`` or ``(batch, length, d_model)``; :func:`add_positional_encoding`
also accepts the sequence-first layout ``(length, batch, d_model)`` when told so, and
refuses any shape it would otherwise broadcast wrongly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from posenc._validation import (
    flag,
    floating_array,
    integer,
    integer_array,
    positive_finite,
)
from posenc.attention import scaled_dot_product_attention
from posenc.encoding import MAX_POSITION, sinusoidal

__all__ = [
    "BlockWeights",
    "add_positional_encoding",
    "embed",
    "feed_forward",
    "layer_norm",
    "multi_head_self_attention",
    "transformer_block",
]


def layer_norm(x, *, eps=1e-5):
    """Normalise each row (last axis) to mean 0 and variance 1.

    The learned gain and bias of a real layer norm start at 1 and 0; they are left
    out here because they are the identity at initialisation.
    """
    x = floating_array("x", x, min_ndim=1)
    eps = positive_finite("eps", eps)
    mean = x.mean(axis=-1, keepdims=True)
    variance = x.var(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(variance + eps)


def feed_forward(x, w_1, b_1, w_2, b_2):
    """The position-wise feed-forward layer, ``relu(x W1 + b1) W2 + b2``, row by row."""
    x = floating_array("x", x, min_ndim=1)
    return np.maximum(x @ w_1 + b_1, 0.0) @ w_2 + b_2


@dataclass(frozen=True)
class BlockWeights:
    """The weights of one block: per-head projections, output projection, feed-forward.

    ``w_q``, ``w_k``, ``w_v`` have shape ``(n_heads, d_model, d_head)`` with
    ``d_head = d_model // n_heads``; ``w_o`` is ``(d_model, d_model)``; the feed-forward
    layer is ``w_1 (d_model, d_ff)``, ``b_1 (d_ff,)``, ``w_2 (d_ff, d_model)``, ``b_2 (d_model,)``.
    """

    w_q: np.ndarray
    w_k: np.ndarray
    w_v: np.ndarray
    w_o: np.ndarray
    w_1: np.ndarray
    b_1: np.ndarray
    w_2: np.ndarray
    b_2: np.ndarray

    @property
    def n_heads(self) -> int:
        return self.w_q.shape[0]

    @property
    def d_model(self) -> int:
        return self.w_o.shape[0]

    @classmethod
    def random(cls, d_model, *, n_heads=1, d_ff=None, seed=0) -> BlockWeights:
        """Random weights, scaled by ``1/sqrt(fan_in)`` so activations stay of order 1."""
        d_model = integer("d_model", d_model, minimum=1)
        n_heads = integer("n_heads", n_heads, minimum=1)
        d_ff = 4 * d_model if d_ff is None else integer("d_ff", d_ff, minimum=1)
        if d_model % n_heads:
            raise ValueError(
                f"n_heads must divide d_model, got n_heads={n_heads}, d_model={d_model}"
            )
        d_head = d_model // n_heads
        rng = np.random.default_rng(seed)

        def normal(*shape):
            return rng.normal(size=shape) / math.sqrt(shape[-2])

        return cls(
            w_q=normal(n_heads, d_model, d_head),
            w_k=normal(n_heads, d_model, d_head),
            w_v=normal(n_heads, d_model, d_head),
            w_o=normal(d_model, d_model),
            w_1=normal(d_model, d_ff),
            b_1=np.zeros(d_ff),
            w_2=normal(d_ff, d_model),
            b_2=np.zeros(d_model),
        )


def _sequence_input(x, d_model: int) -> np.ndarray:
    x = floating_array("x", x)
    if x.ndim not in (2, 3) or x.shape[-1] != d_model:
        raise ValueError(
            "x must have shape (length, d_model) or (batch, length, d_model) with "
            f"d_model = {d_model}, got {x.shape}"
        )
    return x


def multi_head_self_attention(x, weights: BlockWeights, *, mask=None):
    """Every head attends over the sequence; the heads are concatenated and projected.

    Returns ``(output, attention_weights)`` with output shaped like ``x`` and the
    weights ``(..., n_heads, length, length)``.
    """
    x = _sequence_input(x, weights.d_model)
    heads = x[..., None, :, :]  # (..., 1, length, d_model): one copy per head
    q, k, v = heads @ weights.w_q, heads @ weights.w_k, heads @ weights.w_v
    attended, attention = scaled_dot_product_attention(q, k, v, mask=mask)
    # (..., n_heads, length, d_head) -> (..., length, n_heads * d_head)
    joined = np.moveaxis(attended, -3, -2).reshape(x.shape)
    return joined @ weights.w_o, attention


def transformer_block(x, weights: BlockWeights, *, mask=None):
    """One post-norm encoder block; ``mask`` (True = may attend) e.g. a causal mask."""
    x = _sequence_input(x, weights.d_model)
    attended, _ = multi_head_self_attention(x, weights, mask=mask)
    h = layer_norm(x + attended)
    return layer_norm(h + feed_forward(h, weights.w_1, weights.b_1, weights.w_2, weights.b_2))


def embed(tokens, embedding, *, scale=True):
    """Look up token vectors, times ``sqrt(d_model)`` when ``scale`` (section 3.4 of
    Vaswani et al.): ``tokens`` are integer ids, ``embedding`` is ``(vocab, d_model)``."""
    embedding = floating_array("embedding", embedding)
    if embedding.ndim != 2:
        raise ValueError(f"embedding must have shape (vocab_size, d_model), got {embedding.shape}")
    tokens = integer_array("tokens", tokens, bound=MAX_POSITION)
    if tokens.size and (tokens.min() < 0 or tokens.max() >= embedding.shape[0]):
        raise ValueError(
            f"tokens must lie in [0, {embedding.shape[0]}) (the embedding has "
            f"{embedding.shape[0]} rows), got ids from {tokens.min()} to {tokens.max()}"
        )
    vectors = embedding[tokens]
    return vectors * math.sqrt(embedding.shape[1]) if scale else vectors


def add_positional_encoding(x, *, base=10000.0, start=0, batch_first=True):
    """``x`` plus the sinusoidal table, added along the sequence axis.

    ``x`` is ``(length, d_model)``, or ``(batch, length, d_model)`` when
    ``batch_first`` (the default), or ``(length, batch, d_model)`` when not. Every
    batch element gets the same rows 0..length-1 (shifted by ``start``); any other
    rank raises ``ValueError`` instead of broadcasting.
    """
    x = floating_array("x", x)
    batch_first = flag("batch_first", batch_first)
    if x.ndim not in (2, 3):
        layout = "(batch, length, d_model)" if batch_first else "(length, batch, d_model)"
        raise ValueError(f"x must have shape (length, d_model) or {layout}, got {x.shape}")
    length_axis = 1 if (x.ndim == 3 and batch_first) else 0
    table = sinusoidal(x.shape[length_axis], x.shape[-1], base=base, start=start, dtype=x.dtype)
    if x.ndim == 3:
        table = table[None] if batch_first else table[:, None]
    return x + table
