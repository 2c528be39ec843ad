"""posenc.torch.RotaryEmbedding: RoPE applied to queries and keys, in PyTorch."""

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
