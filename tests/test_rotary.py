"""posenc.rotary.RotaryEmbedding (also posenc.torch.RotaryEmbedding): RoPE in PyTorch."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

import posenc.torch as pt
from posenc.alternatives import rope
from posenc.long_context import scaled_frequencies


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def float32_bound(x: torch.Tensor) -> float:
    """What float32 arithmetic may cost on a rotation of x.

    cos and sin are each within 2**-24 (relative) of exact, and the two products and
    their sum add three more roundings: at most about 5 * 2**-24 * (|x0| + |x1|).
    """
    return 5 * 2.0**-24 * 2 * float(x.abs().max())


def exact(x: torch.Tensor, positions=None, *, pairing="half", **options) -> np.ndarray:
    """The float64 NumPy rotation of posenc.alternatives.rope (the book's reference)."""
    pos = None if positions is None else np.asarray(positions)
    return rope(x.double().numpy(), pos, pairing=pairing, **options)


@pytest.mark.parametrize("pairing", ["half", "interleaved"])
@pytest.mark.parametrize("rotary_dim", [None, 8])
@pytest.mark.parametrize("requires_grad", [False, True])
def test_matches_the_numpy_rotation_in_float64(pairing, rotary_dim, requires_grad):
    x = torch.randn(2, 3, 10, 16, dtype=torch.float64, requires_grad=requires_grad)
    module = pt.RotaryEmbedding(16, pairing=pairing, rotary_dim=rotary_dim)
    got = module(x)
    assert got.shape == x.shape and got.dtype == x.dtype
    want = exact(x.detach(), pairing=pairing, rotary_dim=rotary_dim)
    np.testing.assert_allclose(got.detach().numpy(), want, rtol=0, atol=1e-14)


@pytest.mark.parametrize("pairing", ["half", "interleaved"])
@pytest.mark.parametrize("rotary_dim", [None, 32])
def test_the_cpu_fast_form_gives_the_formula_in_float32(pairing, rotary_dim):
    # No autograd: the blocked/complex form. With autograd: the plain formula.
    x = torch.randn(1, 4, 3000, 64)
    module = pt.RotaryEmbedding(64, pairing=pairing, rotary_dim=rotary_dim)
    with torch.no_grad():
        fast = module(x)
    plain = module(x.clone().requires_grad_()).detach()
    want = exact(x, pairing=pairing, rotary_dim=rotary_dim)
    bound = float32_bound(x)
    assert np.abs(fast.numpy() - want).max() <= bound
    assert np.abs(plain.numpy() - want).max() <= bound
    if rotary_dim is not None:  # the features past rotary_dim pass through untouched
        assert torch.equal(fast[..., rotary_dim:], x[..., rotary_dim:])


@pytest.mark.parametrize("pairing", ["half", "interleaved"])
def test_float32_error_stays_within_two_ulps_far_out(pairing):
    # float64 angles rounded once: the error does not grow with the position.
    # (Angles computed in float32 are off by about position * 2**-24 radians.)
    x = torch.randn(1, 2, 2048, 128)
    module = pt.RotaryEmbedding(128, pairing=pairing)
    positions = torch.arange(100_000, 102_048)
    got = module(x, positions)
    want = exact(x, positions.numpy(), pairing=pairing)
    assert np.abs(got.numpy() - want).max() <= 2e-5
    assert np.abs(got.numpy() - want).max() <= float32_bound(x)


def test_frequencies_and_attention_scale_as_scaled_frequencies_give_them():
    theta, scale = scaled_frequencies(32, method="yarn", factor=4.0, original_length=64)
    module = pt.RotaryEmbedding(32, frequencies=theta, attention_scale=scale)
    x = torch.randn(2, 2, 20, 32, dtype=torch.float64)
    want = exact(x, pairing="half", frequencies=theta, attention_scale=scale)
    np.testing.assert_allclose(module(x).numpy(), want, rtol=0, atol=1e-13)
    np.testing.assert_array_equal(module.frequencies, theta)


def test_batch_positions_apply_to_every_head_even_when_batch_equals_heads():
    batch = heads = 3
    x = torch.randn(batch, heads, 7, 8, dtype=torch.float64)
    positions = torch.tensor(
        [[0, 1, 2, 3, 4, 5, 6], [5, 6, 7, 8, 9, 10, 11], [2, 4, 6, 8, 10, 12, 14]]
    )
    module = pt.RotaryEmbedding(8)
    got = module(x, positions)
    for b in range(batch):
        want = exact(x[b], positions[b].numpy(), pairing="half")  # (heads, seq, d)
        np.testing.assert_allclose(got[b].numpy(), want, rtol=0, atol=1e-14)
    # A (seq,) tensor is shared by everything before it.
    shared = module(x, positions[1])
    np.testing.assert_allclose(shared.numpy(), exact(x, positions[1].numpy()), atol=1e-14)


def test_no_positions_means_zero_to_seq_minus_one_and_the_cache_grows():
    module = pt.RotaryEmbedding(8, pairing="interleaved")
    short, long = torch.randn(1, 2, 5, 8), torch.randn(1, 2, 40, 8)
    with torch.no_grad():
        torch.testing.assert_close(module(short), module(short, torch.arange(5)))
        torch.testing.assert_close(module(long), module(long, torch.arange(40)))
        torch.testing.assert_close(module(short), module(short, torch.arange(5)))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_other_dtypes_keep_their_dtype(dtype):
    x = torch.randn(2, 6, 16).to(dtype)
    got = pt.RotaryEmbedding(16)(x)
    assert got.dtype == dtype and got.shape == x.shape
    want = exact(x.float(), pairing="half")
    tolerance = 4 * float(torch.finfo(dtype).eps) * float(x.abs().max())
    assert np.abs(got.double().numpy() - want).max() <= tolerance


def test_no_state_to_save_and_to_changes_nothing_it_needs():
    module = pt.RotaryEmbedding(16, base=500.0, rotary_dim=8)
    assert module.state_dict() == {} and list(module.buffers()) == []
    module.to(torch.float16)  # the frequencies are float64 NumPy, untouched
    np.testing.assert_array_equal(module.frequencies, 500.0 ** (-np.arange(0, 8, 2) / 8))
    fresh = pt.RotaryEmbedding(16, base=500.0, rotary_dim=8)
    fresh.load_state_dict(module.state_dict())
    x = torch.randn(1, 1, 4, 16, dtype=torch.float64)
    torch.testing.assert_close(fresh(x), module(x), rtol=0, atol=0)


def test_gradients_flow_through_the_rotation():
    x = torch.randn(1, 2, 6, 8, requires_grad=True)
    y = pt.RotaryEmbedding(8)(x)
    y.pow(2).sum().backward()
    # A rotation keeps lengths, so d|Rx|^2/dx = 2x.
    torch.testing.assert_close(x.grad, 2 * x.detach(), rtol=1e-5, atol=1e-5)


def test_runs_under_torch_compile():
    module = pt.RotaryEmbedding(16, pairing="interleaved")
    compiled = torch.compile(module, backend="eager")
    x = torch.randn(1, 2, 9, 16)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), module(x))


