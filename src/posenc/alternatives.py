"""The alternatives to the added sinusoid, in NumPy (chapter 8).

Where the sinusoidal and learned tables are added to the input once, the methods
here act inside attention:

- :func:`rope` rotates queries and keys by an angle proportional to their position
  (RoFormer, Su et al. 2021), so a query-key score depends only on their offset.
- :func:`alibi_slopes` and :func:`alibi_bias` add a penalty proportional to the
  distance to every score (ALiBi, Press et al. 2022).
- :func:`t5_relative_position_bucket` and :func:`t5_bias` map an offset to one of a
  few buckets, each with a learned scalar bias per head (T5, Raffel et al. 2020).
- :func:`shaw_relative_index` clips offsets to ``[-k, k]`` and indexes learned
  relative vectors (Shaw et al. 2018).
- :func:`causal_mask` is all NoPE has: no encoding, only the causal mask
  (Haviv et al. 2022; Kazemnejad et al. 2023).

Offsets follow one convention throughout: ``relative_position = key - query``, so a
key in the past has a negative offset.
"""

from __future__ import annotations

import math

import numpy as np

from posenc._validation import (
    broadcasts_into,
    choice,
    flag,
    floating_array,
    integer,
    integer_array,
    positive_finite,
)
from posenc.encoding import MAX_POSITION

__all__ = [
    "PAIRINGS",
    "alibi_bias",
    "alibi_slopes",
    "causal_mask",
    "rope",
    "rope_frequencies",
    "shaw_relative_index",
    "t5_bias",
    "t5_relative_position_bucket",
]

PAIRINGS = ("interleaved", "half")
"""How :func:`rope` pairs features: (2i, 2i+1) as RoFormer writes it, or (i, i + d/2)."""


def rope_frequencies(d: int, *, base: float = 10000.0) -> np.ndarray:
    """The rotation speeds θ_i = base^(-2i/d), i = 0 .. d/2 - 1 (float64), for even ``d``."""
    d = integer("d", d, minimum=2)
    if d % 2:
        raise ValueError(f"rope rotates pairs of features, so d must be even, got d={d}")
    base = positive_finite("base", base)
    return base ** (-np.arange(0, d, 2, dtype=np.float64) / d)


def _positions(positions, shape: tuple[int, ...]) -> np.ndarray:
    """Integer positions for ``x`` of ``shape`` (..., length, d), broadcast to shape[:-1]."""
    length = shape[-2]
    if positions is None:
        return np.arange(length, dtype=np.int64)
    array = integer_array("positions", positions, bound=MAX_POSITION)
    if 1 < array.ndim < len(shape) - 1:
        # (batch, seq) against x of shape (batch, heads, seq, d) would broadcast along
        # the heads axis, silently wrong when batch == heads: refused, never guessed.
        raise ValueError(
            f"positions of shape {array.shape} for x of shape {shape} is ambiguous: NumPy "
            f"would align it with the axes just before the last, {shape[-array.ndim - 1 : -1]}, "
            f"not with the leading ones. For positions per sequence of x shaped (batch, "
            f"heads, seq, d), pass positions[:, None, :], of shape (batch, 1, seq), as "
            f"model code does; posenc.torch.RotaryEmbedding takes (batch, seq) directly"
        )
    if array.ndim < 1 or array.shape[-1] != length or not broadcasts_into(array.shape, shape[:-1]):
        raise ValueError(
            f"positions must have shape (..., length) broadcasting to {shape[:-1]} "
            f"(x has shape {shape}), got {array.shape}"
        )
    return array


