"""Unit tests of posenc.attention."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from posenc.attention import scaled_dot_product_attention, self_attention, softmax


def reference_attention(q, k, v, bias=None, mask=None):
    """Loop-by-loop attention straight from the formula, for one (q_len, d) problem."""
    q_len, k_len = q.shape[0], k.shape[0]
    out = np.zeros((q_len, v.shape[1]))
    weights = np.zeros((q_len, k_len))
    for i in range(q_len):
        scores = [
            float(q[i] @ k[j]) / np.sqrt(q.shape[1]) + (0.0 if bias is None else bias[i, j])
            for j in range(k_len)
        ]
        allowed = [mask is None or mask[i, j] for j in range(k_len)]
        exps = [np.exp(s) if a else 0.0 for s, a in zip(scores, allowed, strict=True)]
        total = sum(exps)
        for j in range(k_len):
            weights[i, j] = exps[j] / total
            out[i] += weights[i, j] * v[j]
    return out, weights


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def test_matches_the_formula_with_bias_and_mask(rng):
    q, k, v = rng.normal(size=(4, 3)), rng.normal(size=(6, 3)), rng.normal(size=(6, 5))
    bias = rng.normal(size=(4, 6))
    mask = rng.random((4, 6)) < 0.7
    mask[:, 0] = True
    out, weights = scaled_dot_product_attention(q, k, v, bias=bias, mask=mask)
    expected_out, expected_weights = reference_attention(q, k, v, bias, mask)
    np.testing.assert_allclose(out, expected_out, rtol=0, atol=1e-12)
    np.testing.assert_allclose(weights, expected_weights, rtol=0, atol=1e-12)
    assert np.all(weights[~mask] == 0.0)


def test_batched_and_broadcast_bias(rng):
    q = rng.normal(size=(2, 3, 4, 8))  # batch, heads, q_len, d_k
    k = rng.normal(size=(2, 3, 5, 8))
    v = rng.normal(size=(2, 3, 5, 2))
    bias = rng.normal(size=(3, 4, 5))  # one bias per head, shared by the batch
    out, weights = scaled_dot_product_attention(q, k, v, bias=bias)
    assert out.shape == (2, 3, 4, 2) and weights.shape == (2, 3, 4, 5)
    for b, h in itertools.product(range(2), range(3)):
        expected, _ = reference_attention(q[b, h], k[b, h], v[b, h], bias[h])
        np.testing.assert_allclose(out[b, h], expected, rtol=0, atol=1e-12)


def test_large_scores_do_not_overflow():
    q = np.array([[1000.0, 0.0]])
    k = np.array([[1000.0, 0.0], [-1000.0, 0.0]])
    v = np.array([[1.0], [2.0]])
    out, weights = scaled_dot_product_attention(q, k, v)
    assert np.all(np.isfinite(weights))
    np.testing.assert_array_equal(weights, [[1.0, 0.0]])
    np.testing.assert_array_equal(out, [[1.0]])


def test_minus_infinity_bias_forbids_a_key(rng):
    q, k, v = rng.normal(size=(3, 4)), rng.normal(size=(3, 4)), rng.normal(size=(3, 2))
    bias = np.where(np.tril(np.ones((3, 3), dtype=bool)), 0.0, -np.inf)
    out_bias, w_bias = scaled_dot_product_attention(q, k, v, bias=bias)
    out_mask, w_mask = scaled_dot_product_attention(q, k, v, mask=bias == 0.0)
    np.testing.assert_array_equal(w_bias, w_mask)
    np.testing.assert_array_equal(out_bias, out_mask)
    np.testing.assert_allclose(out_mask[0], v[0], rtol=0, atol=1e-15)


def test_float32_in_float32_out(rng):
    q = rng.normal(size=(3, 4)).astype(np.float32)
    out, weights = scaled_dot_product_attention(q, q, q)
    assert out.dtype == np.float32 and weights.dtype == np.float32


@settings(max_examples=60, deadline=None)
@given(
    length=st.integers(1, 7),
    d_model=st.integers(1, 6),
    d_k=st.integers(1, 5),
    seed=st.integers(0, 2**32 - 1),
)
def test_self_attention_is_permutation_equivariant(length, d_model, d_k, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(length, d_model))
    w_q, w_k, w_v = (rng.normal(size=(d_model, d_k)) for _ in range(3))
    perm = rng.permutation(length)
    out, weights = self_attention(x, w_q, w_k, w_v)
    out_perm, weights_perm = self_attention(x[perm], w_q, w_k, w_v)
    np.testing.assert_allclose(out_perm, out[perm], rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(weights_perm, weights[np.ix_(perm, perm)], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(weights.sum(axis=-1), 1.0, rtol=0, atol=1e-12)


def test_a_position_table_breaks_equivariance(rng):
    x = rng.normal(size=(5, 8))
    w_q, w_k, w_v = (rng.normal(size=(8, 4)) for _ in range(3))
    table = rng.normal(size=(5, 8))
    perm = np.array([0, 4, 2, 3, 1])
    out, _ = self_attention(x + table, w_q, w_k, w_v)
    out_perm, _ = self_attention(x[perm] + table, w_q, w_k, w_v)
    assert not np.allclose(out_perm, out[perm], atol=1e-3)


def test_softmax_rows_sum_to_one_and_all_masked_row_raises():
    weights = softmax(np.array([[0.0, 1.0, -np.inf], [3.0, 3.0, 3.0]]))
    np.testing.assert_allclose(weights.sum(axis=-1), 1.0)
    assert weights[0, 2] == 0.0
    with pytest.raises(ValueError, match=r"row \(1,\) has none"):
        softmax(np.array([[0.0, 1.0], [-np.inf, -np.inf]]))


# ---- bad input: each error names the argument and the shapes -------------------------


@pytest.mark.parametrize(
    ("shapes", "match"),
    [
        (((4, 3), (6, 2), (6, 5)), r"same feature size d_k.*q=\(4, 3\), k=\(6, 2\)"),
        (((4, 3), (6, 3), (5, 5)), r"same number of positions.*k=\(6, 3\), v=\(5, 5\)"),
        (((2, 4, 3), (3, 6, 3), (3, 6, 5)), r"leading .* axes.*q=\(2, 4, 3\), k=\(3, 6, 3\)"),
        (((3,), (6, 3), (6, 5)), r"q must have at least 2 dimensions, got shape \(3,\)"),
        (((4, 0), (6, 0), (6, 5)), r"d_k must be at least 1"),
        (((4, 3), (0, 3), (0, 5)), r"at least one key"),
    ],
)
def test_misfit_shapes_raise(shapes, match):
    q, k, v = (np.zeros(s) for s in shapes)
    with pytest.raises(ValueError, match=match):
        scaled_dot_product_attention(q, k, v)


@pytest.mark.parametrize("bias_shape", [(4, 5), (6, 4), (3, 4, 6), (4,), (1, 2, 4, 6)])
def test_misfit_bias_raises(bias_shape):
    q, k, v = np.zeros((2, 4, 3)), np.zeros((2, 6, 3)), np.zeros((2, 6, 5))
    with pytest.raises(ValueError, match=r"bias must have shape .*\(2, 4, 6\).*got"):
        scaled_dot_product_attention(q, k, v, bias=np.zeros(bias_shape))


def test_misfit_mask_raises_and_non_boolean_mask_is_refused():
    q, k, v = np.zeros((4, 3)), np.zeros((6, 3)), np.zeros((6, 5))
    with pytest.raises(ValueError, match=r"mask must have shape .*\(4, 6\).*got \(6, 4\)"):
        scaled_dot_product_attention(q, k, v, mask=np.ones((6, 4), dtype=bool))
    with pytest.raises(TypeError, match="mask must be a boolean array, got dtype int64"):
        scaled_dot_product_attention(q, k, v, mask=np.ones((4, 6), dtype=np.int64))


def test_fully_masked_row_raises():
    q, k, v = np.zeros((2, 3)), np.zeros((2, 3)), np.zeros((2, 1))
    mask = np.array([[True, False], [False, False]])
    with pytest.raises(ValueError, match=r"row \(1,\) has none"):
        scaled_dot_product_attention(q, k, v, mask=mask)


@pytest.mark.parametrize("name", ["q", "k", "v", "bias"])
def test_non_floating_arrays_are_refused(name):
    arrays = {"q": np.zeros((2, 3)), "k": np.zeros((2, 3)), "v": np.zeros((2, 3))}
    arrays["bias" if name == "bias" else name] = np.zeros((2, 3) if name != "bias" else (2, 2))
    arrays[name] = arrays[name].astype(np.int64)
    bias = arrays.pop("bias", None)
    with pytest.raises(TypeError, match=f"{name} must be a floating-point array, got dtype int64"):
        scaled_dot_product_attention(**arrays, bias=bias)


@pytest.mark.parametrize(
    ("which", "shape", "match"),
    [
        (
            "w_q",
            (5, 4),
            r"w_q must have shape \(d_model, features\) with d_model = 8.*got \(5, 4\)",
        ),
        ("w_v", (8,), r"w_v must have shape .*got \(8,\)"),
        ("w_k", (8, 3), r"w_q and w_k must have the same shape, got w_q=\(8, 4\), w_k=\(8, 3\)"),
    ],
)
def test_self_attention_misfit_projections(which, shape, match):
    rng = np.random.default_rng(0)
    weights = {name: rng.normal(size=(8, 4)) for name in ("w_q", "w_k", "w_v")}
    weights[which] = rng.normal(size=shape)
    with pytest.raises(ValueError, match=match):
        self_attention(rng.normal(size=(5, 8)), **weights)


def test_self_attention_refuses_integer_tokens():
    with pytest.raises(TypeError, match="x must be a floating-point array"):
        self_attention(np.ones((3, 2), dtype=int), *(np.ones((2, 2)) for _ in range(3)))


def test_pytorch_sdpa_is_equivariant_without_a_mask_and_not_with_a_causal_one(rng):
    """Chapter 1's claim about PyTorch's own attention, with no mask and a causal one."""
    torch = pytest.importorskip("torch")
    sdpa = torch.nn.functional.scaled_dot_product_attention
    q, k, v = (rng.normal(size=(5, 4)) for _ in range(3))
    perm = np.array([0, 4, 2, 3, 1])
    ours, _ = scaled_dot_product_attention(q, k, v)
    for causal in (False, True):
        out, out_perm = (
            sdpa(*(torch.from_numpy(a[p]) for a in (q, k, v)), is_causal=causal).numpy()
            for p in (np.arange(5), perm)
        )
        if causal:
            assert not np.allclose(out_perm, out[perm], atol=1e-3)
        else:
            np.testing.assert_allclose(out, ours, rtol=0, atol=1e-12)
            np.testing.assert_allclose(out_perm, out[perm], rtol=0, atol=1e-12)