@pytest.mark.parametrize(
    ("kwargs", "error", "pattern"),
    [
        ({"head_dim": 7}, ValueError, "head_dim must be even.*7"),
        ({"head_dim": 8, "rotary_dim": 3}, ValueError, "rotary_dim must be even.*3"),
        ({"head_dim": 8, "rotary_dim": 10}, ValueError, "rotary_dim.*10"),
        ({"head_dim": 8, "pairing": "adjacent"}, ValueError, "pairing.*adjacent"),
        ({"head_dim": 8, "frequencies": [1.0, 0.1]}, ValueError, r"frequencies.*4.*\(2,\)"),
        ({"head_dim": 8, "attention_scale": 0.0}, ValueError, "attention_scale"),
    ],
)
def test_bad_configuration_names_the_argument(kwargs, error, pattern):
    with pytest.raises(error, match=pattern):
        pt.RotaryEmbedding(**kwargs)


@pytest.mark.parametrize(
    ("x_shape", "positions", "error", "pattern"),
    [
        ((1, 2, 5, 6), None, ValueError, r"head_dim = 8, got \(1, 2, 5, 6\)"),
        ((1, 2, 5, 8), torch.arange(5.0), TypeError, "positions must be integers.*float32"),
        ((1, 2, 5, 8), np.arange(5.0), TypeError, "positions must be integers.*float64"),
        ((1, 2, 5, 8), torch.arange(-1, 4), ValueError, "positions must be >= 0, got -1"),
        ((1, 2, 5, 8), torch.arange(4), ValueError, r"seq = 5.*got \(4,\)"),
        ((2, 2, 5, 8), torch.zeros(3, 5, dtype=torch.int64), ValueError, r"same batch.*\(3, 5\)"),
        ((2, 5, 8), torch.zeros(2, 5, dtype=torch.int64), ValueError, "never along the heads"),
        ((1, 2, 5, 8), torch.zeros(1, 1, 5, dtype=torch.int64), ValueError, r"\(1, 1, 5\)"),
    ],
)
def test_bad_input_names_the_argument(x_shape, positions, error, pattern):
    module = pt.RotaryEmbedding(8)
    with pytest.raises(error, match=pattern):
        module(torch.randn(*x_shape), positions)


