"""Positional encodings as PyTorch modules, and a small encoder that uses them (chapter 7).

Import it by name (``import posenc.torch``): it needs PyTorch, which ``import posenc``
and chapters 1-3 do not.

- :class:`SinusoidalPositionalEncoding` adds ``posenc.sinusoidal`` to its input. The
  table is a buffer (it moves with ``.to(device)``, it is not trained), built once at
  construction, and *not persistent*: it stays out of ``state_dict()``, and ``base``
  and ``d_model``, which determine it, belong in the model's configuration. A
  checkpoint that does contain a table under ``pe`` (as the PyTorch tutorial's module
  writes one) still loads, after that table has been checked against the formula (a
  public ``register_load_state_dict_pre_hook``). ``forward`` never changes the module.
- :class:`LearnedPositionalEncoding` adds a trainable ``(max_len, d_model)`` table.
- :class:`TransformerWithPositionalEncoding`: token embedding (times sqrt(d_model)),
  one of the encodings above or none, then a stack of ``nn.TransformerEncoderLayer``.

Inputs are ``(batch, length, d_model)`` when ``batch_first`` (the default) and
``(length, batch, d_model)`` otherwise; any other rank, or a last axis that is not
``d_model``, raises ``ValueError`` naming both shapes. (A 2-D tensor could be
``(length, d_model)`` or ``(batch, d_model)``: the modules do not guess.)
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from posenc._validation import choice, flag, integer, positive_finite, probability
from posenc.checks import check_sinusoidal_table
from posenc.encoding import sinusoidal
from posenc.rotary import PAIRINGS, RotaryEmbedding  # noqa: F401 (RoPE lives in posenc.rotary)

__all__ = [
    "ENCODINGS",
    "LearnedPositionalEncoding",
    "SinusoidalPositionalEncoding",
    "TransformerWithPositionalEncoding",
    "check_tokens",
    "stored_table_tolerance",
]

ENCODINGS = ("sinusoidal", "learned", "none")


def stored_table_tolerance(length: int, dtype: torch.dtype | None = None) -> float:
    """How far a stored table of ``length`` rows may be from the formula and still load.

    Correct tables differ from the exact values by their dtype's rounding (at most
    2**-11 in float16) and, when they were computed in float32 as many tutorials do
    (the PyTorch tutorial's exp-log recipe), by an angle error that grows with the
    position: between about 0.7 and 1.3 times 2**-24 per unit of position, depending on
    d_model (at 20,000 rows 8.3e-4 for d_model = 64 and 1.6e-3 for 512; at 60,000,
    2.4e-3 and 3.7e-3). The bound is 1e-3 plus 4 * 2**-24 per position, about three
    times the largest of those slopes. Wrong layouts, bases, swapped sin/cos or a shift
    by one position differ by about 0.1 or more at every length (base 1000 for 10000:
    0.098 at two rows).

    With ``dtype``, the dtype the table is stored in, half an ulp at 1 of that dtype
    (``torch.finfo(dtype).eps / 2``) is added: a correct table stored in bfloat16 is
    off by up to 2**-9 at every length, above the 1e-3 floor (2**-8 is added for it,
    4.9e-4 for float16, 6e-8 for float32).
    """
    tolerance = 1e-3 + 4 * 2.0**-24 * max(length - 1, 0)
    if dtype is not None and dtype.is_floating_point:
        tolerance += torch.finfo(dtype).eps / 2
    return tolerance


def check_tokens(tokens, vocab_size: int) -> None:
    """Raise unless ``tokens`` is an int32/int64 tensor (batch, length) of ids < vocab_size."""
    if not isinstance(tokens, torch.Tensor) or tokens.dtype not in (torch.int32, torch.int64):
        kind = getattr(tokens, "dtype", type(tokens).__name__)
        raise TypeError(f"tokens must be an int32 or int64 tensor of ids, got {kind}")
    if tokens.dim() != 2:
        raise ValueError(f"tokens must have shape (batch, length), got {tuple(tokens.shape)}")
    if tokens.numel() and (tokens.min() < 0 or tokens.max() >= vocab_size):
        raise ValueError(
            f"token ids must lie in [0, {vocab_size}), got ids from "
            f"{int(tokens.min())} to {int(tokens.max())}"
        )


def _from(start: int) -> str:
    return f" from offset {start}" if start else ""


class _AddedPositionalEncoding(nn.Module):
    """Shared by both encodings: check the input, add the table's first rows, dropout."""

    def __init__(self, d_model, max_len, dropout, batch_first):
        super().__init__()
        self.d_model = integer("d_model", d_model, minimum=1)
        self.max_len = integer("max_len", max_len, minimum=1)
        self.batch_first = flag("batch_first", batch_first)
        self.dropout = nn.Dropout(probability("dropout", dropout))

    def _layout(self) -> str:
        return "(batch, length, d_model)" if self.batch_first else "(length, batch, d_model)"

    def _length(self, x: torch.Tensor) -> int:
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
        if not torch.is_floating_point(x):
            raise TypeError(f"x must be a floating-point tensor, got dtype {x.dtype}")
        if x.dim() != 3 or x.shape[-1] != self.d_model:
            raise ValueError(
                f"x must have shape {self._layout()} with d_model = {self.d_model} "
                f"(batch_first={self.batch_first}), got {tuple(x.shape)}"
            )
        return x.shape[1] if self.batch_first else x.shape[0]

    def rows(self, length: int, start: int = 0) -> torch.Tensor:
        """The ``(length, d_model)`` rows of positions ``start`` to ``start + length - 1``."""
        raise NotImplementedError

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """``x`` plus the rows of its positions, then dropout.

        ``offset`` is the position of ``x``'s first token: 0 for a whole sequence, the
        number of tokens already cached when a decoder feeds one new token at a time
        (without it, every new token would get row 0). The rows are cast to ``x.dtype``,
        so the output keeps the input's dtype (under autocast too).
        """
        offset = integer("offset", offset, minimum=0)
        table = self.rows(self._length(x), start=offset).to(x.dtype)
        table = table.unsqueeze(0) if self.batch_first else table.unsqueeze(1)
        return self.dropout(x + table)

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, max_len={self.max_len}, batch_first={self.batch_first}"


class SinusoidalPositionalEncoding(_AddedPositionalEncoding):
    """``x + PE`` with the sinusoidal table of Vaswani et al. (2017), then dropout.

    Parameters
    ----------
    d_model, max_len : the table has ``max_len`` rows of ``d_model`` columns, built once
        by :func:`posenc.sinusoidal` in float64 and rounded once to ``dtype`` (default:
        torch's default dtype). In float32 that is within 2**-25 of the exact values,
        a little closer than ``posenc.sinusoidal(..., dtype=float32)``, which trades
        up to three more roundings for speed (chapter 11).
    dropout : probability, applied after the sum (section 5.4 of the paper).
    batch_first : input layout, ``(batch, length, d_model)`` or ``(length, batch, d_model)``.
    base : the wavelength base, keyword-only.
    extend : what a sequence longer than ``max_len`` gets. True (default): the rows past
        ``max_len`` are computed for that call, exactly (the formula has a row for every
        position); the module itself does not change. Those rows are built in NumPy on
        the CPU at every such call and copied to the table's device: a graph break under
        ``torch.compile`` and a host-to-device copy, so choose ``max_len`` to cover the
        lengths you run. False: ``ValueError`` naming ``max_len``.
    device, dtype : where and in what precision the table lives. Build the module in the
        dtype it will run in: converting it later (``.double()``, ``.half()``) converts the
        stored table like any buffer, so a float32 table made float64 keeps its float32
        rounding (within 2**-25 of the exact values). A module built on the meta device
        or moved with ``to_empty`` needs ``reset_parameters()`` to rebuild its table.
    """

    def __init__(
        self,
        d_model,
        max_len=5000,
        dropout=0.0,
        batch_first=True,
        *,
        base=10000.0,
        extend=True,
        device=None,
        dtype=None,
    ):
        super().__init__(d_model, max_len, dropout, batch_first)
        self.base = positive_finite("base", base)
        self.extend = flag("extend", extend)
        dtype = torch.get_default_dtype() if dtype is None else dtype
        if not dtype.is_floating_point:
            raise TypeError(f"dtype must be a floating-point torch dtype, got {dtype}")
        self.register_buffer("pe", self._build(self.max_len, dtype, device), persistent=False)
        self.register_load_state_dict_pre_hook(self._check_stored_table)

    def reset_parameters(self) -> None:
        """Rebuild the table in place, on its device and in its dtype.

        A module built on the meta device, or moved with ``to_empty``, holds memory that
        was never written, and ``load_state_dict`` cannot refill a non-persistent buffer:
        call this afterwards (the name is the one ``nn.Linear`` and most PyTorch modules
        use for "initialise me again").
        """
        with torch.no_grad():
            self.pe.copy_(self._build(self.pe.shape[0], self.pe.dtype, self.pe.device))

    def _build(self, length: int, dtype: torch.dtype, device, start: int = 0) -> torch.Tensor:
        table = sinusoidal(length, self.d_model, base=self.base, start=start)  # float64
        return torch.from_numpy(table).to(device=device, dtype=dtype)

    def rows(self, length: int, start: int = 0) -> torch.Tensor:
        stored = self.pe.shape[0]
        end = start + length
        if end <= stored:
            return self.pe[start:end]
        if not self.extend:
            raise ValueError(
                f"sequence length {length}{_from(start)} exceeds max_len={self.max_len} "
                "(built with extend=False)"
            )
        # The rows past max_len are computed for this call, from float64, and the module
        # is left as it was: forward never reassigns a buffer (torch.compile, CUDA graphs
        # and DistributedDataParallel's buffer broadcast all assume it does not).
        first = max(start, stored)
        extra = self._build(end - first, self.pe.dtype, self.pe.device, start=first)
        return torch.cat([self.pe[start:], extra]) if start < stored else extra

    def _check_stored_table(
        self, module, state_dict, prefix, local_metadata, strict, missing, unexpected, errors
    ):
        # A checkpoint written by a module that persisted its table (the PyTorch
        # tutorial's does) has a "pe" entry. It is checked against the formula, never
        # copied: a wrong table in a checkpoint would otherwise silently replace it.
        stored = state_dict.pop(prefix + "pe", None)
        if stored is not None:
            problem = self._stored_table_problem(stored)
            if problem:
                errors.append(f"{prefix}pe: {problem}")

    def _stored_table_problem(self, stored: torch.Tensor) -> str | None:
        # Sequence-first code saves (max_len, 1, d_model), batch-first code (1, max_len,
        # d_model): rows are the last axis either way.
        if stored.dim() < 2 or stored.shape[-1] != self.d_model:
            return (
                f"the stored table has shape {tuple(stored.shape)}, "
                f"not (length, {self.d_model}) for d_model={self.d_model}"
            )
        table = stored.detach().to("cpu", torch.float64).reshape(-1, self.d_model).numpy()
        expected = sinusoidal(table.shape[0], self.d_model, base=self.base)
        deviation = float(np.max(np.abs(table - expected), initial=0.0))
        tolerance = stored_table_tolerance(table.shape[0], stored.dtype)
        if not deviation <= tolerance:
            # posenc.checks names the likely bug (layout, base, swap, shift, ...)
            findings = check_sinusoidal_table(table, base=self.base, atol=tolerance)
            return (
                f"the stored table differs from the sinusoidal formula (base={self.base:g}) "
                f"by up to {deviation:.3g} (tolerance {tolerance:.3g} for {table.shape[0]} rows)"
                + "".join(f"; {finding}" for finding in findings)
            )
        return None

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, base={self.base:g}, extend={self.extend}"


class LearnedPositionalEncoding(_AddedPositionalEncoding):
    """``x + P[:length]`` with a trainable table ``P`` of ``max_len * d_model`` numbers.

    ``P`` starts as N(0, ``init_std``²). The default, 0.02, is BERT's
    ``initializer_range``, which Hugging Face's GPT-2 also applies to its position
    table; OpenAI's own GPT-2 code draws its position table (``wpe``) with 0.01 and
    its token table with 0.02. It has no row for position ``max_len`` or beyond: a
    longer sequence raises ``ValueError`` naming ``max_len``.
    ``reset_parameters()`` draws the table again.
    """

    def __init__(
        self,
        d_model,
        max_len,
        dropout=0.0,
        batch_first=True,
        *,
        init_std=0.02,
        device=None,
        dtype=None,
    ):
        super().__init__(d_model, max_len, dropout, batch_first)
        self.init_std = positive_finite("init_std", init_std)
        self.table = nn.Parameter(
            torch.empty(self.max_len, self.d_model, device=device, dtype=dtype)
        )
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Draw the table again from N(0, ``init_std``²)."""
        nn.init.normal_(self.table, std=self.init_std)

    def rows(self, length: int, start: int = 0) -> torch.Tensor:
        if start + length > self.max_len:
            raise ValueError(
                f"sequence length {length}{_from(start)} exceeds max_len={self.max_len}: a "
                f"learned table has no row for positions {self.max_len} and beyond"
            )
        return self.table[start : start + length]


class TransformerWithPositionalEncoding(nn.Module):
    """Token ids ``(batch, length)`` in, ``(batch, length, d_model)`` out.

    ``embedding(tokens) * sqrt(d_model)`` (section 3.4 of the paper; ``scale_embedding``;
    the embedding starts as N(0, 1/d_model), so token and position start comparable)
    plus the chosen ``encoding`` (``"sinusoidal"``, ``"learned"`` or ``"none"``), then
    ``n_layers`` post-norm ``nn.TransformerEncoderLayer`` blocks. ``causal=True`` in
    ``forward`` lets each position attend only to itself and earlier positions.
    """

    def __init__(
        self,
        vocab_size,
        d_model,
        n_heads,
        *,
        n_layers=2,
        d_ff=None,
        dropout=0.0,
        max_len=5000,
        encoding="sinusoidal",
        scale_embedding=True,
    ):
        super().__init__()
        self.vocab_size = integer("vocab_size", vocab_size, minimum=1)
        self.d_model = integer("d_model", d_model, minimum=1)
        n_heads = integer("n_heads", n_heads, minimum=1)
        if self.d_model % n_heads:
            raise ValueError(
                f"n_heads must divide d_model, got n_heads={n_heads}, d_model={self.d_model}"
            )
        n_layers = integer("n_layers", n_layers, minimum=1)
        d_ff = 4 * self.d_model if d_ff is None else integer("d_ff", d_ff, minimum=1)
        dropout = probability("dropout", dropout)
        self.encoding_kind = choice("encoding", encoding, ENCODINGS)
        self.scale = math.sqrt(self.d_model) if flag("scale_embedding", scale_embedding) else 1.0

        # N(0, 1/d_model) entries (tensor2tensor's choice): times sqrt(d_model), a token
        # vector is about as long as an encoding row, sqrt(d_model/2). nn.Embedding's
        # default N(0, 1) would make it sqrt(2 d_model) times longer (chapter 7).
        self.embedding = nn.Embedding(self.vocab_size, self.d_model)
        nn.init.normal_(self.embedding.weight, std=self.d_model**-0.5)
        if self.encoding_kind == "sinusoidal":
            self.position = SinusoidalPositionalEncoding(self.d_model, max_len, dropout)
        elif self.encoding_kind == "learned":
            self.position = LearnedPositionalEncoding(self.d_model, max_len, dropout)
        else:
            self.position = nn.Dropout(dropout)
        layer = nn.TransformerEncoderLayer(
            self.d_model, n_heads, d_ff, dropout, batch_first=True, norm_first=False
        )
        self.encoder = nn.TransformerEncoder(layer, n_layers, enable_nested_tensor=False)

    def forward(self, tokens: torch.Tensor, *, causal=False) -> torch.Tensor:
        check_tokens(tokens, self.vocab_size)
        x = self.position(self.embedding(tokens) * self.scale)
        mask = None
        if flag("causal", causal):
            mask = nn.Transformer.generate_square_subsequent_mask(
                tokens.shape[1], device=tokens.device, dtype=x.dtype
            )
        return self.encoder(x, mask=mask, is_causal=causal)
