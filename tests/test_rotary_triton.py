"""posenc.rotary_triton: the fused RoPE kernel, run on the CPU in Triton's interpreter.

``TRITON_INTERPRET`` is read by Triton when a kernel is decorated, not when Triton is
imported, and :mod:`posenc.rotary_triton` builds its kernel on first use for each
setting it sees; so setting the variable per test (``monkeypatch.setenv``) is robust
whatever other test module imported Triton first. The results are compared with the
float64 rotation written below from the formula.
"""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
import torch

pytest.importorskip("triton")

from posenc import rotary_triton
from posenc.rotary_triton import available, rotate

LARGE = 10**6
FLOAT32_BOUND = 1e-6  # the module's promise for |x| <= 1, at positions up to 10**6
# The largest relative error of rounding once to each dtype (half an ulp). Triton 3.9's
# interpreter converts float32 to bfloat16 by truncation (its cast ignores the rounding
# mode; a GPU rounds to nearest), which errs by up to a whole ulp: twice that.
UNIT_ROUNDOFF = {torch.float32: 2.0**-24, torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11}
INTERPRETER_ROUNDING = {torch.bfloat16: 2.0, torch.float16: 1.0}


@pytest.fixture(autouse=True)
def interpret(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")


@pytest.fixture(params=["one head a program", "all heads, several seq blocks"])
def work_split(request, monkeypatch):
    """Both ways the kernel walks the heads: a program per head (what small inputs get),
    and one program looping over all heads with a tile of 2 positions (several sequence
    blocks, the last one partly masked)."""
    if request.param != "one head a program":
        monkeypatch.setattr(rotary_triton, "MIN_PROGRAMS", 1)
        monkeypatch.setattr(rotary_triton, "PAIRS_PER_TILE", 2 * 64)
    return request.param


def frequencies(rotary_dim: int, base: float = 10000.0) -> torch.Tensor:
    return base ** (-torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim)


def exact_rotation(x, theta, positions, *, pairing, rotary_dim, layout, scale=1.0):
    """The rotation in float64 from the formula, in x's layout."""
    x = x.to(torch.float64)
    if layout == "bshd":
        x = x.transpose(1, 2)
    batch, _, seq, _ = x.shape
    if positions is None:
        positions = torch.arange(seq).expand(batch, seq)
    angle = positions.to(torch.float64)[:, None, :, None] * theta
    cos, sin = scale * torch.cos(angle), scale * torch.sin(angle)
    r = rotary_dim
    first, second = (slice(0, r, 2), slice(1, r, 2))
    if pairing == "half":
        first, second = slice(0, r // 2), slice(r // 2, r)
    y = x.clone()
    x0, x1 = x[..., first], x[..., second]
    y[..., first] = x0 * cos - x1 * sin
    y[..., second] = x0 * sin + x1 * cos
    return y.transpose(1, 2) if layout == "bshd" else y


def assert_close_to_exact(y, exact, dtype):
    """float32: within FLOAT32_BOUND; bf16/fp16: the exact value rounded once, plus that."""
    error = (y.to(torch.float64) - exact).abs()
    if dtype == torch.float32:
        bound = torch.full_like(exact, FLOAT32_BOUND)
    else:
        rounding = INTERPRETER_ROUNDING[dtype] * UNIT_ROUNDOFF[dtype]
        bound = rounding * (exact.abs() + FLOAT32_BOUND) + FLOAT32_BOUND
    worst = (error - bound).max().item()
    assert worst <= 0, f"error exceeds the bound by {worst:.3g} (largest {error.max():.3g})"


def sample(shape, dtype, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return (2 * torch.rand(shape, generator=generator, dtype=torch.float64) - 1).to(dtype)


def large_positions(batch, seq):
    """(batch, seq) int64 positions with the largest, 10**6, and a few near it."""
    rows = [torch.tensor([0, 1, LARGE - 1, 123_457, LARGE])[:seq] + b for b in range(batch)]
    positions = torch.stack(rows)
    positions[-1, -1] = LARGE
    return positions


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("with_positions", [False, True])
@pytest.mark.parametrize(("head_dim", "rotary_dim"), [(24, None), (80, 40)])
@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
@pytest.mark.parametrize("pairing", ["half", "interleaved"])
def test_matches_float64_rotation(pairing, layout, head_dim, rotary_dim, with_positions, dtype):
    batch, heads, seq = 2, 3, 5
    shape = (batch, heads, seq, head_dim) if layout == "bhsd" else (batch, seq, heads, head_dim)
    x = sample(shape, dtype)
    r = head_dim if rotary_dim is None else rotary_dim
    theta = frequencies(r)
    positions = large_positions(batch, seq) if with_positions else None
    y = rotate(x, theta, positions, pairing=pairing, rotary_dim=rotary_dim, layout=layout)
    assert y.shape == x.shape and y.dtype == dtype and y.is_contiguous()
    exact = exact_rotation(x, theta, positions, pairing=pairing, rotary_dim=r, layout=layout)
    assert_close_to_exact(y, exact, dtype)
    if r < head_dim:  # the features past rotary_dim are copied bit for bit
        assert torch.equal(y[..., r:], x[..., r:])


@pytest.mark.parametrize("pairing", ["half", "interleaved"])
def test_heads_loop_and_sequence_blocks(pairing, work_split):
    x = sample((2, 3, 5, 24), torch.float32, seed=1)
    theta, positions = frequencies(24), large_positions(2, 5)
    y = rotate(x, theta, positions, pairing=pairing)
    exact = exact_rotation(x, theta, positions, pairing=pairing, rotary_dim=24, layout="bhsd")
    assert_close_to_exact(y, exact, torch.float32)


def test_scale_int32_positions_and_float16():
    x = sample((1, 2, 5, 24), torch.float16, seed=2)
    theta, scale = frequencies(24, base=500.0), 0.75
    positions = torch.tensor([[3, 999_999, 7, 0, 1_000_000]], dtype=torch.int32)
    y = rotate(x, theta, positions, scale=scale, pairing="interleaved")
    exact = exact_rotation(
        x, theta, positions, pairing="interleaved", rotary_dim=24, layout="bhsd", scale=scale
    )
    assert_close_to_exact(y, exact, torch.float16)


def test_strided_input_is_read_in_place_and_out_is_written():
    # q as a slice of a fused (batch, seq, 3 * heads, head_dim) projection, seen as bhsd.
    qkv = sample((2, 5, 9, 24), torch.float32, seed=3)
    q = qkv[:, :, :3].transpose(1, 2)
    assert not q.is_contiguous() and q.stride(-1) == 1
    theta = frequencies(24)
    exact = exact_rotation(q, theta, None, pairing="half", rotary_dim=24, layout="bhsd")
    assert_close_to_exact(rotate(q, theta), exact, torch.float32)
    out = torch.empty_like(q)
    assert rotate(q, theta, out=out) is out
    assert_close_to_exact(out, exact, torch.float32)
    copy = q.clone()
    assert rotate(copy, theta, out=copy) is copy  # in place
    assert_close_to_exact(copy, exact, torch.float32)


def test_empty_sequence():
    x = torch.empty(2, 3, 0, 8)
    y = rotate(x, frequencies(8))
    assert y.shape == x.shape


def test_available(monkeypatch):
    x = torch.zeros(1, 1, 1, 2)
    assert available(x)
    assert not available(x.numpy())
    monkeypatch.delenv("TRITON_INTERPRET")
    assert not available(x)  # a CPU tensor, no interpreter
    with pytest.raises(ValueError, match="x must be on a CUDA device"):
        rotate(x, frequencies(2))


def test_imports_and_reports_unavailable_without_triton():
    code = (
        "import sys; sys.modules['triton'] = None\n"
        "import torch, posenc.rotary_triton as rt\n"
        "assert not rt.available(torch.zeros(1))\n"
        "try:\n"
        "    rt.rotate(torch.zeros(1, 1, 1, 2), torch.ones(1, dtype=torch.float64))\n"
        "except RuntimeError as error:\n"
        "    assert 'needs Triton' in str(error)\n"
        "else:\n"
        "    raise AssertionError('rotate ran without Triton')\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def _bad_calls():
    x, theta = torch.zeros(2, 3, 5, 8), frequencies(8)
    return [
        (TypeError, "x must be a torch.Tensor", lambda: rotate(x.numpy(), theta)),
        (TypeError, "x must be float32, bfloat16 or float16", lambda: rotate(x.double(), theta)),
        (ValueError, "x must have 4 axes", lambda: rotate(x[0], theta)),
        (ValueError, "contiguous along its last axis", lambda: rotate(x.transpose(2, 3), theta)),
        (ValueError, "layout must be one of", lambda: rotate(x, theta, layout="bsdh")),
        (ValueError, "pairing must be one of", lambda: rotate(x, theta, pairing="neox")),
        (ValueError, "scale must be finite", lambda: rotate(x, theta, scale=math.inf)),
        (ValueError, "rotary_dim must be even", lambda: rotate(x, theta[:2], rotary_dim=5)),
        (ValueError, "rotary_dim must be even", lambda: rotate(x, theta, rotary_dim=10)),
        (TypeError, "rotary_dim", lambda: rotate(x, theta, rotary_dim=4.0)),
        (TypeError, "theta must be a float64", lambda: rotate(x, theta.float())),
        (ValueError, r"theta must have shape \(4,\)", lambda: rotate(x, theta[:3])),
        (TypeError, "positions must be int64 or int32", lambda: rotate(x, theta, x[:, 0, :, 0])),
        (
            ValueError,
            r"positions must have shape \(batch, seq\) = \(2, 5\), got \(5,\)",
            lambda: rotate(x, theta, torch.arange(5)),
        ),
        (ValueError, "out must match x", lambda: rotate(x, theta, out=torch.empty(2, 3, 5, 6))),
        (ValueError, "out must match x", lambda: rotate(x, theta, out=x.half())),
    ]


@pytest.mark.parametrize("index", range(len(_bad_calls())))
def test_bad_arguments_name_the_argument(index):
    error, message, call = _bad_calls()[index]
    with pytest.raises(error, match=message):
        call()


OFFSETS_PAST_INT32 = """
import os
os.environ["TRITON_INTERPRET"] = "1"
import torch
from posenc import rotary_triton
seq, head_dim, stride_h = 4, 128, 2**30  # head 2 starts 2**31 elements in
size = 2 * stride_h + seq * head_dim
store = torch.empty(size, dtype=torch.float16)  # never touched past the three heads
x = store.as_strided((1, 3, seq, head_dim), (size, stride_h, head_dim, 1))
for h in range(3):
    x[:, h].normal_(generator=torch.Generator().manual_seed(h))
theta = 10000.0 ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
y = rotary_triton.rotate(x, theta, out=torch.empty(1, 3, seq, head_dim, dtype=torch.float16))
alone = rotary_triton.rotate(x[:, 2:].contiguous(), theta)
print("equal" if torch.equal(y[:, 2:], alone) else "different")
"""


def test_offsets_past_two_to_the_31_elements_are_computed_in_int64():
    # A head 2**31 elements into x (a million-token prefill of 32 heads reaches it):
    # with int32 offsets the kernel addresses the wrong memory (here: a crash).
    done = subprocess.run(
        [sys.executable, "-c", OFFSETS_PAST_INT32], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0 and done.stdout.strip() == "equal", (
        done.returncode,
        done.stderr[-500:],
    )