def test_integer_x_is_refused():
    with pytest.raises(TypeError, match=re.escape("x must be a floating-point tensor")):
        pt.RotaryEmbedding(8)(torch.zeros(1, 5, 8, dtype=torch.int64))


# --- layouts, shared positions, apply, cos_sin, the device path -----------------------


@pytest.mark.parametrize("pairing", ["half", "interleaved"])
@pytest.mark.parametrize("rotary_dim", [None, 8])
@pytest.mark.parametrize("positions", [None, "shared", "batch", "batch_of_one"])
@pytest.mark.parametrize("grad", [False, True])
def test_bshd_layout_is_bhsd_transposed(pairing, rotary_dim, positions, grad):
    x = torch.randn(2, 3, 2500, 16)  # longer than one CPU block of positions
    table = {
        None: None,
        "shared": torch.arange(7, 2507),
        "batch": torch.stack((torch.arange(2500), torch.arange(40, 2540))),
        "batch_of_one": torch.arange(3, 2503)[None],
    }[positions]
    options = {"pairing": pairing, "rotary_dim": rotary_dim}
    bhsd = pt.RotaryEmbedding(16, **options)
    bshd = pt.RotaryEmbedding(16, layout="bshd", **options)
    xs = x.transpose(1, 2).contiguous().requires_grad_(grad)  # (batch, seq, heads, dim)
    with torch.set_grad_enabled(grad):
        got = bshd(xs, table).transpose(1, 2)
    want = exact(x, None if table is None else table.expand(2, -1).numpy()[:, None], **options)
    assert np.abs(got.detach().numpy() - want).max() <= float32_bound(x)
    torch.testing.assert_close(got, bhsd(x, table), rtol=0, atol=float32_bound(x))


def test_a_batch_of_one_positions_is_shared_by_the_whole_batch():
    # Hugging Face models pass position_ids of shape (1, seq) for an unpadded batch.
    module = pt.RotaryEmbedding(8)
    x = torch.randn(3, 2, 6, 8, dtype=torch.float64)
    positions = torch.arange(10, 16)
    torch.testing.assert_close(module(x, positions[None]), module(x, positions), rtol=0, atol=0)


@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
def test_apply_rotates_q_and_k_with_different_numbers_of_heads(layout):
    module = pt.RotaryEmbedding(16, layout=layout)
    heads_axis = 1 if layout == "bhsd" else 2
    q_shape, k_shape = [2, 9, 16], [2, 9, 16]
    q_shape.insert(heads_axis, 8)
    k_shape.insert(heads_axis, 2)  # grouped-query attention: fewer key heads
    q, k = torch.randn(q_shape), torch.randn(k_shape)
    positions = torch.tensor([[0, 1, 2, 3, 4, 5, 6, 7, 8], [3, 4, 5, 6, 7, 8, 9, 10, 11]])
    rq, rk = module.apply(q, k, positions)
    torch.testing.assert_close(rq, module(q, positions), rtol=0, atol=0)
    torch.testing.assert_close(rk, module(k, positions), rtol=0, atol=0)
    with pytest.raises(ValueError, match="same sequence length"):
        module.apply(q, k.narrow(heads_axis + (1 if layout == "bhsd" else -1), 0, 5))


