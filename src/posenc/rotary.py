"""Rotary position embedding (RoPE) as a PyTorch module (chapters 8-11).

:class:`RotaryEmbedding` rotates queries and keys by their positions. It is also
importable as ``posenc.torch.RotaryEmbedding``.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from posenc._validation import choice, integer, positive_finite

__all__ = ["PAIRINGS", "RotaryEmbedding"]


PAIRINGS = ("half", "interleaved")
ROTARY_BLOCK_ROWS = 2048  # rows of one head rotated at a time on the CPU (chapter 11)


def _rotary_positions(positions, x: torch.Tensor) -> torch.Tensor:
    """Check ``positions`` against ``x`` (..., seq, head_dim); return an int64 CPU tensor."""
    length = x.shape[-2]
    if isinstance(positions, torch.Tensor):
        if positions.dtype.is_floating_point or positions.dtype.is_complex:
            raise TypeError(
                f"positions must be integers (an int tensor), got dtype {positions.dtype}"
            )
        if positions.dtype == torch.bool:
            raise TypeError("positions must be integers (an int tensor), got dtype torch.bool")
        positions = positions.detach().to("cpu", torch.int64)
    else:
        array = np.asarray(positions)
        if array.dtype.kind not in "iu":
            raise TypeError(f"positions must be integers, got dtype {array.dtype}")
        positions = torch.from_numpy(array.astype(np.int64))
    if positions.dim() not in (1, 2) or positions.shape[-1] != length:
        raise ValueError(
            f"positions must have shape (seq,) or (batch, seq) with seq = {length} "
            f"(x has shape {tuple(x.shape)}), got {tuple(positions.shape)}"
        )
    if positions.dim() == 2 and (x.dim() != 4 or x.shape[0] != positions.shape[0]):
        raise ValueError(
            f"(batch, seq) positions need x of shape (batch, heads, seq, head_dim) with the "
            f"same batch: they apply to every head of their sequence, never along the heads "
            f"axis; got positions {tuple(positions.shape)} for x {tuple(x.shape)}"
        )
    if positions.numel() and int(positions.min()) < 0:
        raise ValueError(f"positions must be >= 0, got {int(positions.min())}")
    return positions


class RotaryEmbedding(nn.Module):
    """Rotary position embedding (RoPE) applied to queries or keys: ``rope(x, positions)``.

    Parameters
    ----------
    head_dim : the last axis of the inputs; even.
    base : θ_i = base^(-2i/rotary_dim), i = 0 .. rotary_dim/2 - 1.
    pairing : ``"half"`` rotates (x_i, x_{i+r/2}), as GPT-NeoX and Hugging Face code
        arrange features; ``"interleaved"`` rotates (x_{2i}, x_{2i+1}), as RoFormer and
        Meta's LLaMA code do. The two are the same map up to a fixed permutation of
        columns.
    frequencies : float array (rotary_dim // 2,), optional: the speed of every pair in
        place of base^(-2i/rotary_dim), for instance from
        :func:`posenc.long_context.scaled_frequencies`.
    rotary_dim : partial rotary: only the first ``rotary_dim`` features (even, at most
        head_dim) are rotated; the rest pass through. Default: head_dim.
    attention_scale : multiplies cos and sin (YaRN's temperature: logits scale by its
        square). Default 1.

    ``forward(x, positions=None)`` takes x of shape (..., seq, head_dim) in any floating
    dtype and returns a tensor of the same shape, dtype and device. ``positions`` is None
    (0 .. seq - 1), a (seq,) integer tensor shared by every leading axis, or a
    (batch, seq) tensor for x of shape (batch, heads, seq, head_dim): row b gives the
    positions of sequence b for all of its heads. A (batch, seq) tensor is never matched
    against the heads axis, even when batch equals heads; any other shape is refused.

    Precision: cos and sin come from float64 angles, rounded once to the dtype of x
    (error 2**-25 in float32 at any position), and the rotation is computed in that
    dtype. The tables are a cache, not state: they are kept per (device, dtype), grown
    when a longer sequence arrives, never stored in ``state_dict`` and rebuilt from the
    configuration (nothing is reassigned inside ``forward``; ``.to()`` needs no
    buffer).
    """

    def __init__(
        self,
        head_dim,
        *,
        base=10000.0,
        pairing="half",
        frequencies=None,
        rotary_dim=None,
        attention_scale=1.0,
    ):
        super().__init__()
        self.head_dim = integer("head_dim", head_dim, minimum=2)
        if self.head_dim % 2:
            raise ValueError(f"head_dim must be even (RoPE rotates pairs), got {self.head_dim}")
        self.rotary_dim = (
            self.head_dim
            if rotary_dim is None
            else integer("rotary_dim", rotary_dim, minimum=2, maximum=self.head_dim)
        )
        if self.rotary_dim % 2:
            raise ValueError(f"rotary_dim must be even (RoPE rotates pairs), got {rotary_dim}")
        self.base = positive_finite("base", base)
        self.pairing = choice("pairing", pairing, PAIRINGS)
        self.attention_scale = positive_finite("attention_scale", attention_scale)
        pairs = self.rotary_dim // 2
        if frequencies is None:
            theta = self.base ** (
                -np.arange(0, self.rotary_dim, 2, dtype=np.float64) / self.rotary_dim
            )
        else:
            if isinstance(frequencies, torch.Tensor):
                frequencies = frequencies.detach().to("cpu", torch.float64).numpy()
            theta = np.asarray(frequencies, dtype=np.float64)
            if theta.shape != (pairs,) or not np.all(np.isfinite(theta)):
                raise ValueError(
                    f"frequencies must be {pairs} finite numbers, one per rotated pair "
                    f"(rotary_dim={self.rotary_dim}), got shape {theta.shape}"
                )
        self._theta = theta  # float64, NumPy: never converted by .to() or .half()
        self._cache: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}

    @property
    def frequencies(self) -> np.ndarray:
        """The rotation speed of each pair (float64, a copy)."""
        return self._theta.copy()

    def cos_sin(self, positions: torch.Tensor, dtype: torch.dtype, device) -> tuple:
        """(cos, sin) of shape positions.shape + (rotary_dim // 2,), times attention_scale.

        Angles are float64 products position * θ_i, rounded once to ``dtype``.
        """
        angles = positions.to(torch.float64)[..., None] * torch.from_numpy(self._theta)
        scale = self.attention_scale
        cos, sin = scale * torch.cos(angles), scale * torch.sin(angles)
        return cos.to(device=device, dtype=dtype), sin.to(device=device, dtype=dtype)

    @torch.compiler.disable
    def _tables(self, length: int, dtype: torch.dtype, device) -> tuple:
        # (cos, sin, prepared) for positions 0 .. length - 1, from the cache, which
        # grows (at least doubling) when a longer sequence arrives. ``prepared`` is the
        # form the CPU path multiplies by: cos + i sin for interleaved pairs, cos twice
        # in a row for half pairs.
        key = (torch.device(device), dtype)
        cached = self._cache.get(key)
        if cached is None or cached[0].shape[0] < length:
            rows = max(length, 2 * cached[0].shape[0] if cached is not None else length)
            cos, sin = self.cos_sin(torch.arange(rows), dtype, device)
            prepared = None
            if dtype in (torch.float32, torch.float64):
                if self.pairing == "interleaved":
                    prepared = torch.complex(cos, sin)
                else:
                    prepared = torch.cat((cos, cos), dim=-1)
            self._cache[key] = cached = (cos, sin, prepared)
        cos, sin, prepared = cached
        return cos[:length], sin[:length], None if prepared is None else prepared[:length]

    def forward(self, x: torch.Tensor, positions=None) -> torch.Tensor:
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
        if not x.dtype.is_floating_point:
            raise TypeError(f"x must be a floating-point tensor, got dtype {x.dtype}")
        if x.dim() < 2 or x.shape[-1] != self.head_dim:
            raise ValueError(
                f"x must have shape (..., seq, head_dim) with head_dim = {self.head_dim}, "
                f"got {tuple(x.shape)}"
            )
        length = x.shape[-2]
        if positions is None:
            cos, sin, prepared = self._tables(length, x.dtype, x.device)
            if prepared is not None and _fast_path(x):
                return _rotate_in_blocks(x, prepared, sin, self.pairing, self.rotary_dim)
        else:
            positions = _rotary_positions(positions, x)
            cos, sin = self.cos_sin(positions, x.dtype, x.device)
            if positions.dim() == 2:  # (batch, seq, pairs) -> (batch, 1, seq, pairs)
                cos, sin = cos[:, None], sin[:, None]
        return _rotate(x, cos, sin, self.pairing, self.rotary_dim)

    def extra_repr(self) -> str:
        return (
            f"head_dim={self.head_dim}, rotary_dim={self.rotary_dim}, base={self.base:g}, "
            f"pairing={self.pairing!r}, attention_scale={self.attention_scale:g}"
        )


def _rotate(x, cos, sin, pairing: str, r: int) -> torch.Tensor:
    # The formula itself, pair by pair: (x0 cos - x1 sin, x0 sin + x1 cos). This is
    # what autograd, other devices and dtypes, and torch.compile see.
    half = r // 2
    rotated = x[..., :r]
    if pairing == "interleaved":
        x0, x1 = rotated[..., 0::2], rotated[..., 1::2]
        y = torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1).flatten(-2)
    else:
        x0, x1 = rotated[..., :half], rotated[..., half:]
        y = torch.cat((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1)
    if r < x.shape[-1]:
        y = torch.cat((y, x[..., r:].expand(*y.shape[:-1], x.shape[-1] - r)), dim=-1)
    return y


def _fast_path(x: torch.Tensor) -> bool:
    """The CPU form below applies: float32/64, contiguous, on the CPU, no autograd."""
    return (
        x.device.type == "cpu"
        and x.dtype in (torch.float32, torch.float64)
        and x.is_contiguous()
        and not (torch.is_grad_enabled() and x.requires_grad)
        and not torch.compiler.is_compiling()
    )


def _rotate_in_blocks(x, prepared, sin, pairing: str, r: int) -> torch.Tensor:
    # The same numbers as _rotate, computed with fewer passes over memory (chapter 11).
    # The work goes one block of ROTARY_BLOCK_ROWS rows of one head at a time, small
    # enough to stay in cache while it is read several times.
    #   interleaved: (x0 + i x1)(cos + i sin), one complex product per block;
    #   half: out = x * [cos, cos], then out0 -= x1 sin and out1 += x0 sin.
    length, width = x.shape[-2], x.shape[-1]
    out = torch.empty_like(x)
    xs, outs = x.reshape(-1, length, width), out.view(-1, length, width)
    half, step = r // 2, ROTARY_BLOCK_ROWS
    if pairing == "interleaved":
        xc = torch.view_as_complex(xs[..., :r].unflatten(-1, (half, 2)))
        oc = torch.view_as_complex(outs[..., :r].unflatten(-1, (half, 2)))
    for start in range(0, length, step):
        rows = slice(start, start + step)
        if pairing == "interleaved":
            torch.mul(xc[:, rows], prepared[rows], out=oc[:, rows])
            continue
        c2, s = prepared[rows], sin[rows]
        for xb, ob in zip(xs[:, rows], outs[:, rows], strict=True):
            torch.mul(xb[:, :r], c2, out=ob[:, :r])
            ob[:, :half].addcmul_(xb[:, half:r], s, value=-1)
            ob[:, half:r].addcmul_(xb[:, :half], s)
    if r < width:
        outs[..., r:] = xs[..., r:]
    return out
