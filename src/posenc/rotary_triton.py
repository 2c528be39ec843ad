"""RoPE as one fused Triton kernel: the GPU path of :class:`posenc.torch.RotaryEmbedding`.

:func:`rotate` applies the rotary position embedding to q or k of shape
(batch, heads, seq, head_dim) (``layout="bhsd"``) or (batch, seq, heads, head_dim)
(``layout="bshd"``, the order Hugging Face's models project into) in one pass.

Why one pass is the bound
-------------------------
Rotating a pair is four multiplies and two adds; an H100 does them thousands of times
faster than it can move the bytes in and out. The rotation is memory-bound, and the
least memory any out-of-place rotation can touch is reading x once and writing y once,
exactly what ``x.clone()`` does. The eager formula of Hugging Face's ``rotate_half``
(``q * cos + rotate_half(q) * sin``) launches about five kernels, each a full pass
over a tensor of q's size, plus cos and sin of width head_dim, expanded over the
heads; that is why it costs several clones. This kernel reads x once, writes y once
and reads only the (rotary_dim // 2,) frequencies and the (batch, seq) positions
besides, so it can approach the clone.

Layout of the work
------------------
One program takes a tile of ``BLOCK_S`` positions of one sequence by all rotated pairs
(about 1024 entries, 8 a thread): it forms cos and sin once for each (position, pair)
of the tile, keeps them in registers and loops over the heads, loading, rotating and
storing one (BLOCK_S, pairs) tile of each head, so the transcendental work is 1/heads
of the element count and hides under the memory traffic. The grid is
(batch x seq blocks, head groups): the heads are split into groups (cos and sin then
formed once per group) only when batch and sequence alone give too few programs to
keep every streaming multiprocessor's loads in flight (short sequences, decode). Half
pairs are two contiguous loads of rotary_dim / 2 features; interleaved pairs are one
contiguous load split into even and odd features in registers, so every load and store
is coalesced and vectorised. Features past ``rotary_dim`` are copied in the same
program. Strides of x are passed to the kernel (only the last axis must be contiguous),
so a slice of a fused QKV projection is read where it lies.

Accuracy
--------
The angle position * theta_i is formed in float64, reduced into [-pi, pi] in float64
(minus 2 pi round(angle / 2 pi)), rounded to float32, and cos and sin are taken in
float32 and multiplied by ``scale``. The rotation is computed in float32 and rounded
once to the dtype of x. At positions up to 10**6 the float64 steps err by about 1e-10,
the float32 rounding of the reduced angle by at most 2**-23 (|angle| <= pi), and cos
and sin by a few float32 ulps, so a float32 result is within about 5e-7 of the float64
rotation for |x| <= 1, at any position below 2**53 / max theta; a bfloat16 or float16
result is the exact one rounded once, plus that float32 error.

Nothing in :func:`rotate` waits for the device: its checks read shapes, dtypes and
devices only, never tensor values (positions are not checked for being >= 0; a
negative position rotates backwards, as the formula says).

Triton is imported on first use: importing this module works where Triton is missing,
and then :func:`available` is False. ``TRITON_INTERPRET=1`` runs the kernel in Triton's
interpreter on CPU tensors (the tests use it); it is read when the kernel is first
needed, and a kernel is built for each setting seen.
"""

from __future__ import annotations

import torch

from posenc._validation import choice, integer, positive_finite

__all__ = ["LAYOUTS", "PAIRINGS", "available", "rotate"]

PAIRINGS = ("half", "interleaved")
LAYOUTS = ("bhsd", "bshd")
DTYPES = (torch.float32, torch.bfloat16, torch.float16)

PAIRS_PER_TILE = 1024  # (position, pair) entries of one program's tile: 8 a thread
MIN_PROGRAMS = 4 * 132  # several programs for each streaming multiprocessor of an H100

triton = None  # bound on first use by _triton()
tl = None
_KERNELS: dict[bool, object] = {}


def _triton():
    """Import Triton (once); None where it is not installed."""
    global triton, tl
    if triton is None:
        try:
            import triton as triton_module
            import triton.language as tl_module
        except ImportError:
            return None
        triton, tl = triton_module, tl_module
    return triton