@pytest.mark.parametrize("pairing", ["half", "interleaved"])
def test_cos_sin_in_hugging_face_form(pairing):
    module = pt.RotaryEmbedding(12, pairing=pairing, rotary_dim=8, attention_scale=1.5)
    positions = torch.tensor([[0, 5, 9], [2, 3, 4]])
    cos, _ = module.cos_sin(positions, torch.float64)
    assert cos.shape == (2, 3, 4)
    hf_cos, hf_sin = module.cos_sin(positions, torch.float64, hf_format=True)
    assert hf_cos.shape == (2, 3, 8)
    angles = positions[..., None].double() * torch.from_numpy(module.frequencies)
    if pairing == "half":  # [θ_0 .. θ_3, θ_0 .. θ_3], as rotate_half expects
        angles = torch.cat((angles, angles), dim=-1)
    else:  # θ_0, θ_0, θ_1, θ_1, ...
        angles = angles.repeat_interleave(2, dim=-1)
    torch.testing.assert_close(hf_cos, 1.5 * angles.cos(), rtol=0, atol=1e-15)
    torch.testing.assert_close(hf_sin, 1.5 * angles.sin(), rtol=0, atol=1e-15)
    # a (seq,) tensor counts as (1, seq), as a rotary module's output for one sequence
    one, _ = module.cos_sin(positions[1], torch.float64, hf_format=True)
    assert one.shape == (1, 3, 8)
    torch.testing.assert_close(one[0], hf_cos[1], rtol=0, atol=0)


@pytest.mark.parametrize(
    ("positions", "dtype", "error", "pattern"),
    [
        (torch.arange(4), torch.int64, TypeError, "dtype must be a floating-point.*int64"),
        (torch.arange(4.0), None, TypeError, "positions must be integers.*float32"),
        (np.array([0.5, 1.5]), None, TypeError, "positions must be integers.*float64"),
        (torch.tensor([3, -2]), None, ValueError, "positions must be >= 0, got -2"),
        (torch.tensor([2**53]), None, ValueError, r"< 2\*\*53.*9007199254740992"),
        (np.array([2**63], dtype=np.uint64), None, ValueError, r"< 2\*\*53"),
    ],
)
def test_cos_sin_refuses_what_it_cannot_compute(positions, dtype, error, pattern):
    with pytest.raises(error, match=pattern):
        pt.RotaryEmbedding(8).cos_sin(positions, dtype)


def test_the_largest_exact_position_is_accepted_and_exact():
    module = pt.RotaryEmbedding(4, base=10000.0)
    position = 2**53 - 1
    cos, sin = module.cos_sin(torch.tensor([position]), torch.float64)
    assert torch.isfinite(cos).all() and torch.isfinite(sin).all()
    with pytest.raises(ValueError, match=r"< 2\*\*53"):
        module(torch.randn(1, 1, 1, 4), torch.tensor([2**53]))


def test_an_empty_sequence_gives_an_empty_result():
    module = pt.RotaryEmbedding(8)
    x = torch.randn(2, 3, 0, 8)
    for positions in (
        None,
        torch.zeros(0, dtype=torch.int64),
        torch.zeros(2, 0, dtype=torch.int64),
    ):
        got = module(x, positions)
        assert got.shape == x.shape
    cos, sin = module.cos_sin(torch.zeros(0, dtype=torch.int64), torch.float32)
    assert cos.shape == sin.shape == (0, 4)