def rope(
    x,
    positions=None,
    *,
    base: float = 10000.0,
    pairing: str = "interleaved",
    rotary_dim: int | None = None,
    frequencies=None,
    attention_scale: float = 1.0,
):
    """Rotary position embedding: rotate each pair of features by position * θ_i.

    Parameters
    ----------
    x : array (..., length, d), floating, d even
        Queries or keys (one head's features on the last axis).
    positions : int array (..., length), optional
        The position of each row; default ``0 .. length - 1``. Leading axes may be
        omitted or 1 (one set of positions for every batch element or head).
    base : float
        θ_i = base^(-2i/d), the sinusoidal table's frequencies.
    pairing : "interleaved" or "half"
        "interleaved" rotates (x_2i, x_2i+1), as RoFormer writes it;
        "half" rotates (x_i, x_i+d/2), as GPT-NeoX's code arranges it (Meta's
        LLaMA code pairs neighbours, the interleaved layout).
        The two are the same map up to the fixed column permutation
        :func:`posenc.layout_permutation`.
    rotary_dim : int, optional
        Partial rotary: only the first ``rotary_dim`` features (even, at most d) are
        rotated, with θ_i = base^(-2i/rotary_dim), and the rest pass through unchanged,
        as GPT-NeoX's ``rotary_pct`` does (0.25 of each head). Default: all d.
    frequencies : float array (rotated width // 2,), optional
        The rotation speed of every pair, in place of base^(-2i/d): for instance the
        scaled frequencies of :func:`posenc.long_context.scaled_frequencies`.
    attention_scale : float
        Multiplies cos and sin (YaRN's temperature; the query-key logits then scale
        by its square). Default 1.

    Returns
    -------
    array of the shape and dtype of ``x``. Pair i at position p becomes
    (x0·cos(pθ_i) - x1·sin(pθ_i), x0·sin(pθ_i) + x1·cos(pθ_i)).
    Angles are computed in float64 and rounded once to the dtype of ``x``.
    """
    x = floating_array("x", x, min_ndim=2)
    width = x.shape[-1]
    d = width if rotary_dim is None else integer("rotary_dim", rotary_dim, minimum=2)
    if d == 0 or d % 2 or d > width:
        raise ValueError(
            f"rope rotates pairs of features, so the rotated width must be even, > 0 and "
            f"at most the last axis of x, got d={d} (rotary_dim={rotary_dim}, x has shape "
            f"{x.shape})"
        )
    pairing = choice("pairing", pairing, PAIRINGS)
    scale = positive_finite("attention_scale", attention_scale)
    if d < width:
        rotated = rope(
            x[..., :d],
            positions,
            base=base,
            pairing=pairing,
            frequencies=frequencies,
            attention_scale=scale,
        )
        passed = np.broadcast_to(x[..., d:], (*rotated.shape[:-1], width - d))
        return np.concatenate([rotated, passed], axis=-1)
    if frequencies is None:
        theta = rope_frequencies(d, base=base)
    else:
        theta = floating_array("frequencies", frequencies).astype(np.float64)
        if theta.shape != (d // 2,) or not np.all(np.isfinite(theta)):
            raise ValueError(
                f"frequencies must be {d // 2} finite numbers, one per rotated pair, "
                f"got shape {theta.shape}"
            )
    angles = _positions(positions, x.shape)[..., None] * theta
    # cos + i sin of every angle, in float64 (np.exp of an imaginary number gives both
    # at once, the same values as np.cos and np.sin), rounded once to the dtype of x.
    turn = np.exp(1j * angles)
    if scale != 1.0:
        turn *= scale
    out = np.empty(np.broadcast_shapes(x.shape, (*turn.shape[:-1], d)), dtype=x.dtype)
    ctype = _COMPLEX.get(x.dtype)
    if ctype is not None and turn.ndim == 2 and out.shape == x.shape and x.flags.c_contiguous:
        # One set of positions for every leading index (the common case), done with as
        # few passes over memory as NumPy allows (chapter 11).
        if pairing == "interleaved":  # (x0 + i x1)(cos + i sin): one complex product
            np.multiply(x.view(ctype), turn.astype(ctype), out=out.view(ctype))
        else:  # one (length, d) slice at a time, which stays in cache
            cos, sin = turn.real.astype(x.dtype), turn.imag.astype(x.dtype)
            both = np.concatenate([cos, cos], axis=-1)
            rows = x.shape[-2:]
            for xb, ob in zip(x.reshape(-1, *rows), out.reshape(-1, *rows), strict=True):
                _rotate_half_in_place(xb, both, sin, ob)
        return out
    _rotate_pairs(x, turn.real.astype(x.dtype), turn.imag.astype(x.dtype), out, pairing)
    return out


_COMPLEX = {np.dtype(np.float32): np.complex64, np.dtype(np.float64): np.complex128}


def _rotate_half_in_place(x, both, sin, out) -> None:
    """Half pairing: out = x * [cos, cos], then out0 -= x1 sin and out1 += x0 sin."""
    half = x.shape[-1] // 2
    np.multiply(x, both, out=out)
    product = np.multiply(x[..., half:], sin)
    np.subtract(out[..., :half], product, out=out[..., :half])
    np.multiply(x[..., :half], sin, out=product)
    np.add(out[..., half:], product, out=out[..., half:])


def _rotate_pairs(x, cos, sin, out, pairing: str) -> None:
    """out = x with every pair (x0, x1) rotated: (x0 cos - x1 sin, x0 sin + x1 cos).

    Written with ``out=`` so that the only temporary is one product the size of x0.
    """
    half = x.shape[-1] // 2
    if pairing == "interleaved":
        x0, x1, o0, o1 = x[..., 0::2], x[..., 1::2], out[..., 0::2], out[..., 1::2]
    else:
        x0, x1, o0, o1 = x[..., :half], x[..., half:], out[..., :half], out[..., half:]
    np.multiply(x0, cos, out=o0)
    product = np.multiply(x1, sin)
    np.subtract(o0, product, out=o0)
    np.multiply(x1, cos, out=o1)
    np.multiply(x0, sin, out=product)
    np.add(o1, product, out=o1)


def alibi_slopes(n_heads: int) -> np.ndarray:
    """ALiBi's per-head slopes m_h (float64, shape ``(n_heads,)``), steepest first.

    For n heads, n a power of two, the slopes are the geometric sequence
    2^(-8/n), 2^(-16/n), ..., 2^(-8) (Press et al. 2022, section 3). For other n,
    the paper's reference code takes the n' slopes of the largest power of two
    n' <= n, then fills the remaining n - n' from the odd-numbered slopes of 2n'
    (the first, third, fifth ...), which interleave with the first n'.
    """
    n_heads = integer("n_heads", n_heads, minimum=1)
    power = 1 << (n_heads.bit_length() - 1)  # largest power of two <= n_heads
    slopes = 2.0 ** (-8.0 * np.arange(1, power + 1) / power)
    if power == n_heads:
        return slopes
    extra = 2.0 ** (-8.0 * np.arange(1, 2 * power + 1, 2) / (2 * power))
    return np.concatenate([slopes, extra[: n_heads - power]])


def _lengths(q_len, k_len) -> tuple[int, int]:
    q_len = integer("q_len", q_len, minimum=1, maximum=MAX_POSITION)
    k_len = q_len if k_len is None else integer("k_len", k_len, minimum=1, maximum=MAX_POSITION)
    if k_len < q_len:
        raise ValueError(
            "the queries are the last q_len of the k_len positions, so k_len must be at "
            f"least q_len, got q_len={q_len}, k_len={k_len}"
        )
    return q_len, k_len


def _offsets(q_len: int, k_len: int) -> np.ndarray:
    """key - query for every (query, key); queries sit at the last q_len positions."""
    queries = np.arange(k_len - q_len, k_len)
    return np.arange(k_len)[None, :] - queries[:, None]


def causal_mask(q_len: int, k_len: int | None = None) -> np.ndarray:
    """Boolean (q_len, k_len): True where a query may see a key (the key is not later).

    With ``k_len > q_len`` the queries are the last ``q_len`` positions (a model
    continuing a cached prefix). This is the only positional signal NoPE has.
    """
    q_len, k_len = _lengths(q_len, k_len)
    return _offsets(q_len, k_len) <= 0


def alibi_bias(n_heads: int, q_len: int, k_len: int | None = None, *, causal: bool = True):
    """ALiBi's additive attention bias, float64 of shape ``(n_heads, q_len, k_len)``.

    Entry [h, i, j] is -m_h·(i - j) for a key at or before the query; a future key
    gets -inf when ``causal`` and -m_h·|i - j| otherwise. Queries sit at the last
    ``q_len`` of the ``k_len`` positions. Add it to the scaled scores, e.g. as
    ``bias=`` of :func:`posenc.attention.scaled_dot_product_attention`.
    """
    slopes = alibi_slopes(n_heads)
    q_len, k_len = _lengths(q_len, k_len)
    causal = flag("causal", causal)
    offsets = _offsets(q_len, k_len)
    bias = slopes[:, None, None] * -np.abs(offsets)  # int negation: no -0.0
    if causal:
        bias = np.where(offsets > 0, -np.inf, bias)
    return bias


def t5_relative_position_bucket(
    relative_position, *, bidirectional: bool = True, num_buckets: int = 32, max_distance: int = 128
):
    """T5's bucket for each offset ``relative_position = key - query`` (int64, same shape).

    With ``bidirectional``, half the buckets are for keys in the past (or the query
    itself) and half, shifted by num_buckets/2, for keys in the future; otherwise all
    buckets describe the past and every future key shares bucket 0. Within a
    direction, with b buckets, distances below b/2 each get their own bucket;
    larger ones are spread logarithmically up to ``max_distance`` and everything
    at or beyond it shares the last bucket (Raffel et al. 2020, section 2.1).

    The logarithmic buckets are computed as T5's reference code computes them, in
    float32: ``exact + int(log(d / exact) / log(max_distance / exact) * (b - exact))``
    with every operation on float32 numbers, each correctly rounded. Checkpoints were
    trained with that arithmetic, and at distances where the real-number value is a
    whole number it decides the bucket: ``t5_relative_position_bucket(-64,
    bidirectional=False, num_buckets=9, max_distance=128)`` is 8 in float32, where
    float64 gives 3.9999999999999996 and bucket 7. A float32 ``log`` that is not
    correctly rounded (a vectorised library's) can still move such a boundary distance
    by one bucket; no rule independent of that library can match it everywhere.
    """
    bidirectional = flag("bidirectional", bidirectional)
    num_buckets = integer("num_buckets", num_buckets, minimum=4 if bidirectional else 2)
    max_distance = integer("max_distance", max_distance, minimum=1)
    offsets = integer_array("relative_position", relative_position, bound=MAX_POSITION)
    buckets = np.zeros(offsets.shape, dtype=np.int64)
    distance = -offsets  # how far back the key is
    if bidirectional:
        num_buckets //= 2
        buckets += np.where(distance < 0, num_buckets, 0)
        distance = np.abs(distance)
    else:
        distance = np.maximum(distance, 0)
    exact = num_buckets // 2
    if max_distance <= exact:
        raise ValueError(
            f"max_distance must exceed the {exact} exactly-bucketed distances, "
            f"got max_distance={max_distance} with num_buckets={num_buckets}"
        )
    f32 = np.float32
    with np.errstate(divide="ignore"):  # log(0) for the small distances, discarded below
        ratio = distance.astype(f32) / f32(exact)
        # float32 log, correctly rounded: the float64 log rounded once
        log_ratio = np.log(ratio.astype(np.float64)).astype(f32)
    scaled = log_ratio / f32(math.log(max_distance / exact)) * f32(num_buckets - exact)
    whole = np.trunc(np.maximum(scaled, f32(0))).astype(np.int64)  # as .to(torch.long)
    logarithmic = np.minimum(exact + whole, num_buckets - 1)
    buckets += np.where(distance < exact, distance, logarithmic)
    return buckets


def t5_bias(
    table,
    q_len: int,
    k_len: int | None = None,
    *,
    bidirectional: bool = True,
    max_distance: int = 128,
):
    """T5's attention bias from a learned ``table`` of shape (num_buckets, n_heads).

    Returns float (n_heads, q_len, k_len): entry [h, i, j] is
    ``table[bucket(j - i), h]``. Queries sit at the last ``q_len`` positions.
    """
    table = floating_array("table", table)
    if table.ndim != 2:
        raise ValueError(f"table must have shape (num_buckets, n_heads), got {table.shape}")
    q_len, k_len = _lengths(q_len, k_len)
    buckets = t5_relative_position_bucket(
        _offsets(q_len, k_len),
        bidirectional=bidirectional,
        num_buckets=table.shape[0],
        max_distance=max_distance,
    )
    return np.moveaxis(table[buckets], -1, 0)


def shaw_relative_index(q_len: int, k_len: int | None = None, *, max_distance: int):
    """Shaw et al.'s clipped offsets as row indices into a (2k+1)-row table.

    Returns int64 (q_len, k_len): clip(j - i, -k, k) + k with k = ``max_distance``,
    so row k is the query itself, rows below it the past, rows above the future.
    Every offset beyond k shares the edge row: the model cannot tell distances
    greater than k apart (Shaw et al. 2018, section 3.2).
    """
    max_distance = integer("max_distance", max_distance, minimum=0)
    q_len, k_len = _lengths(q_len, k_len)
    return np.clip(_offsets(q_len, k_len), -max_distance, max_distance) + max_distance