def _interpreting() -> bool:
    return _triton() is not None and bool(triton.knobs.runtime.interpret)


def available(x: torch.Tensor) -> bool:
    """Triton importable and x on CUDA (or TRITON_INTERPRET=1 is set, for tests on the CPU)."""
    if not isinstance(x, torch.Tensor) or _triton() is None:
        return False
    return x.device.type == "cuda" or _interpreting()


def _rope_kernel(
    x_ptr,
    y_ptr,
    theta_ptr,
    pos_ptr,
    seq,
    heads,
    seq_blocks,
    heads_per_program,
    scale,
    x_stride_b,
    x_stride_s,
    x_stride_h,
    y_stride_b,
    y_stride_s,
    y_stride_h,
    pos_stride_b,
    pos_stride_s,
    PAIRS: tl.constexpr,
    ROTARY: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_S: tl.constexpr,
    BLOCK_P: tl.constexpr,
    BLOCK_REST: tl.constexpr,
    INTERLEAVED: tl.constexpr,
    HAS_POSITIONS: tl.constexpr,
):
    # One program: positions s0 .. s0 + BLOCK_S - 1 of sequence b, for heads
    # h0 .. h0 + heads_per_program - 1, one (BLOCK_S, pairs) tile per head.
    pid = tl.program_id(0)
    b = (pid // seq_blocks).to(tl.int64)
    s = (pid % seq_blocks) * BLOCK_S + tl.arange(0, BLOCK_S)
    p = tl.arange(0, BLOCK_P)
    s_ok = s < seq

    # cos and sin of each (position, pair) of the tile: once, for all the heads below.
    if HAS_POSITIONS:
        where = pos_ptr + b * pos_stride_b + s.to(tl.int64) * pos_stride_s
        position = tl.load(where, mask=s_ok, other=0).to(tl.float64)
    else:
        position = s.to(tl.float64)
    theta = tl.load(theta_ptr + p, mask=p < PAIRS, other=0.0)
    angle = position[:, None] * theta[None, :]
    # A Python float in a kernel is a float32 constant; tl.full keeps all 53 bits.
    two_pi = tl.full((), 6.283185307179586, tl.float64)
    angle = (angle - two_pi * tl.floor(angle / two_pi + 0.5)).to(tl.float32)
    cos = tl.cos(angle) * scale  # (BLOCK_S, BLOCK_P), float32
    sin = tl.sin(angle) * scale

    s64 = s.to(tl.int64)[:, None]
    x_base = x_ptr + b * x_stride_b + s64 * x_stride_s
    y_base = y_ptr + b * y_stride_b + s64 * y_stride_s
    # int64 offsets: h * x_stride_h passes 2**31 for long sequences (32 heads of 2**20
    # rows of 128); int32 strides would wrap and address the wrong memory.
    x_stride_h64 = tl.cast(x_stride_h, tl.int64)
    y_stride_h64 = tl.cast(y_stride_h, tl.int64)
    h0 = tl.program_id(1) * heads_per_program
    for h in range(h0, tl.minimum(h0 + heads_per_program, heads)):
        x_row = x_base + h * x_stride_h64
        y_row = y_base + h * y_stride_h64
        if INTERLEAVED:
            d = tl.arange(0, 2 * BLOCK_P)[None, :]
            ok = s_ok[:, None] & (d < ROTARY)
            both = tl.load(x_row + d, mask=ok, other=0.0).to(tl.float32)
            x0, x1 = tl.split(tl.reshape(both, (BLOCK_S, BLOCK_P, 2)))
            y = tl.join(x0 * cos - x1 * sin, x0 * sin + x1 * cos)
            y = tl.reshape(y, (BLOCK_S, 2 * BLOCK_P))
            tl.store(y_row + d, y.to(y_ptr.dtype.element_ty), mask=ok)
        else:
            d = p[None, :]
            ok = s_ok[:, None] & (d < PAIRS)
            x0 = tl.load(x_row + d, mask=ok, other=0.0).to(tl.float32)
            x1 = tl.load(x_row + (d + PAIRS), mask=ok, other=0.0).to(tl.float32)
            y0 = x0 * cos - x1 * sin
            y1 = x0 * sin + x1 * cos
            tl.store(y_row + d, y0.to(y_ptr.dtype.element_ty), mask=ok)
            tl.store(y_row + (d + PAIRS), y1.to(y_ptr.dtype.element_ty), mask=ok)
        if BLOCK_REST > 0:  # partial rotary: the features past rotary_dim, copied
            d = ROTARY + tl.arange(0, BLOCK_REST)[None, :]
            ok = s_ok[:, None] & (d < HEAD_DIM)
            rest = tl.load(x_row + d, mask=ok, other=0.0)
            tl.store(y_row + d, rest.to(y_ptr.dtype.element_ty), mask=ok)


def _kernel():
    """The jitted kernel for the current TRITON_INTERPRET setting (built once each)."""
    interpret = _interpreting()
    if interpret not in _KERNELS:
        _KERNELS[interpret] = triton.jit(_rope_kernel)
    return _KERNELS[interpret]


def _tensor(name: str, value) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
    return value


def _work_split(batch: int, seq: int, heads: int, pairs: int) -> tuple[int, int, int]:
    """(BLOCK_S, BLOCK_P, heads per program): the tile of one program and its heads.

    All the heads of a tile share one program unless that leaves too few programs to
    keep every streaming multiprocessor's loads in flight (short sequences, decode);
    then the heads are split, and cos and sin are formed once per group instead.
    """
    block_p = triton.next_power_of_2(pairs)
    block_s = max(1, min(triton.next_power_of_2(seq), PAIRS_PER_TILE // block_p))
    programs = batch * triton.cdiv(seq, block_s)
    per_program = heads
    while per_program > 1 and programs * triton.cdiv(heads, per_program) < MIN_PROGRAMS:
        per_program = triton.cdiv(per_program, 2)
    return block_s, block_p, per_program


def rotate(
    x,
    theta,
    positions=None,
    *,
    scale=1.0,
    pairing="half",
    rotary_dim=None,
    layout="bhsd",
    out=None,
) -> torch.Tensor:
    """Rotate x by its positions with one fused Triton kernel; return y (or ``out``).

    Parameters
    ----------
    x : (batch, heads, seq, head_dim) for ``layout="bhsd"`` or (batch, seq, heads,
        head_dim) for ``"bshd"``; float32, bfloat16 or float16; the last axis contiguous
        (other strides are read as they are: x is never copied).
    theta : float64 tensor (rotary_dim // 2,) on x's device: the speed of each pair.
    positions : None (0 .. seq - 1 for every sequence) or an int64/int32 tensor
        (batch, seq) on x's device.
    scale : multiplies cos and sin (YaRN's attention factor); default 1.
    pairing : ``"half"`` rotates (x_i, x_{i + r/2}), as GPT-NeoX and Hugging Face's
        ``rotate_half`` do; ``"interleaved"`` rotates (x_{2i}, x_{2i+1}), as RoFormer and
        Meta's LLaMA code do.
    rotary_dim : r, even, at most head_dim (default head_dim); features past it are
        copied unchanged (GPT-NeoX's partial rotary).
    layout : ``"bhsd"`` or ``"bshd"``, the order of x's axes (and of y's).
    out : optional tensor of x's shape, dtype and device, last axis contiguous, to
        write y into (it may be x itself: each element is read before it is written).

    Returns a new contiguous tensor of x's shape and dtype, or ``out``. The result is
    y_{2i or i} = x0 cos - x1 sin, y_{2i+1 or i+r/2} = x0 sin + x1 cos with angle
    position * theta_i; see the module docstring for how it is computed and its error.
    Nothing here synchronises with the device.
    """
    if _triton() is None:
        raise RuntimeError("posenc.rotary_triton.rotate needs Triton, which is not installed")
    x = _tensor("x", x)
    if x.dtype not in DTYPES:
        raise TypeError(f"x must be float32, bfloat16 or float16, got dtype {x.dtype}")
    if not available(x):
        raise ValueError(
            f"x must be on a CUDA device for the Triton kernel (or set TRITON_INTERPRET=1), "
            f"got device {x.device}"
        )
    layout = choice("layout", layout, LAYOUTS)
    pairing = choice("pairing", pairing, PAIRINGS)
    scale = positive_finite("scale", scale)
    if x.dim() != 4:
        axes = "batch, heads, seq" if layout == "bhsd" else "batch, seq, heads"
        raise ValueError(f"x must have 4 axes ({axes}, head_dim), got shape {tuple(x.shape)}")
    if layout == "bhsd":
        batch, heads, seq, head_dim = x.shape
    else:
        batch, seq, heads, head_dim = x.shape
    if x.stride(-1) != 1 and head_dim > 1:
        raise ValueError(f"x must be contiguous along its last axis, got strides {x.stride()}")
    r = head_dim if rotary_dim is None else integer("rotary_dim", rotary_dim, minimum=2)
    if r % 2 or r < 2 or r > head_dim:
        raise ValueError(f"rotary_dim must be even and in [2, head_dim={head_dim}], got {r}")
    pairs = r // 2

    theta = _tensor("theta", theta)
    if theta.dtype != torch.float64:
        raise TypeError(f"theta must be a float64 tensor, got dtype {theta.dtype}")
    if tuple(theta.shape) != (pairs,):
        raise ValueError(
            f"theta must have shape ({pairs},) (rotary_dim // 2), got {tuple(theta.shape)}"
        )
    if theta.device != x.device:
        raise ValueError(f"theta must be on x's device {x.device}, got {theta.device}")
    theta = theta.contiguous()

    if positions is not None:
        positions = _tensor("positions", positions)
        if positions.dtype not in (torch.int64, torch.int32):
            raise TypeError(f"positions must be int64 or int32, got dtype {positions.dtype}")
        if tuple(positions.shape) != (batch, seq):
            raise ValueError(
                f"positions must have shape (batch, seq) = {(batch, seq)}, "
                f"got {tuple(positions.shape)}"
            )
        if positions.device != x.device:
            raise ValueError(f"positions must be on x's device {x.device}, got {positions.device}")

    if out is None:
        out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    else:
        out = _tensor("out", out)
        if out.shape != x.shape or out.dtype != x.dtype or out.device != x.device:
            raise ValueError(
                f"out must match x (shape {tuple(x.shape)}, {x.dtype}, {x.device}), got "
                f"shape {tuple(out.shape)}, {out.dtype}, {out.device}"
            )
        if out.stride(-1) != 1 and head_dim > 1:
            raise ValueError(
                f"out must be contiguous along its last axis, got strides {out.stride()}"
            )
    if x.numel() == 0:
        return out

    def strides(t):  # (batch, seq, heads) strides in either layout
        return (t.stride(0), t.stride(2), t.stride(1)) if layout == "bhsd" else t.stride()[:3]

    block_s, block_p, per_program = _work_split(batch, seq, heads, pairs)
    rest = head_dim - r
    seq_blocks = triton.cdiv(seq, block_s)
    grid = (batch * seq_blocks, triton.cdiv(heads, per_program))
    _kernel()[grid](
        x,
        out,
        theta,
        theta if positions is None else positions,
        seq,
        heads,
        seq_blocks,
        per_program,
        scale,
        *strides(x),
        *strides(out),
        *((0, 0) if positions is None else positions.stride()),
        PAIRS=pairs,
        ROTARY=r,
        HEAD_DIM=head_dim,
        BLOCK_S=block_s,
        BLOCK_P=block_p,
        BLOCK_REST=0 if rest == 0 else triton.next_power_of_2(rest),
        INTERLEAVED=pairing == "interleaved",
        HAS_POSITIONS=positions is not None,
        num_warps=max(1, min(4, block_s * block_p // 256)),
        enable_fp_fusion=True,  # fused multiply-adds: one rounding fewer per product
    )
    return out