class _Recorder(torch.utils._python_dispatch.TorchDispatchMode):
    """Every aten operation run, with the devices of its tensor inputs and outputs."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        tensors = [a for a in (*args, *(kwargs or {}).values()) if isinstance(a, torch.Tensor)]
        outs = out if isinstance(out, tuple | list) else (out,)
        devices = {t.device.type for t in (*tensors, *outs) if isinstance(t, torch.Tensor)}
        self.ops.append((str(func), devices))
        return out


@pytest.mark.parametrize("pairing", ["half", "interleaved"])
@pytest.mark.parametrize("positions", [None, "batch"])
def test_on_a_device_forward_never_reads_a_value_back(pairing, positions):
    # The meta device stands in for an accelerator: the same code path, no values.
    # Reading a value back (int(), .item(), .cpu()) would show up as
    # aten._local_scalar_dense or as a copy to the CPU; neither may happen.
    module = pt.RotaryEmbedding(16, pairing=pairing)
    x = torch.randn(2, 4, 9, 16, device="meta")
    table = None if positions is None else torch.zeros(2, 9, dtype=torch.int64, device="meta")
    module(x, table)  # constants reach the device once
    with _Recorder() as recorder:
        y = module(x, table)
        module.apply(x, x, table)
    assert y.shape == x.shape and y.device.type == "meta"
    names = [name for name, _ in recorder.ops]
    assert "aten._local_scalar_dense.default" not in names
    assert all(devices == {"meta"} for _, devices in recorder.ops), recorder.ops
    if table is not None:
        assert "aten._assert_async.msg" in names  # positions checked on the device


def test_reading_a_value_back_is_what_the_recorder_catches():
    # The check above can fail: a forward that calls int() on a device tensor is seen.
    x = torch.randn(3, device="meta")
    with _Recorder() as recorder:
        torch.zeros(2)  # a CPU tensor made inside the region
        x.sum()
    assert any(devices != {"meta"} for _, devices in recorder.ops)


def test_the_cpu_path_issues_a_few_operations_whatever_the_number_of_heads():
    # Each parallel operation waits for every thread; their number must not grow with
    # batch * heads (8,192 heads here), only with the length, one block per 2,048.
    for pairing, per_block in (("half", 3), ("interleaved", 1)):
        module = pt.RotaryEmbedding(16, pairing=pairing)
        x = torch.randn(256, 32, 16, 16)
        module(x)  # tables cached
        with torch.no_grad(), _Recorder() as recorder:
            module(x)
        arithmetic = [n for n, _ in recorder.ops if n.startswith(("aten.mul", "aten.addcmul"))]
        assert len(arithmetic) == per_block, (pairing, arithmetic)
        long = torch.randn(1, 2, 5000, 16)
        module(long)
        with torch.no_grad(), _Recorder() as recorder:
            module(long)
        arithmetic = [n for n, _ in recorder.ops if n.startswith(("aten.mul", "aten.addcmul"))]
        assert len(arithmetic) == 3 * per_block  # 5,000 positions: three blocks


# --- the fused kernel's place in forward (run in Triton's interpreter on the CPU) ------


@pytest.fixture
def through_the_kernel(monkeypatch):
    """RotaryEmbedding routed to posenc.rotary_triton as on CUDA, in the interpreter."""
    pytest.importorskip("triton")
    import posenc.rotary as rotary
    from posenc import rotary_triton

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    calls = []
    real = rotary_triton.rotate

    def counted(*args, **kwargs):
        calls.append(kwargs.get("layout"))
        return real(*args, **kwargs)

    monkeypatch.setattr(rotary_triton, "rotate", counted)
    monkeypatch.setattr(
        rotary,
        "_use_triton",
        lambda x: x.dim() == 4 and x.dtype != torch.float64 and x.stride(-1) == 1,
    )
    return calls


@pytest.mark.parametrize("pairing", ["half", "interleaved"])
@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
@pytest.mark.parametrize("positions", [None, "shared", "batch", "batch_of_one"])
def test_the_kernel_path_gives_the_formula_and_its_gradient(
    through_the_kernel, pairing, layout, positions
):
    table = {
        None: None,
        "shared": torch.arange(100, 109),
        "batch": torch.stack((torch.arange(9), torch.arange(999_990, 999_999))),
        "batch_of_one": torch.arange(5, 14)[None],
    }[positions]
    module = pt.RotaryEmbedding(16, pairing=pairing, rotary_dim=12, layout=layout)
    shape = (2, 3, 9, 16) if layout == "bhsd" else (2, 9, 3, 16)
    x = torch.randn(shape, dtype=torch.float64)
    weights = torch.randn(shape, dtype=torch.float64)
    # the kernel in float32; the reference: the formula in float64
    x32 = x.float().requires_grad_()
    got = module(x32, table)
    (got.double() * weights).sum().backward()
    assert through_the_kernel == [layout, layout]  # forward, then backward
    x64 = x.clone().requires_grad_()
    want = module(x64, table)
    (want * weights).sum().backward()
    # float32 cos and sin from float64 angles, then float32 arithmetic
    bound = float32_bound(x) + 2**-24 * float(x.abs().max())
    assert (got.double() - want).abs().max() <= bound
    grad_bound = float32_bound(weights) + 2**-24 * float(weights.abs().max())
    assert (x32.grad.double() - x64.grad).abs().max() <= grad_bound


def test_the_kernel_path_for_dynamic_ntk_uses_the_grown_speeds(through_the_kernel):
    params = {"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0}
    config = {"rope_parameters": params, "head_dim": 16, "max_position_embeddings": 16}
    module = pt.RotaryEmbedding.from_config(config)
    x = torch.randn(1, 2, 24, 16)
    positions = torch.arange(24)
    eager = pt.RotaryEmbedding(16, frequencies=module.frequencies_at(24))
    want = eager(x.double(), positions)
    for table in (None, positions):
        got = module(x, table)
        assert (got.double() - want).abs().max() <= 2 * float32_bound(x)
    assert len(through_the_kernel) == 2


def test_apply_sends_k_its_own_way_when_the_kernel_cannot_take_it(through_the_kernel):
    module = pt.RotaryEmbedding(16)
    q = torch.randn(2, 4, 9, 16)
    k = torch.randn(2, 9, 2, 16).transpose(1, 2)  # a view: fine
    odd = torch.randn(2, 2, 9, 32)[..., ::2]  # last axis strided: the kernel refuses it
    positions = torch.arange(9)
    for key in (k, odd):
        rq, rk = module.apply(q, key, positions)
        torch.testing.assert_close(rk, module(key.double(), positions).float())
        torch.testing.assert_close(rq, module(q.double(), positions).float())


@pytest.mark.parametrize("dtype", [torch.int16, torch.uint8, torch.int32])
def test_the_kernel_path_takes_every_integer_dtype_the_module_takes(through_the_kernel, dtype):
    module = pt.RotaryEmbedding(8)
    x = torch.randn(1, 2, 5, 8)
    positions = torch.tensor([[3, 4, 5, 6, 7]], dtype=dtype)
    want = module(x.double(), positions.to(torch.int64)).float()
    torch.testing.assert_close(module(x, positions), want)


def test_the_kernel_path_has_a_second_derivative(through_the_kernel):
    # y = R x is linear; g = dL/dx = R^T w for L = <R x, w>, and d<g, v>/dw = R v.
    module = pt.RotaryEmbedding(8, rotary_dim=6)
    x = torch.randn(1, 2, 5, 8, requires_grad=True)
    w = torch.randn(1, 2, 5, 8, requires_grad=True)
    v = torch.randn(1, 2, 5, 8)
    (g,) = torch.autograd.grad((module(x) * w).sum(), x, create_graph=True)
    assert g.requires_grad
    (g * v).sum().backward()
    torch.testing.assert_close(w.grad, module(v.double()).float(), rtol=0, atol=1e-5)


LONG_ROPE = {"rope_type": "longrope", "short_factor": [1.0, 2.0], "long_factor": [3.0, 4.0]}


@pytest.mark.parametrize(
    ("rope", "length"),
    [
        ({"rope_type": "dynamic", "factor": 2.0}, 40),
        ({"rope_type": "dynamic", "factor": 2.0}, 16),
        (LONG_ROPE, 40),
        (LONG_ROPE, 16),
    ],
)
def test_length_dependent_speeds_for_a_whole_sequence_stay_on_the_device(rope, length):
    # positions=None on an accelerator: the speeds for the length are chosen or
    # computed on the device from cached constants, never copied from the host per call.
    config = {
        "rope_parameters": {"rope_theta": 10000.0, **rope},
        "head_dim": 4,
        "max_position_embeddings": 16,
        "original_max_position_embeddings": 16,
    }
    module = pt.RotaryEmbedding.from_config(config)
    host = module.frequencies_at(length)
    on_cpu = module._theta_for_length(length, torch.device("cpu")).numpy()
    np.testing.assert_allclose(on_cpu, host, rtol=1e-15)
    meta = torch.device("meta")
    module._theta_for_length(length, meta)  # constants reach the device once
    with _Recorder() as recorder:
        theta = module._theta_for_length(length, meta)
    assert theta.device == meta and theta.shape == (2,)
    assert all(devices == {"meta"} for _, devices in recorder.ops), recorder.ops


@pytest.mark.parametrize(
    "values, ok",
    [
        ([0, 5, 2**53 - 1], True),
        ([0, -1, 5], False),
        ([2**53], False),
        ([2**62, 3], False),
        ([-(2**63)], False),
        ([-(2**53)], False),
    ],
)
def test_the_device_range_check_is_exactly_zero_to_two_to_the_53(values, ok):
    # what the accelerator path asserts without waiting for the device
    from posenc.rotary import _in_range

    assert bool(_in_range(torch.tensor(values, dtype=torch.int64))) is ok
    small = [v for v in values if -(2**31) <= v < 2**31]
    if small:
        assert bool(_in_range(torch.tensor(small, dtype=torch.int32))) is (min(small) >= 0)
