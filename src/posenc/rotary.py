"""Rotary position embedding (RoPE) as a PyTorch module (chapters 8-11).

:class:`RotaryEmbedding` rotates queries and keys by their positions, on any device,
with no host synchronisation in ``forward``. It is also importable as
``posenc.torch.RotaryEmbedding``.

Where the rotation runs:

- **CUDA with Triton importable**: one fused kernel (:mod:`posenc.rotary_triton`) reads
  x once and writes the result once, forming the angles in float64 inside the kernel.
  Its backward pass is the same kernel with the angles negated.
- **CPU, float32/float64, no autograd**: a few large operations over every head at once
  (three for half pairs, one complex product for interleaved pairs), one block of
  ``ROTARY_BLOCK_ROWS`` positions at a time. Their number does not grow with the number
  of heads: each parallel operation waits for every thread, and on a busy machine one
  thread can wait a whole scheduler time slice, so few large operations beat many
  small ones.
- **Anywhere else** (autograd on the CPU, other devices, ``torch.compile``): the pair
  formula itself, ``(x0 cos - x1 sin, x0 sin + x1 cos)``, which is also the reference.

Angles are float64 products position * θ_i computed on the positions' device (devices
without float64, such as Apple's MPS, compute them on the CPU and copy), then rounded
once to the dtype of x: float32 cos and sin are within 2**-24 of exact at any position
below 2**53.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import nn

from posenc._validation import choice, integer, positive_finite

if TYPE_CHECKING:
    from posenc.rope_config import RopeParameters

__all__ = ["LAYOUTS", "MAX_POSITION", "PAIRINGS", "RotaryEmbedding"]

PAIRINGS = ("half", "interleaved")
LAYOUTS = ("bhsd", "bshd")
ROTARY_BLOCK_ROWS = 2048  # positions rotated per operation on the CPU (chapter 11)
MAX_POSITION = 2**53  # float64 holds every integer below it exactly


def _float64_device(device: torch.device) -> torch.device:
    """Where float64 angles for tensors on ``device`` are computed."""
    return torch.device("cpu") if device.type == "mps" else device


def _integer_positions(positions, name: str = "positions") -> torch.Tensor:
    """``positions`` as an integer tensor (on its own device), or TypeError."""
    if isinstance(positions, torch.Tensor):
        if positions.dtype.is_floating_point or positions.dtype.is_complex:
            raise TypeError(f"{name} must be integers (an int tensor), got dtype {positions.dtype}")
        if positions.dtype == torch.bool:
            raise TypeError(f"{name} must be integers (an int tensor), got dtype torch.bool")
        return positions.detach()
    array = np.asarray(positions)
    if array.dtype.kind not in "iu":
        raise TypeError(f"{name} must be integers, got dtype {array.dtype}")
    if array.dtype.kind == "u" and array.size and int(array.max()) >= MAX_POSITION:
        raise ValueError(f"{name} must be < 2**53, got {int(array.max())}")
    return torch.from_numpy(array.astype(np.int64))


def _check_position_values(positions: torch.Tensor, name: str = "positions") -> None:
    """0 <= positions < 2**53: checked here on the CPU, asserted on the device otherwise.

    On an accelerator the check is ``torch._assert_async``: it never waits for the
    device, and a bad position stops the stream with this message.
    """
    if not positions.numel():
        return
    if positions.device.type == "cpu":
        low, high = int(positions.min()), int(positions.max())
        if low < 0:
            raise ValueError(f"{name} must be >= 0, got {low}")
        if high >= MAX_POSITION:
            raise ValueError(
                f"{name} must be < 2**53 (float64 angles hold every integer below it), got {high}"
            )
        return
    if positions.dtype == torch.uint8:
        return  # never negative, never large
    torch._assert_async(_in_range(positions), f"{name} must be >= 0 and < 2**53")


def _in_range(positions: torch.Tensor) -> torch.Tensor:
    """A 0-d bool tensor: every position in [0, 2**53), in as few kernels as it takes.

    For int64, ``p >> 53`` is 0 exactly on [0, 2**53) (a negative p shifts to -1,
    p >= 2**53 to >= 1): three kernels (shift, compare, all) instead of a min and a max
    with two comparisons. Narrower integers are below 2**53 anyway: only the sign.
    """
    if positions.dtype == torch.int64:
        return ((positions >> 53) == 0).all()
    return (positions >= 0).all()


class RotaryEmbedding(nn.Module):
    """Rotary position embedding (RoPE) applied to queries or keys: ``rope(x, positions)``.

    Parameters
    ----------
    head_dim : the last axis of the inputs; even.
    base : θ_i = base^(-2i/rotary_dim), i = 0 .. rotary_dim/2 - 1.
    pairing : ``"half"`` rotates (x_i, x_{i+r/2}), as GPT-NeoX and Hugging Face code
        arrange features; ``"interleaved"`` rotates (x_{2i}, x_{2i+1}), as RoFormer,
        GPT-J and Meta's LLaMA code do. The two are the same map up to a fixed
        permutation of columns.
    frequencies : float array (rotary_dim // 2,), optional: the speed of every pair in
        place of base^(-2i/rotary_dim), for instance from
        :func:`posenc.long_context.scaled_frequencies`.
    rotary_dim : partial rotary: only the first ``rotary_dim`` features (even, at most
        head_dim) are rotated; the rest pass through. Default: head_dim.
    attention_scale : multiplies cos and sin (YaRN's temperature: logits scale by its
        square). Default 1.
    layout : ``"bhsd"`` (default): x is (..., seq, head_dim), as (batch, heads, seq,
        head_dim); ``"bshd"``: x is (..., seq, heads, head_dim), as (batch, seq, heads,
        head_dim), the layout of flash-attention and of q before the transpose in
        Hugging Face models.
    axes_dims : axial RoPE over several position axes (FLUX's ``axes_dim``; the axial
        form of Heo et al., 2024): even widths ``(d_0, ..., d_{n-1})`` summing to
        rotary_dim. The rotated features are cut into n contiguous chunks; chunk a is a
        RoPE of width d_a, with its own speeds base^(-2j/d_a) and the module's pairing
        inside the chunk, turned by axis a's position. ``forward`` then needs positions
        of shape (seq, n) or (batch, seq, n). With one axis it is plain RoPE.
    mrope_section : Qwen2-VL's multimodal RoPE: three pair counts ``(s_t, s_h, s_w)``
        summing to rotary_dim / 2 (transformers' ``rope_scaling["mrope_section"]``). The
        speeds are plain RoPE's; pairs 0 .. s_t - 1 take their angle from the temporal
        position, the next s_h from the height, the last s_w from the width.
        ``forward`` then needs positions of shape (3, seq) or (3, batch, seq), axis
        first, as Qwen2-VL's ``position_ids``. Three equal rows give plain RoPE.

    ``forward(x, positions=None)`` takes x in any floating dtype and returns a tensor of
    the same shape, dtype and device. ``positions`` is None (0 .. seq - 1), a (seq,)
    integer tensor shared by every leading axis, or a (batch, seq) tensor for a 4-D x
    whose first axis is the batch: row b gives the positions of sequence b for all of
    its heads; a (1, seq) tensor, as Hugging Face models pass by default, is shared by
    the whole batch. A (batch, seq) tensor is never matched against the heads axis,
    even when batch equals heads; any other shape is refused. Positions are integers
    in [0, 2**53); on an accelerator that range is asserted on the device
    (``torch._assert_async``) rather than read back.

    ``apply(q, k, positions)`` rotates both; :meth:`from_config` reads a Hugging Face
    model's RoPE configuration; :meth:`cos_sin` gives the tables (``hf_format=True``: in
    the form a transformers rotary module returns them).

    The tables are a cache, not state: they are kept per (device, dtype), grown when a
    longer sequence arrives, never stored in ``state_dict`` and rebuilt from the
    configuration (nothing is reassigned inside ``forward``; ``.to()`` needs no buffer).
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
        layout="bhsd",
        axes_dims=None,
        mrope_section=None,
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
        self.layout = choice("layout", layout, LAYOUTS)
        self.attention_scale = positive_finite("attention_scale", attention_scale)
        if frequencies is None:
            theta = self.base ** (
                -np.arange(0, self.rotary_dim, 2, dtype=np.float64) / self.rotary_dim
            )
        else:
            theta = self._pair_speeds("frequencies", frequencies)
        if axes_dims is not None and mrope_section is not None:
            raise ValueError(
                f"give axes_dims or mrope_section, not both: got axes_dims={axes_dims!r} "
                f"and mrope_section={mrope_section!r}"
            )
        self.axes_dims = None if axes_dims is None else self._axes_dims(axes_dims, frequencies)
        self.mrope_section = None if mrope_section is None else self._sections(mrope_section)
        if self.axes_dims is not None:  # each chunk its own speeds, in feature order
            theta = np.concatenate(
                [self.base ** (-np.arange(0, d, 2, dtype=np.float64) / d) for d in self.axes_dims]
            )
        self._theta = theta  # float64, NumPy: never converted by .to() or .half()
        self.rope_parameters: RopeParameters | None = None
        self._cache: dict[tuple, tuple] = {}

    def _axes_dims(self, values, frequencies) -> tuple[int, ...]:
        dims = _int_tuple("axes_dims", values)
        if not dims:
            raise ValueError(f"axes_dims must name at least one axis, got {values!r}")
        if any(d < 2 or d % 2 for d in dims):
            raise ValueError(
                f"axes_dims must be even widths >= 2 (each chunk rotates pairs), got {dims}"
            )
        if sum(dims) != self.rotary_dim:
            raise ValueError(
                f"axes_dims must add up to rotary_dim = {self.rotary_dim}, got {dims} "
                f"(sum {sum(dims)})"
            )
        if frequencies is not None:
            raise ValueError(
                "frequencies cannot be combined with axes_dims: each chunk's speeds are "
                f"base^(-2j/d_a); got axes_dims={dims} and frequencies"
            )
        return dims

    def _sections(self, values) -> tuple[int, int, int]:
        sections = _int_tuple("mrope_section", values)
        if len(sections) != 3:
            raise ValueError(
                f"mrope_section must be three pair counts (temporal, height, width), got {values!r}"
            )
        if any(s < 1 for s in sections):
            raise ValueError(f"mrope_section entries must be >= 1 pair, got {sections}")
        if sum(sections) != self.rotary_dim // 2:
            raise ValueError(
                f"mrope_section counts pairs and must add up to rotary_dim / 2 = "
                f"{self.rotary_dim // 2}, got {sections} (sum {sum(sections)})"
            )
        return sections

    @property
    def n_axes(self) -> int:
        """How many position axes forward expects: 1, len(axes_dims) or 3 (M-RoPE)."""
        if self.axes_dims is not None:
            return len(self.axes_dims)
        return 1 if self.mrope_section is None else 3

    def _multi_axis(self) -> bool:
        return self.axes_dims is not None or self.mrope_section is not None

    def _pair_speeds(self, name: str, values) -> np.ndarray:
        pairs = self.rotary_dim // 2
        if isinstance(values, torch.Tensor):
            values = values.detach().to("cpu", torch.float64).numpy()
        theta = np.array(values, dtype=np.float64)  # a copy the module owns
        if theta.shape != (pairs,) or not np.all(np.isfinite(theta)):
            raise ValueError(
                f"{name} must be {pairs} finite numbers, one per rotated pair "
                f"(rotary_dim={self.rotary_dim}), got shape {theta.shape}"
            )
        return theta

    @classmethod
    def from_config(cls, config, head_dim=None, *, pairing="half", layout="bhsd"):
        """The RoPE of a Hugging Face model, from its config or its ``rope_parameters``.

        ``config`` is a transformers config (or its ``to_dict()``), or the
        ``rope_parameters`` dict alone (then ``head_dim`` is required). Six
        ``rope_type`` values are read: default, linear, dynamic, yarn (``mscale``,
        ``mscale_all_dim``, ``attention_factor``, ``truncate``), llama3 and longrope,
        with ``partial_rotary_factor``; others (such as "proportional") raise
        ``ValueError`` naming them. The
        frequencies are the formulas' exact float64 values (transformers computes them
        in float32). Dynamic NTK and longrope depend on the length, as in transformers:
        the length is the largest position plus one, read on the device.
        (transformers keeps dynamic NTK's grown base until a call shorter than the
        original length resets it; here each call uses its own length, which is the
        same during generation, where positions only grow.) ``pairing`` is "half" for
        Llama-style models and "interleaved" for GPT-J.
        """
        from posenc import rope_config

        params = rope_config.rope_parameters(config, head_dim)
        module = cls(
            params.head_dim,
            base=params.base,
            pairing=pairing,
            frequencies=params.inv_freq,
            rotary_dim=params.rotary_dim,
            attention_scale=params.attention_factor,
            layout=layout,
        )
        module.rope_parameters = params
        return module

    @property
    def frequencies(self) -> np.ndarray:
        """The rotation speed of each pair (float64, a copy); see :meth:`frequencies_at`."""
        return self._theta.copy()

    def _length_dependent(self) -> bool:
        params = self.rope_parameters
        return params is not None and params.switch_length is not None

    def frequencies_at(self, length: int) -> np.ndarray:
        """The pair speeds used for a sequence whose largest position is ``length - 1``.

        They differ from :attr:`frequencies` only for dynamic NTK and longrope
        configurations (:meth:`from_config`) past their switch length.
        """
        length = integer("length", length, minimum=0)
        if not self._length_dependent():
            return self._theta.copy()
        from posenc import rope_config

        return np.array(rope_config.inv_freq_at(self.rope_parameters, length), np.float64)

    def _theta_on(self, device: torch.device, positions: torch.Tensor | None = None):
        """float64 pair speeds on ``device`` for ``positions`` (no host sync)."""
        static = self._constant("theta", self._theta, device)
        if positions is None or not self._length_dependent() or not positions.numel():
            return static
        params = self.rope_parameters
        length = positions.max().to(torch.float64) + 1  # a device scalar, never read back
        longer = length > params.switch_length
        if params.long_inv_freq is not None:  # longrope: switch at the original length
            long = self._constant("long_theta", params.long_inv_freq, device)
            return torch.where(longer, long, static)
        # dynamic NTK: the base grows with the length past the switch
        r = self.rotary_dim
        factor = params.dynamic_factor
        grown = params.base * (factor * length / params.switch_length - (factor - 1)) ** (
            r / (r - 2)
        )
        exponents = torch.arange(0, r, 2, dtype=torch.float64, device=device) / r
        return torch.where(longer, grown ** (-exponents), static)

    def _theta_for_length(self, length: int, device: torch.device) -> torch.Tensor:
        """Pair speeds on ``device`` for positions 0 .. length - 1 (a host-side length).

        Chosen or computed on the device from cached constants: never a copy from host
        memory per call.
        """
        static = self._constant("theta", self._theta, device)
        params = self.rope_parameters
        if not self._length_dependent() or length <= params.switch_length:
            return static
        if params.long_inv_freq is not None:
            return self._constant("long_theta", params.long_inv_freq, device)
        r, factor = self.rotary_dim, params.dynamic_factor
        grown = params.base * (factor * length / params.switch_length - (factor - 1)) ** (
            r / (r - 2)
        )
        exponents = self._constant("exponents", np.arange(0, r, 2) / r, device)
        return torch.pow(grown, -exponents)

    @torch.compiler.disable
    def _constant(self, name: str, array: np.ndarray, device: torch.device) -> torch.Tensor:
        # float64 constants on a device, copied there once (a copy per call from
        # pageable host memory can make the host wait for the device)
        key = (name, device)
        if device.type == "cpu" or key not in self._cache:
            values = torch.from_numpy(np.array(array, dtype=np.float64))
            if device.type == "cpu":
                return values
            self._cache[key] = values.to(device)
        return self._cache[key]

    def cos_sin(self, positions, dtype=None, device=None, *, hf_format=False) -> tuple:
        """(cos, sin) of shape positions.shape + (rotary_dim // 2,), times attention_scale.

        Angles are float64 products position * θ_i formed on the positions' device,
        rounded once to ``dtype`` (default: torch's default dtype) and placed on
        ``device`` (default: the positions' device). Positions are integers in
        [0, 2**53).

        With ``axes_dims`` or ``mrope_section``, positions come in the layout ``forward``
        takes them ((seq, n) or (batch, seq, n); (3, seq) or (3, batch, seq)) and the
        tables follow the positions without their axis: pair i of the tables is pair i
        of the rotation (for axes_dims, chunk by chunk).

        ``hf_format=True`` returns what a Hugging Face rotary module returns for
        ``position_ids`` of the same shape (a (seq,) tensor counts as (1, seq)): tables
        of width rotary_dim, each angle twice, as [θ_0..θ_{r/2-1}, θ_0..θ_{r/2-1}] for
        half pairs (``rotate_half``) and θ_0, θ_0, θ_1, θ_1, ... for interleaved pairs.
        """
        positions = _integer_positions(positions)
        dtype = torch.get_default_dtype() if dtype is None else dtype
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise TypeError(f"dtype must be a floating-point torch dtype, got {dtype}")
        if self._multi_axis():
            positions = self._axes_last(positions)
            if hf_format and self.axes_dims is not None:
                raise ValueError(
                    "hf_format=True has no meaning with axes_dims: each chunk pairs its own "
                    "features"
                )
        _check_position_values(positions)
        device = positions.device if device is None else torch.device(device)
        if self._multi_axis():
            cos, sin = self._multi_cos_sin(positions, dtype, device)
            positions = positions[..., 0]  # the shape the tables follow
        else:
            cos, sin = self._cos_sin(positions, dtype, device)
        if hf_format:
            if positions.dim() == 1:
                cos, sin = cos[None], sin[None]
            if self.pairing == "half":
                cos, sin = torch.cat((cos, cos), dim=-1), torch.cat((sin, sin), dim=-1)
            else:
                cos, sin = cos.repeat_interleave(2, dim=-1), sin.repeat_interleave(2, dim=-1)
        return cos, sin

    def _cos_sin(self, positions: torch.Tensor, dtype, device) -> tuple:
        # Checked positions in; no host sync on the way.
        where = _float64_device(positions.device)
        positions = positions.to(where)
        angles = positions.to(torch.float64)[..., None] * self._theta_on(where, positions)
        scale = self.attention_scale
        cos, sin = scale * torch.cos(angles), scale * torch.sin(angles)
        return cos.to(device=device, dtype=dtype), sin.to(device=device, dtype=dtype)

    def _axes_last(self, positions: torch.Tensor) -> torch.Tensor:
        """Multi-axis positions as (seq, n) or (batch, seq, n), or ValueError naming the shape."""
        shape = tuple(positions.shape)
        if self.axes_dims is not None:
            n = len(self.axes_dims)
            if positions.dim() not in (2, 3) or shape[-1] != n:
                raise ValueError(
                    f"positions must have shape (seq, {n}) or (batch, seq, {n}) with "
                    f"axes_dims={self.axes_dims}: one position per axis, got {shape}"
                )
            return positions
        if positions.dim() not in (2, 3) or shape[0] != 3:
            raise ValueError(
                f"positions must have shape (3, seq) or (3, batch, seq) with "
                f"mrope_section={self.mrope_section} (temporal, height, width first, as "
                f"Qwen2-VL's position_ids), got {shape}"
            )
        return positions.movedim(0, -1)

    def _multi_cos_sin(self, positions: torch.Tensor, dtype, device) -> tuple:
        """(cos, sin) of shape positions.shape[:-1] + (rotary_dim // 2,) for n-axis positions.

        Pair i turns by the position of its axis times its speed, in float64.
        """
        where = _float64_device(positions.device)
        if self.axes_dims is not None:
            axis = np.repeat(np.arange(len(self.axes_dims)), [d // 2 for d in self.axes_dims])
        else:
            axis = np.repeat(np.arange(3), self.mrope_section)
        index = self._constant("pair_axis", axis, where).to(torch.int64)
        per_pair = positions.to(where).to(torch.float64).index_select(-1, index)
        angles = per_pair * self._constant("theta", self._theta, where)
        scale = self.attention_scale
        cos, sin = scale * torch.cos(angles), scale * torch.sin(angles)
        return cos.to(device=device, dtype=dtype), sin.to(device=device, dtype=dtype)

    def _forward_multi(self, x: torch.Tensor, positions, seq_axis: int) -> torch.Tensor:
        """Axial RoPE or M-RoPE through the pair formula."""
        if positions is None:
            raise ValueError(
                f"positions are required with {self._mode_repr()}: give them with shape "
                f"{self._positions_shapes()}, got None"
            )
        positions = _integer_positions(positions)
        given = tuple(positions.shape)
        positions = self._axes_last(positions)
        length = x.shape[seq_axis]
        if positions.shape[-2] != length:
            raise ValueError(
                f"positions must have shape {self._positions_shapes()} with seq = {length} "
                f"(x has shape {tuple(x.shape)}), got {given}"
            )
        batched = positions.dim() == 3
        if batched and not (x.dim() == 4 and positions.shape[0] in (1, x.shape[0])):
            raise ValueError(
                f"batched positions need a 4-D x with the same batch (or a batch of 1 to "
                f"share), got positions of shape {given} for x "
                f"{tuple(x.shape)}"
            )
        _check_position_values(positions)
        cos, sin = self._multi_cos_sin(positions.to(x.device), x.dtype, x.device)
        marker = positions[..., 0]  # (seq,) or (batch, seq): how the tables broadcast
        cos = _broadcastable(cos, marker, self.layout)
        sin = _broadcastable(sin, marker, self.layout)
        if self.mrope_section is not None:
            return _rotate(x, cos, sin, self.pairing, self.rotary_dim)
        chunks, start = [], 0
        for d in self.axes_dims:
            pairs = slice(start // 2, (start + d) // 2)
            chunk = x[..., start : start + d]
            chunks.append(_rotate(chunk, cos[..., pairs], sin[..., pairs], self.pairing, d))
            start += d
        if self.rotary_dim < x.shape[-1]:
            rest = x[..., self.rotary_dim :]
            chunks.append(rest.expand(*chunks[0].shape[:-1], rest.shape[-1]))
        return torch.cat(chunks, dim=-1)

    def _mode_repr(self) -> str:
        if self.axes_dims is not None:
            return f"axes_dims={self.axes_dims}"
        return f"mrope_section={self.mrope_section}"

    def _positions_shapes(self) -> str:
        if self.axes_dims is not None:
            n = len(self.axes_dims)
            return f"(seq, {n}) or (batch, seq, {n})"
        return "(3, seq) or (3, batch, seq)"

    @torch.compiler.disable
    def _tables(self, length: int, dtype: torch.dtype, device) -> tuple:
        # (cos, sin, prepared) for positions 0 .. length - 1, from the cache, which
        # grows (at least doubling) when a longer sequence arrives. ``prepared`` is the
        # form the CPU path multiplies by: cos + i sin for interleaved pairs, cos twice
        # in a row for half pairs.
        device = torch.device(device)
        if self._length_dependent() and length > self.rope_parameters.switch_length:
            # past the switch the speeds depend on the length: computed for this call
            cos, sin = self._cos_sin(torch.arange(length, device=device), dtype, device)
            return cos, sin, self._prepared(cos, sin, dtype, device)
        key = (device, dtype)
        cached = self._cache.get(key)
        if cached is None or cached[0].shape[0] < length:
            rows = max(length, 2 * cached[0].shape[0] if cached is not None else length)
            if self._length_dependent():
                rows = min(rows, max(length, self.rope_parameters.switch_length))
            cos, sin = self._cos_sin(torch.arange(rows, device=device), dtype, device)
            self._cache[key] = cached = (cos, sin, self._prepared(cos, sin, dtype, device))
        cos, sin, prepared = cached
        return cos[:length], sin[:length], None if prepared is None else prepared[:length]

    def _prepared(self, cos, sin, dtype, device):
        if device.type != "cpu" or dtype not in (torch.float32, torch.float64):
            return None
        if self.pairing == "interleaved":
            return torch.complex(cos, sin)
        return torch.cat((cos, cos), dim=-1)

    # --- input checks ------------------------------------------------------------------

    def _check_x(self, x) -> int:
        """Check x against head_dim and the layout; return its seq axis (negative)."""
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
        if not x.dtype.is_floating_point:
            raise TypeError(f"x must be a floating-point tensor, got dtype {x.dtype}")
        if self.layout == "bhsd":
            if x.dim() < 2 or x.shape[-1] != self.head_dim:
                raise ValueError(
                    f"x must have shape (..., seq, head_dim) with head_dim = {self.head_dim}, "
                    f"got {tuple(x.shape)}"
                )
            return -2
        if x.dim() < 3 or x.shape[-1] != self.head_dim:
            raise ValueError(
                f"x must have shape (..., seq, heads, head_dim) with head_dim = "
                f"{self.head_dim} (layout='bshd'), got {tuple(x.shape)}"
            )
        return -3

    def _positions_for(self, positions, x: torch.Tensor, seq_axis: int) -> torch.Tensor:
        """Check ``positions`` against x; return them as an integer tensor on x's device."""
        length = x.shape[seq_axis]
        positions = _integer_positions(positions)
        if positions.dim() not in (1, 2) or positions.shape[-1] != length:
            raise ValueError(
                f"positions must have shape (seq,) or (batch, seq) with seq = {length} "
                f"(x has shape {tuple(x.shape)}), got {tuple(positions.shape)}"
            )
        if positions.dim() == 2:
            batch_axis_ok = x.dim() == 4 and positions.shape[0] in (1, x.shape[0])
            if not batch_axis_ok:
                where = "(batch, heads, seq, head_dim)"
                if self.layout == "bshd":
                    where = "(batch, seq, heads, head_dim)"
                raise ValueError(
                    f"(batch, seq) positions need x of shape {where} with the same batch "
                    f"(or a batch of 1 to share): they apply to every head of their "
                    f"sequence, never along the heads axis; got positions "
                    f"{tuple(positions.shape)} for x {tuple(x.shape)}"
                )
        _check_position_values(positions)
        return positions.to(x.device)

    # --- the rotation ------------------------------------------------------------------

    def forward(self, x: torch.Tensor, positions=None) -> torch.Tensor:
        seq_axis = self._check_x(x)
        if self._multi_axis():
            return self._forward_multi(x, positions, seq_axis)
        plan = self._plan(x, positions, seq_axis)
        return self._rotate_planned(x, plan)

    def apply(self, q: torch.Tensor, k: torch.Tensor, positions=None) -> tuple:
        """``(rope(q, positions), rope(k, positions))``, the tables computed once.

        q and k may differ in their number of heads (grouped-query attention); they
        share the sequence length and the positions.
        """
        seq_axis = self._check_x(q)
        if self._check_x(k) != seq_axis or k.shape[seq_axis] != q.shape[seq_axis]:
            raise ValueError(
                f"q and k must have the same sequence length, got q {tuple(q.shape)} and "
                f"k {tuple(k.shape)}"
            )
        if self._multi_axis():
            return self(q, positions), self(k, positions)
        plan = self._plan(q, positions, seq_axis)
        same_path = ("triton" in plan) == _use_triton(k) and k.shape[0] == q.shape[0]
        if k.dtype != q.dtype or k.device != q.device or not same_path:
            return self._rotate_planned(q, plan), self(k, positions)
        return self._rotate_planned(q, plan), self._rotate_planned(k, plan)

    def _plan(self, x: torch.Tensor, positions, seq_axis: int) -> dict:
        """What the rotation of x needs: positions on x's device, or the cached tables."""
        length = x.shape[seq_axis]
        plan = {"seq_axis": seq_axis, "positions": None}
        if positions is not None:
            plan["positions"] = self._positions_for(positions, x, seq_axis)
        if _use_triton(x):
            if plan["positions"] is None:
                plan["triton"] = self._theta_for_length(length, x.device)
            else:
                plan["triton"] = self._theta_on(x.device, plan["positions"])
            return plan
        if plan["positions"] is None:
            plan["tables"] = self._tables(length, x.dtype, x.device)
        else:
            cos, sin = self._cos_sin(plan["positions"], x.dtype, x.device)
            plan["tables"] = (cos, sin, self._prepared(cos, sin, x.dtype, x.device))
        return plan

    def _rotate_planned(self, x: torch.Tensor, plan: dict) -> torch.Tensor:
        if x.shape[plan["seq_axis"]] == 0:
            return x.clone()
        positions = plan["positions"]
        if "triton" in plan:
            if positions is not None:
                positions = positions.to(torch.int64)  # on the device: the kernel's type
            if positions is not None and positions.dim() == 1:
                positions = positions[None]
            if positions is not None and x.dim() == 4 and positions.shape[0] != x.shape[0]:
                positions = positions.expand(x.shape[0], -1)
            options = (self.attention_scale, self.pairing, self.rotary_dim, self.layout)
            return _TritonRotation.apply(x, plan["triton"], positions, *options)
        cos, sin, prepared = plan["tables"]
        # (…, seq, pairs) tables, shaped to broadcast against x
        cos, sin = (
            _broadcastable(cos, positions, self.layout),
            _broadcastable(sin, positions, self.layout),
        )
        if prepared is not None and _fast_path(x):
            prepared = _broadcastable(prepared, positions, self.layout)
            return _rotate_cpu(x, prepared, sin, self.pairing, self.rotary_dim, plan["seq_axis"])
        return _rotate(x, cos, sin, self.pairing, self.rotary_dim)

    def extra_repr(self) -> str:
        params = self.rope_parameters
        kind = "" if params is None else f", rope_type={params.rope_type!r}"
        if self._multi_axis():
            kind += f", {self._mode_repr()}"
        return (
            f"head_dim={self.head_dim}, rotary_dim={self.rotary_dim}, base={self.base:g}, "
            f"pairing={self.pairing!r}, layout={self.layout!r}, "
            f"attention_scale={self.attention_scale:g}{kind}"
        )


def _int_tuple(name: str, values) -> tuple[int, ...]:
    """``values`` (a list or tuple of ints) as a tuple of Python ints, or TypeError."""
    if isinstance(values, str) or not isinstance(values, list | tuple):
        raise TypeError(f"{name} must be a tuple of ints, got {values!r}")
    for value in values:
        if isinstance(value, bool | np.bool_) or not isinstance(value, int | np.integer):
            raise TypeError(f"{name} must be a tuple of ints, got {values!r}")
    return tuple(int(value) for value in values)


def _broadcastable(table: torch.Tensor, positions, layout: str) -> torch.Tensor:
    """A (seq, w) or (batch, seq, w) table shaped to broadcast against x."""
    if layout == "bshd":
        return table.unsqueeze(-2)  # (seq, 1, w) or (batch, seq, 1, w): every head
    if positions is not None and positions.dim() == 2:
        return table.unsqueeze(1)  # (batch, 1, seq, w): every head
    return table


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


def _rotate_cpu(x, prepared, sin, pairing: str, r: int, seq_axis: int) -> torch.Tensor:
    # The same numbers as _rotate, in fewer passes over memory, every head at once:
    #   interleaved: (x0 + i x1)(cos + i sin), one complex product;
    #   half: out = x * [cos, cos], then out0 -= x1 sin and out1 += x0 sin.
    # One block of ROTARY_BLOCK_ROWS positions at a time (one block up to that length):
    # the number of operations grows with the length, never with batch or heads.
    length = x.shape[seq_axis]
    out = torch.empty_like(x)
    half, step = r // 2, ROTARY_BLOCK_ROWS
    if pairing == "interleaved":
        xc = torch.view_as_complex(x[..., :r].unflatten(-1, (half, 2)))
        oc = torch.view_as_complex(out[..., :r].unflatten(-1, (half, 2)))
    for start in range(0, length, step):
        rows = slice(start, start + step)
        size = min(step, length - start)
        xb, ob = x.narrow(seq_axis, start, size), out.narrow(seq_axis, start, size)
        tb = _rows(prepared, seq_axis, rows)
        if pairing == "interleaved":
            torch.mul(xc.narrow(seq_axis, start, size), tb, out=oc.narrow(seq_axis, start, size))
            continue
        sb = _rows(sin, seq_axis, rows)
        torch.mul(xb[..., :r], tb, out=ob[..., :r])
        ob[..., :half].addcmul_(xb[..., half:r], sb, value=-1)
        ob[..., half:r].addcmul_(xb[..., :half], sb)
    if r < x.shape[-1]:
        out[..., r:] = x[..., r:]
    return out


def _rows(table: torch.Tensor, seq_axis: int, rows: slice) -> torch.Tensor:
    """Rows ``rows`` of a broadcastable table along x's seq axis (size 1 stays)."""
    axis = table.dim() + seq_axis
    if axis < 0 or table.shape[axis] == 1:
        return table
    return table[(slice(None),) * axis + (rows,)]


def _use_triton(x: torch.Tensor) -> bool:
    """The fused kernel applies: x 4-D on CUDA in a dtype it computes, Triton present."""
    if x.device.type != "cuda" or x.dim() != 4:
        return False
    from posenc import rotary_triton

    return (
        x.dtype in (torch.float32, torch.bfloat16, torch.float16)
        and x.stride(-1) == 1
        and not torch.compiler.is_compiling()
        and rotary_triton.available(x)
    )


class _TritonRotation(torch.autograd.Function):
    """The fused kernel with its gradient: a rotation's transpose is the inverse rotation."""

    @staticmethod
    def forward(ctx, x, theta, positions, scale, pairing, rotary_dim, layout):
        ctx.save_for_backward(theta, positions if positions is not None else theta.new_empty(0))
        ctx.has_positions = positions is not None
        ctx.options = {"scale": scale, "pairing": pairing, "rotary_dim": rotary_dim}
        ctx.layout = layout
        from posenc import rotary_triton

        return rotary_triton.rotate(x, theta, positions, layout=layout, **ctx.options)

    @staticmethod
    def backward(ctx, grad):
        # Itself differentiable: the inverse rotation through this same Function, so
        # that a second derivative (create_graph=True) is taken, not silently dropped.
        theta, positions = ctx.saved_tensors
        positions = positions if ctx.has_positions else None
        grad = grad if grad.stride(-1) == 1 else grad.contiguous()
        options = ctx.options
        dx = _TritonRotation.apply(
            grad, -theta, positions, options["scale"], options["pairing"],
            options["rotary_dim"], ctx.layout,
        )  # fmt: skip
        return dx, None, None, None, None, None, None
