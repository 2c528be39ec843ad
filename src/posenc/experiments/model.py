"""A small causal language model with a pluggable positional method (chapter 9).

``CausalLanguageModel(..., encoding=...)`` is a pre-norm decoder-only Transformer
whose only difference between variants is where position enters:

- ``"none"``: nothing; the causal mask is the only positional signal (NoPE).
- ``"sinusoidal"`` / ``"learned"``: a table added to the scaled token embeddings,
  by :mod:`posenc.torch`'s modules (a learned table has ``max_len`` rows; rows past
  the training length are never updated).
- ``"rope"``: queries and keys of every layer rotated by
  :class:`posenc.torch.RotaryEmbedding` (interleaved pairs), the book's one RoPE.
- ``"alibi"``: :func:`posenc.alternatives.alibi_bias` added to every layer's scores.
- ``"t5"``: a learned scalar per (bucket, head), shared by all layers, indexed by
  :func:`posenc.alternatives.t5_relative_position_bucket` (unidirectional, as in a
  decoder).

The position-dependent tables (ALiBi and T5 bucket indices) come from the NumPy
functions of :mod:`posenc.alternatives`, and RoPE from :mod:`posenc.torch`, so the
model uses the tested definitions rather than a second copy of them.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from posenc._validation import choice, integer
from posenc.alternatives import alibi_bias, causal_mask, t5_relative_position_bucket
from posenc.torch import (
    LearnedPositionalEncoding,
    RotaryEmbedding,
    SinusoidalPositionalEncoding,
    check_tokens,
)

__all__ = ["ENCODINGS", "CausalLanguageModel"]

ENCODINGS = ("none", "sinusoidal", "learned", "rope", "alibi", "t5")
T5_BUCKETS = 32
T5_MAX_DISTANCE = 128


# The position-only parts of the biases depend on the length alone: computed once per
# length instead of at every forward pass (CPU tensors that nothing writes to).
@functools.lru_cache(maxsize=16)
def _alibi(n_heads: int, length: int) -> torch.Tensor:
    return torch.from_numpy(alibi_bias(n_heads, length).astype(np.float32))


@functools.lru_cache(maxsize=16)
def _causal(length: int) -> torch.Tensor:
    return torch.from_numpy(np.where(causal_mask(length), np.float32(0), np.float32(-np.inf)))


@functools.lru_cache(maxsize=16)
def _t5_buckets(length: int) -> torch.Tensor:
    offsets = np.arange(length)[None, :] - np.arange(length)[:, None]
    buckets = t5_relative_position_bucket(
        offsets, bidirectional=False, num_buckets=T5_BUCKETS, max_distance=T5_MAX_DISTANCE
    )
    return torch.from_numpy(buckets)


class _Attention(nn.Module):
    def __init__(self, d_model: int, n_heads: int, encoding: str):
        super().__init__()
        self.n_heads, self.encoding = n_heads, encoding
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)
        head = d_model // n_heads
        # RoPE's frequencies and scale (CausalLanguageModel.set_rope_frequencies swaps
        # the module); it holds no state, so state_dict is the same either way.
        self.rotary = RotaryEmbedding(head, pairing="interleaved") if encoding == "rope" else None
        self.keep_weights = False  # set by CausalLanguageModel.attention_weights
        self.weights: torch.Tensor | None = None

    def forward(self, x: torch.Tensor, bias: torch.Tensor, positions=None) -> torch.Tensor:
        batch, length, d_model = x.shape
        q, k, v = self.qkv(x).view(batch, length, 3, self.n_heads, -1).permute(2, 0, 3, 1, 4)
        if self.rotary is not None:
            q, k = self.rotary(q, positions), self.rotary(k, positions)
        if self.keep_weights:
            # The same attention written out, to keep its weights.
            scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]) + bias
            self.weights = torch.softmax(scores, dim=-1)
            y = self.weights @ v
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
        return self.out(y.transpose(1, 2).reshape(batch, length, d_model))


class _Block(nn.Module):
    def __init__(self, d_model: int, n_heads: int, d_ff: int, encoding: str):
        super().__init__()
        self.norm_1, self.norm_2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.attention = _Attention(d_model, n_heads, encoding)
        self.feed_forward = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model)
        )

    def forward(self, x: torch.Tensor, bias: torch.Tensor, positions=None) -> torch.Tensor:
        x = x + self.attention(self.norm_1(x), bias, positions)
        return x + self.feed_forward(self.norm_2(x))


class CausalLanguageModel(nn.Module):
    """Tokens (batch, length) -> next-step logits (batch, length, vocab_size).

    Parameters
    ----------
    vocab_size, d_model, n_heads, n_layers, d_ff : ints
        d_model must be a multiple of n_heads, and d_model / n_heads even for RoPE.
    encoding : one of :data:`ENCODINGS`
    max_len : int
        Rows of the learned table (the longest sequence "learned" accepts); the
        other methods take any length.
    """

    def __init__(
        self,
        vocab_size: int,
        d_model: int = 64,
        n_heads: int = 4,
        n_layers: int = 2,
        *,
        encoding: str = "none",
        d_ff: int | None = None,
        max_len: int = 1024,
    ):
        super().__init__()
        self.vocab_size = integer("vocab_size", vocab_size, minimum=1)
        self.d_model = integer("d_model", d_model, minimum=1)
        self.n_heads = integer("n_heads", n_heads, minimum=1)
        n_layers = integer("n_layers", n_layers, minimum=1)
        d_ff = 4 * self.d_model if d_ff is None else integer("d_ff", d_ff, minimum=1)
        self.encoding = choice("encoding", encoding, ENCODINGS)
        self.max_len = integer("max_len", max_len, minimum=1)
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={d_model} must be a multiple of n_heads={n_heads}")
        if encoding == "rope" and (self.d_model // self.n_heads) % 2:
            raise ValueError(
                f"rope needs an even head size, got d_model / n_heads = {d_model // n_heads}"
            )
        self.embedding = nn.Embedding(vocab_size, d_model)
        nn.init.normal_(self.embedding.weight, std=1 / math.sqrt(d_model))
        self.position: nn.Module | None = None
        if encoding == "sinusoidal":
            self.position = SinusoidalPositionalEncoding(d_model, max_len=max_len)
        elif encoding == "learned":
            self.position = LearnedPositionalEncoding(d_model, max_len=max_len)
        self.t5_table = nn.Parameter(torch.zeros(T5_BUCKETS, n_heads)) if encoding == "t5" else None
        self.blocks = nn.ModuleList(
            _Block(d_model, n_heads, d_ff, encoding) for _ in range(n_layers)
        )
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size)

    def attention_bias(self, length: int) -> torch.Tensor:
        """The additive (n_heads or 1, length, length) bias every layer adds to its scores."""
        device = self.embedding.weight.device
        if self.encoding == "alibi":
            return _alibi(self.n_heads, length).to(device)
        causal = _causal(length).to(device)
        if self.encoding != "t5":
            return causal[None]
        buckets = _t5_buckets(length).to(device)
        table = self.t5_table[buckets]  # (length, length, heads)
        return table.permute(2, 0, 1) + causal

    def set_rope_frequencies(self, frequencies=None, attention_scale: float = 1.0) -> None:
        """Use these RoPE frequencies (one per pair of a head) and scale from now on.

        ``None`` and 1.0 restore RoPE's own. For stretching a trained model to longer
        inputs with :func:`posenc.long_context.scaled_frequencies`; nothing is
        stored in ``state_dict``.
        """
        if self.encoding != "rope":
            raise ValueError(
                f"RoPE frequencies apply to encoding='rope' only, not {self.encoding!r}"
            )
        head = self.d_model // self.n_heads
        if frequencies is not None and np.shape(frequencies) != (head // 2,):
            raise ValueError(
                f"frequencies must have shape ({head // 2},), one per pair of a head of "
                f"width {head}, got {np.shape(frequencies)}"
            )
        if not (math.isfinite(attention_scale) and attention_scale > 0):
            raise ValueError(f"attention_scale must be finite and > 0, got {attention_scale}")
        for block in self.blocks:
            block.attention.rotary = RotaryEmbedding(
                head,
                pairing="interleaved",
                frequencies=frequencies,
                attention_scale=float(attention_scale),
            )

    def rope_frequencies(self) -> tuple[np.ndarray, float]:
        """The RoPE frequencies and attention scale in force now (every layer's are the
        same: :meth:`set_rope_frequencies` sets them all)."""
        rotary = self.blocks[0].attention.rotary
        if rotary is None:
            raise ValueError(f"encoding={self.encoding!r} has no RoPE frequencies")
        return rotary.frequencies, rotary.attention_scale

    @torch.no_grad()
    def attention_weights(self, tokens: torch.Tensor, positions=None) -> list[torch.Tensor]:
        """Every layer's attention weights for ``tokens``: (batch, heads, length, length).

        Row t of a head is the distribution query t puts over keys 0 .. t (zero past
        t). Computed by the same forward pass, with the softmax written out.
        """
        attentions = [block.attention for block in self.blocks]
        try:
            for attention in attentions:
                attention.keep_weights = True
            self(tokens, positions)
            return [attention.weights for attention in attentions]
        finally:
            for attention in attentions:
                attention.keep_weights, attention.weights = False, None

    @torch.no_grad()
    def rope_queries_keys(self, tokens: torch.Tensor, layer: int):
        """Layer ``layer``'s queries and keys for ``tokens``, *before* RoPE's rotation, as
        complex pairs (features 2i, 2i + 1, the pairs the rotation turns): two NumPy
        arrays (batch, heads, length, head_dim / 2)."""
        if self.encoding != "rope":
            raise ValueError(f"encoding={self.encoding!r} has no RoPE queries and keys")
        block = self.blocks[integer("layer", layer, minimum=0, maximum=len(self.blocks) - 1)]
        kept = {}
        hook = block.attention.qkv.register_forward_hook(
            lambda module, args, output: kept.setdefault("qkv", output)
        )
        try:
            self(tokens)
        finally:
            hook.remove()
        batch, length, _ = kept["qkv"].shape
        q, k, _ = kept["qkv"].view(batch, length, 3, self.n_heads, -1).permute(2, 0, 3, 1, 4)
        pairs = [torch.complex(x[..., 0::2], x[..., 1::2]).numpy() for x in (q, k)]
        return pairs[0], pairs[1]

    def attention_entropy(self, tokens: torch.Tensor, positions=None) -> torch.Tensor:
        """Entropy in nats of every query's attention: (layers, batch, heads, length).

        Query t attends over t + 1 keys, so its entropy lies in [0, ln(t + 1)];
        ln(t + 1) is uniform attention.
        """
        weights = torch.stack(self.attention_weights(tokens, positions))
        return -torch.special.xlogy(weights, weights).sum(dim=-1)

    def attention_at_distance(
        self, tokens: torch.Tensor, distances, *, first_query: int = 0
    ) -> torch.Tensor:
        """Mean attention each layer's heads put on the key ``d`` positions back, for each
        d in ``distances``: (layers, heads, len(distances)), averaged over the batch and
        the queries t >= ``first_query`` (every d <= t there)."""
        distances = [int(d) for d in distances]
        length = tokens.shape[1]
        if not distances or min(distances) < 0 or first_query < max(distances):
            raise ValueError(
                f"distances must be >= 0 and at most first_query ({first_query}), got {distances}"
            )
        if first_query >= length:
            raise ValueError(f"first_query ({first_query}) must be < the length ({length})")
        weights = torch.stack(self.attention_weights(tokens))  # (layers, batch, heads, q, k)
        queries = torch.arange(first_query, length)
        return torch.stack(
            [weights[:, :, :, queries, queries - d].mean(dim=(1, 3)) for d in distances], dim=-1
        )

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        """Logits for ``tokens``; ``positions`` (RoPE only) as in :class:`RotaryEmbedding`.

        Without ``positions`` the tokens sit at 0 .. length - 1. Explicit positions
        (for instance sorted random ones, as randomized positional encodings train
        with) are accepted by "rope" alone: the other methods index tables or biases
        by 0 .. length - 1.
        """
        check_tokens(tokens, self.vocab_size)
        if positions is not None and self.encoding != "rope":
            raise ValueError(
                f"positions are accepted with encoding='rope' only, not {self.encoding!r}"
            )
        x = self.embedding(tokens) * math.sqrt(self.d_model)
        if self.position is not None:
            x = self.position(x)
        bias = self.attention_bias(tokens.shape[1])
        for block in self.blocks:
            x = block(x, bias, positions)
        return self.head(self.norm(x))
