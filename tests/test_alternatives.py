"""posenc.alternatives: RoPE, ALiBi, T5 buckets, Shaw's clipped offsets, the causal mask."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from posenc import layout_permutation
from posenc.alternatives import (
    PAIRINGS,
    alibi_bias,
    alibi_slopes,
    causal_mask,
    rope,
    rope_frequencies,
    shaw_relative_index,
    t5_bias,
    t5_relative_position_bucket,
)
from posenc.attention import scaled_dot_product_attention
from posenc.properties import rotation_matrix


def _random(shape, seed=0, dtype=np.float64):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


# --- RoPE ---------------------------------------------------------------------------------


def test_rope_rotates_each_interleaved_pair_as_roformer_writes_it():
    x = _random((5, 6))
    out = rope(x, base=100.0)
    for p in range(5):
        for i in range(3):
            angle = p * 100.0 ** (-2 * i / 6)
            x0, x1 = x[p, 2 * i], x[p, 2 * i + 1]
            assert out[p, 2 * i] == pytest.approx(x0 * math.cos(angle) - x1 * math.sin(angle))
            assert out[p, 2 * i + 1] == pytest.approx(x0 * math.sin(angle) + x1 * math.cos(angle))


def test_rope_half_pairing_rotates_i_with_i_plus_half():
    x = _random((4, 8))
    out = rope(x, pairing="half")
    theta = rope_frequencies(8)
    for p in range(4):
        for i in range(4):
            c, s = math.cos(p * theta[i]), math.sin(p * theta[i])
            assert out[p, i] == pytest.approx(x[p, i] * c - x[p, i + 4] * s)
            assert out[p, i + 4] == pytest.approx(x[p, i] * s + x[p, i + 4] * c)


@pytest.mark.parametrize("d", [2, 4, 64, 130])
def test_rope_pairings_are_equal_up_to_the_layout_permutation(d):
    x = _random((3, 7, d), seed=d)
    perm = layout_permutation(d)
    # The same map; computed in other orders (a complex product for interleaved pairs),
    # so equal up to a rounding or two of each output.
    np.testing.assert_allclose(
        rope(x[..., perm], pairing="half"), rope(x)[..., perm], rtol=0, atol=1e-14
    )
    if d > 2:  # (with one pair the two layouts are the same)
        assert not np.allclose(rope(x[..., perm]), rope(x)[..., perm])


@pytest.mark.parametrize("pairing", ["interleaved", "half"])
def test_rope_preserves_norms(pairing):
    x = _random((2, 50, 16))
    out = rope(x, positions=np.arange(1000, 1050), pairing=pairing)
    np.testing.assert_allclose(np.linalg.norm(out, axis=-1), np.linalg.norm(x, axis=-1), rtol=1e-13)


@pytest.mark.parametrize("pairing", ["interleaved", "half"])
@given(m=st.integers(0, 5000), n=st.integers(0, 5000), shift=st.integers(0, 5000))
def test_rope_scores_depend_only_on_the_offset(pairing, m, n, shift):
    q, k = _random((1, 32), seed=1), _random((1, 32), seed=2)
    score = rope(q, [m], pairing=pairing) @ rope(k, [n], pairing=pairing).T
    shifted = rope(q, [m + shift], pairing=pairing) @ rope(k, [n + shift], pairing=pairing).T
    np.testing.assert_allclose(shifted, score, atol=1e-9)


def test_rope_scores_change_with_the_offset():
    q, k = _random((1, 32), seed=1), _random((1, 32), seed=2)
    scores = [(rope(q, [10]) @ rope(k, [10 - j]).T).item() for j in range(8)]
    assert min(abs(a - b) for a, b in itertools.pairwise(scores)) > 1e-3


def test_rope_at_position_zero_is_the_identity_and_positions_default_to_arange():
    x = _random((6, 8))
    assert np.array_equal(rope(x[:1]), x[:1])
    assert np.array_equal(rope(x), rope(x, positions=np.arange(6)))


def test_rope_is_the_transpose_of_chapter_6_rotation_on_each_row():
    # PE[p + k] = M_k PE[p] rotates (sin, cos) pairs; RoPE rotates (x0, x1) the other way.
    x = _random((1, 8))
    k = 37
    np.testing.assert_allclose(rope(x, [k]), x @ rotation_matrix(k, 8), atol=1e-12)


def test_rope_positions_broadcast_over_heads_and_may_differ_per_batch():
    x = _random((2, 3, 5, 4))
    positions = np.array([[0, 1, 2, 3, 4], [7, 8, 9, 10, 11]])[:, None, :]
    out = rope(x, positions)
    np.testing.assert_allclose(out[1], rope(x[1], np.arange(7, 12)), rtol=0, atol=1e-14)
    np.testing.assert_allclose(out[0, 2], rope(x[0, 2]), rtol=0, atol=1e-14)
    assert not np.allclose(out[1], rope(x[1]))  # batch 1 did get its own positions


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_rope_keeps_the_dtype_and_rounds_the_angle_once(dtype):
    x = _random((300, 16), dtype=dtype)
    out = rope(x, positions=np.arange(300) * 1000)
    assert out.dtype == dtype
    exact = rope(x.astype(np.float64), positions=np.arange(300) * 1000)
    np.testing.assert_allclose(out, exact, atol=8 * float(np.finfo(dtype).eps))


def test_rope_refuses_bad_input():
    with pytest.raises(ValueError, match=r"even.*d=7"):
        rope(np.zeros((3, 7)))
    with pytest.raises(ValueError, match=r"d=0"):
        rope(np.zeros((3, 0)))
    with pytest.raises(ValueError, match=r"at least 2 dimensions"):
        rope(np.zeros(8))
    with pytest.raises(TypeError, match=r"x must be a floating-point array"):
        rope(np.zeros((3, 8), dtype=int))
    with pytest.raises(ValueError, match=r"positions must have shape .*got \(4,\)"):
        rope(np.zeros((3, 8)), positions=np.arange(4))
    with pytest.raises(ValueError, match=r"positions must have shape"):
        rope(np.zeros((2, 3, 8)), positions=np.zeros((3, 3), dtype=int))
    with pytest.raises(TypeError, match=r"positions must be integers"):
        rope(np.zeros((3, 8)), positions=np.arange(3.0))
    with pytest.raises(ValueError, match=r"pairing must be one of"):
        rope(np.zeros((3, 8)), pairing="concat")
    with pytest.raises(ValueError, match=r"base must be finite and > 0"):
        rope(np.zeros((3, 8)), base=0.0)
    with pytest.raises(ValueError, match=r"d must be even"):
        rope_frequencies(5)


# --- ALiBi --------------------------------------------------------------------------------


def test_alibi_slopes_for_eight_heads_are_the_papers_geometric_sequence():
    assert np.array_equal(alibi_slopes(8), 0.5 ** np.arange(1, 9))
    assert np.array_equal(alibi_slopes(16), 2.0 ** (-0.5 * np.arange(1, 17)))
    assert np.array_equal(alibi_slopes(1), [2.0**-8])


def test_alibi_slopes_for_other_head_counts_follow_the_reference_scheme():
    # 6 heads: the 4 slopes of 4 heads, then slopes 1 and 3 of 8 heads.
    assert np.array_equal(alibi_slopes(6), [2**-2, 2**-4, 2**-6, 2**-8, 2**-1, 2**-3])
    # 12 heads: the 8 of 8 heads, then the odd-numbered four of 16 heads.
    eight, sixteen = alibi_slopes(8), alibi_slopes(16)
    assert np.array_equal(alibi_slopes(12), np.concatenate([eight, sixteen[0:8:2]]))
    assert np.array_equal(alibi_slopes(3), [2**-4, 2**-8, 2**-2])


@pytest.mark.parametrize("n", [1, 2, 3, 5, 7, 12, 20, 31, 64, 96])
def test_alibi_slopes_are_distinct_and_in_range(n):
    slopes = alibi_slopes(n)
    assert slopes.shape == (n,)
    assert len(set(slopes.tolist())) == n
    assert np.all((slopes > 0) & (slopes < 1))


def test_alibi_bias_values_causal_and_not():
    bias = alibi_bias(2, 4)
    slopes = alibi_slopes(2)
    for h in range(2):
        for i in range(4):
            for j in range(4):
                expected = -slopes[h] * (i - j) if j <= i else -np.inf
                assert bias[h, i, j] == expected
    both = alibi_bias(2, 4, causal=False)
    i, j = np.indices((4, 4))
    assert np.array_equal(both, -slopes[:, None, None] * np.abs(i - j))
    assert not np.signbit(both[:, 0, 0]).any()  # no -0.0 on the diagonal


def test_alibi_bias_with_a_longer_key_sequence_puts_queries_at_the_end():
    full = alibi_bias(4, 10)
    assert np.array_equal(alibi_bias(4, 3, 10), full[:, 7:, :])
    assert alibi_bias(4, 1, 10).shape == (4, 1, 10)
    assert np.isfinite(alibi_bias(4, 1, 10)).all()


def test_alibi_bias_in_attention_equals_the_cheaper_m_times_j_form():
    q, k, v = (_random((4, 9, 8), seed=s) for s in range(3))
    slopes = alibi_slopes(4)
    _, weights = scaled_dot_product_attention(q, k, v, bias=alibi_bias(4, 9))
    cheap = slopes[:, None, None] * np.arange(9)[None, None, :] + np.zeros((4, 9, 9))
    _, cheap_weights = scaled_dot_product_attention(q, k, v, bias=cheap, mask=causal_mask(9))
    np.testing.assert_allclose(weights, cheap_weights, atol=1e-12)


def test_alibi_refuses_bad_input():
    with pytest.raises(ValueError, match=r"n_heads must be at least 1, got 0"):
        alibi_slopes(0)
    with pytest.raises(TypeError, match=r"n_heads must be an integer"):
        alibi_slopes(8.0)
    with pytest.raises(ValueError, match=r"n_heads must be at least 1"):
        alibi_bias(-1, 4)
    with pytest.raises(ValueError, match=r"k_len must be at least q_len, got q_len=5, k_len=3"):
        alibi_bias(2, 5, 3)
    with pytest.raises(ValueError, match=r"q_len must be at least 1"):
        alibi_bias(2, 0)
    with pytest.raises(TypeError, match=r"causal must be True or False"):
        alibi_bias(2, 4, causal=1)


def test_causal_mask():
    assert np.array_equal(causal_mask(3), [[1, 0, 0], [1, 1, 0], [1, 1, 1]])
    assert causal_mask(2, 4).tolist() == [[True, True, True, False], [True] * 4]


# --- T5 buckets ---------------------------------------------------------------------------


def test_t5_buckets_for_the_default_configuration():
    # 16 buckets per direction: distances 0..7 exact, then log-spaced up to 128.
    past = t5_relative_position_bucket(-np.arange(200))
    assert np.array_equal(past[:8], np.arange(8))
    first = [int(np.argmax(past == b)) for b in range(8, 16)]
    # bucket 8 + b starts at the first distance >= 8 * 16 ** (b / 8)
    assert first == [8, 12, 16, 23, 32, 46, 64, 91]
    assert np.all(past[91:] == 15)
    future = t5_relative_position_bucket(np.arange(1, 200))
    assert np.array_equal(future, past[1:] + 16)


def test_t5_unidirectional_gives_every_future_key_bucket_zero():
    offsets = np.arange(-300, 301)
    buckets = t5_relative_position_bucket(offsets, bidirectional=False)
    assert np.all(buckets[offsets >= 0] == 0)
    assert np.array_equal(buckets[offsets <= 0][::-1][:16], np.arange(16))
    assert buckets.max() == 31


@given(
    num_buckets=st.integers(4, 64),
    max_distance=st.integers(40, 500),
    bidirectional=st.booleans(),
)
def test_t5_buckets_are_monotone_in_distance_capped_and_in_range(
    num_buckets, max_distance, bidirectional
):
    per_side = num_buckets // 2 if bidirectional else num_buckets
    if max_distance <= per_side // 2:
        return
    offsets = np.arange(0, 2 * max_distance + 5)
    past = t5_relative_position_bucket(
        -offsets, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance
    )
    assert np.all(np.diff(past) >= 0)
    assert past.min() == 0 and past.max() <= per_side - 1
    assert np.all(past[offsets >= max_distance] == per_side - 1)
    exact = per_side // 2
    assert np.array_equal(past[:exact], np.arange(exact))


def test_t5_bias_looks_up_the_table_by_bucket():
    table = _random((32, 3))
    bias = t5_bias(table, 5, 7)
    offsets = np.arange(7)[None, :] - np.arange(2, 7)[:, None]
    assert np.array_equal(bias, np.moveaxis(table[t5_relative_position_bucket(offsets)], -1, 0))
    assert bias.shape == (3, 5, 7)


def test_t5_refuses_bad_input():
    with pytest.raises(TypeError, match=r"relative_position must be integers"):
        t5_relative_position_bucket(np.array([1.0]))
    with pytest.raises(ValueError, match=r"num_buckets must be at least 4"):
        t5_relative_position_bucket(3, num_buckets=2)
    with pytest.raises(ValueError, match=r"max_distance must exceed the 8"):
        t5_relative_position_bucket(3, max_distance=8)
    with pytest.raises(ValueError, match=r"table must have shape \(num_buckets, n_heads\)"):
        t5_bias(np.zeros(32), 4)
    with pytest.raises(TypeError, match=r"bidirectional must be True or False"):
        t5_relative_position_bucket(3, bidirectional="yes")


# --- Shaw ---------------------------------------------------------------------------------


def test_shaw_index_clips_offsets():
    index = shaw_relative_index(4, max_distance=2)
    assert index.tolist() == [[2, 3, 4, 4], [1, 2, 3, 4], [0, 1, 2, 3], [0, 0, 1, 2]]
    assert np.array_equal(
        shaw_relative_index(2, 4, max_distance=2), shaw_relative_index(4, max_distance=2)[2:]
    )
    assert np.all(shaw_relative_index(6, max_distance=0) == 0)


def test_shaw_refuses_bad_input():
    with pytest.raises(ValueError, match=r"max_distance must be at least 0"):
        shaw_relative_index(4, max_distance=-1)
    with pytest.raises(TypeError, match=r"q_len must be an integer"):
        shaw_relative_index(4.0, max_distance=2)


@pytest.mark.parametrize("pairing", PAIRINGS)
def test_partial_rotary_rotates_the_first_features_and_passes_the_rest(pairing):
    x = np.random.default_rng(5).normal(size=(2, 6, 16))
    positions = np.array([[0, 3, 9, 40, 41, 1000]])
    out = rope(x, positions, pairing=pairing, rotary_dim=4)
    # The first four features are a 4-wide RoPE of their own (frequencies base^(-2i/4)) ...
    assert np.array_equal(out[..., :4], rope(x[..., :4], positions, pairing=pairing))
    assert not np.allclose(out[..., :4], x[..., :4])
    # ... and the other twelve are untouched.
    assert np.array_equal(out[..., 4:], x[..., 4:])
    assert np.array_equal(
        rope(x, positions, pairing=pairing, rotary_dim=16), rope(x, positions, pairing=pairing)
    )


def test_partial_rotary_refuses_a_width_it_cannot_rotate():
    for bad in (3, 18, 0):
        with pytest.raises(ValueError, match="rotary_dim"):
            rope(np.zeros((3, 16)), rotary_dim=bad)
    with pytest.raises(TypeError, match="rotary_dim"):
        rope(np.zeros((3, 16)), rotary_dim=4.0)


# --- The forms chapter 8 teaches: complex numbers, rotate_half, weight permutation -------


@pytest.mark.parametrize("base", [10000.0, 500.0])
def test_rope_interleaved_is_a_product_with_a_complex_exponential(base):
    # Meta's LLaMA form: neighbours (x_2i, x_2i+1) as x_2i + j x_2i+1, times e^{j p theta_i}.
    x, positions = _random((9, 32), seed=3), np.arange(100, 109)
    z = x[:, 0::2] + 1j * x[:, 1::2]
    z = z * np.exp(1j * positions[:, None] * rope_frequencies(32, base=base))
    out = rope(x, positions, base=base)
    np.testing.assert_allclose(out[:, 0::2], z.real, rtol=0, atol=1e-12)
    np.testing.assert_allclose(out[:, 1::2], z.imag, rtol=0, atol=1e-12)


def test_rope_half_is_the_rotate_half_form_of_gpt_neox():
    def rotate_half(v):
        return np.concatenate([-v[..., 4:], v[..., :4]], axis=-1)

    x, positions = _random((6, 8), seed=4), np.arange(6) * 37
    angles = positions[:, None] * rope_frequencies(8)
    angles = np.concatenate([angles, angles], axis=-1)  # cat((freqs, freqs))
    neox = x * np.cos(angles) + rotate_half(x) * np.sin(angles)
    np.testing.assert_allclose(rope(x, positions, pairing="half"), neox, rtol=0, atol=1e-14)


@pytest.mark.parametrize(("n_heads", "head_dim"), [(1, 8), (3, 16), (4, 64)])
def test_hf_llama_permute_lets_the_half_pairing_give_the_interleaved_scores(n_heads, head_dim):
    # convert_llama_weights_to_hf.permute: w.view(n_heads, head_dim // 2, 2, dim).transpose(1, 2)
    dim = n_heads * head_dim
    w_q, w_k = _random((dim, dim), seed=5), _random((dim, dim), seed=6)
    tokens = _random((7, dim), seed=7)

    def permute(w):
        return w.reshape(n_heads, head_dim // 2, 2, dim).transpose(0, 2, 1, 3).reshape(dim, dim)

    order = np.concatenate([h * head_dim + layout_permutation(head_dim) for h in range(n_heads)])
    assert np.array_equal(permute(w_q), w_q[order])
    for h in range(n_heads):
        rows = np.s_[:, h * head_dim : (h + 1) * head_dim]

        def scores(wq, wk, pairing, rows=rows):
            q, k = (tokens @ wq.T)[rows], (tokens @ wk.T)[rows]
            return rope(q, pairing=pairing) @ rope(k, pairing=pairing).T

        meta = scores(w_q, w_k, "interleaved")
        np.testing.assert_allclose(scores(permute(w_q), permute(w_k), "half"), meta, atol=1e-9)
        if head_dim > 2:  # with one pair per head the two pairings coincide
            assert not np.allclose(scores(permute(w_q), permute(w_k), "interleaved"), meta)


def test_rope_scores_of_unit_pairs_are_the_sinusoid_offset_dot_product():
    from posenc.properties import offset_dot_product

    phase = np.random.default_rng(8).uniform(0, 2 * np.pi, size=16)
    unit = np.empty(32)
    unit[0::2], unit[1::2] = np.cos(phase), np.sin(phase)
    positions = np.arange(0, 3000, 11)
    rotated = rope(np.tile(unit, (positions.size, 1)), positions)
    offsets = positions[None, :] - positions[:, None]
    np.testing.assert_allclose(rotated @ rotated.T, offset_dot_product(offsets, 32), atol=1e-10)


@pytest.mark.parametrize("pairing", PAIRINGS)
def test_partial_rotary_score_is_a_rope_score_plus_a_position_free_term(pairing):
    q, k = _random((1, 96), seed=9), _random((1, 96), seed=10)
    free = (q[:, 24:] @ k[:, 24:].T).item()
    for m, n in [(0, 5), (900, 905), (7, 3), (2048, 0)]:
        score = (
            rope(q, [m], pairing=pairing, rotary_dim=24)
            @ rope(k, [n], pairing=pairing, rotary_dim=24).T
        )
        rotated = rope(q[:, :24], [m], pairing=pairing) @ rope(k[:, :24], [n], pairing=pairing).T
        assert score.item() == pytest.approx(rotated.item() + free, abs=1e-12)


def _t5_rule(offset, bidirectional, num_buckets, max_distance):
    """T5's bucket rule stated in words, in exact integer arithmetic."""
    side = num_buckets // 2 if bidirectional else num_buckets
    r = abs(offset) if bidirectional else max(-offset, 0)
    exact, ratio = side // 2, max_distance // (side // 2)
    # bucket exact + t starts at the first distance r >= exact * ratio ** (t / exact)
    t = sum(r**exact >= exact**exact * ratio**s for s in range(1, exact))
    shift = side if bidirectional and offset > 0 else 0
    return shift + (r if r < exact else exact + t)


@pytest.mark.parametrize(("num_buckets", "max_distance"), [(32, 128), (64, 256), (16, 64)])
@pytest.mark.parametrize("bidirectional", [True, False])
def test_t5_buckets_follow_the_rule_in_words(num_buckets, max_distance, bidirectional):
    offsets = np.arange(-3 * max_distance, 3 * max_distance + 1)
    rule = [_t5_rule(int(o), bidirectional, num_buckets, max_distance) for o in offsets]
    buckets = t5_relative_position_bucket(
        offsets, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance
    )
    assert np.array_equal(buckets, rule)


def test_alibi_slopes_follow_the_recursive_rule_of_the_papers_code():
    def rule(n):
        if n & (n - 1) == 0:
            return [2 ** (-8 * h / n) for h in range(1, n + 1)]
        p = 2 ** (n.bit_length() - 1)
        return rule(p) + rule(2 * p)[0::2][: n - p]

    for n in range(1, 129):
        np.testing.assert_allclose(alibi_slopes(n), rule(n), rtol=1e-15, atol=0)


@pytest.mark.parametrize("m, n", [(0, 0), (7, 12), (12, 7), (1000, 3), (-5, 40)])
def test_rope_score_is_chapter_6_look_ahead_head_for_the_offset(m, n):
    """rope(x, [m]) = x M_m, so the score is q M_{n-m}^T k^T (chapter 8)."""
    from posenc import sinusoidal

    d = 16
    q, k = _random((1, d), seed=11), _random((1, d), seed=12)
    score = (rope(q, [m]) @ rope(k, [n]).T).item()
    head = rotation_matrix(n - m, d).T
    assert score == pytest.approx((q @ head @ k.T).item(), abs=1e-12)
    # RoPE turns the opposite way from the table's shift: PE(0) goes to PE(-m).
    angles = -m * rope_frequencies(d)  # the sinusoid's frequencies
    pe_back = np.ravel(np.column_stack([np.sin(angles), np.cos(angles)]))  # PE(-m)
    np.testing.assert_allclose(rope(sinusoidal(1, d), [m])[0], pe_back, atol=1e-12)


def test_rope_refuses_batch_positions_that_would_land_on_the_heads_axis():
    # (batch, seq) positions for x of shape (batch, heads, seq, d): NumPy would align
    # them with (heads, seq), silently wrong when batch == heads.
    x = _random((2, 2, 5, 8), seed=4)
    positions = np.array([[0, 1, 2, 3, 4], [7, 8, 9, 10, 11]])
    with pytest.raises(ValueError, match=r"ambiguous.*positions\[:, None, :\]"):
        rope(x, positions)
    per_sequence = rope(x, positions[:, None, :])
    for b in range(2):
        np.testing.assert_allclose(per_sequence[b], rope(x[b], positions[b]), rtol=0, atol=1e-14)


def test_numpy_functions_refuse_torch_tensors_and_point_at_posenc_torch():
    torch = pytest.importorskip("torch")
    x = torch.zeros((4, 8), requires_grad=True)
    for call in (lambda: rope(x), lambda: rope(np.zeros((4, 8)), torch.arange(4))):
        with pytest.raises(TypeError, match=r"is a torch tensor.*posenc\.torch"):
            call()


def _t5_reference(relative, bidirectional, num_buckets, max_distance, log):
    """T5's bucket as Hugging Face's PyTorch port computes it, in float32, with ``log``
    for the float32 logarithm (torch's own, or a correctly rounded one)."""
    torch = pytest.importorskip("torch")
    relative = torch.as_tensor(relative)
    buckets = torch.zeros_like(relative)
    if bidirectional:
        num_buckets //= 2
        buckets += (relative > 0).to(torch.long) * num_buckets
        relative = torch.abs(relative)
    else:
        relative = -torch.min(relative, torch.zeros_like(relative))
    exact = num_buckets // 2
    scaled = log(relative.float() / exact) / math.log(max_distance / exact)
    large = exact + (scaled * (num_buckets - exact)).to(torch.long)
    large = torch.min(large, torch.full_like(large, num_buckets - 1))
    return (buckets + torch.where(relative < exact, relative, large)).numpy()


def _correctly_rounded_log(values):
    torch = pytest.importorskip("torch")
    with np.errstate(divide="ignore"):  # log(0) for the small distances, discarded
        logs = np.log(values.numpy().astype(np.float64)).astype(np.float32)
    return torch.from_numpy(logs)


def test_t5_buckets_follow_the_float32_reference_at_exact_boundaries():
    # log(16) / log(32) * 5 is 4 exactly: float32 says bucket 4 + 4, float64 says 4 + 3
    assert t5_relative_position_bucket(-64, bidirectional=False, num_buckets=9) == 8
    float64 = 4 + math.floor(math.log(64 / 4) / math.log(128 / 4) * (9 - 4))
    assert float64 == 7
    # Every other operation as PyTorch does it: scalars, float32 rounding, truncation.
    relative = np.arange(-260, 261)
    for bidirectional in (True, False):
        for num_buckets in range(4 if bidirectional else 2, 41):
            exact = (num_buckets // 2 if bidirectional else num_buckets) // 2
            for max_distance in range(exact + 1, 200, 3):
                ours = t5_relative_position_bucket(
                    relative,
                    bidirectional=bidirectional,
                    num_buckets=num_buckets,
                    max_distance=max_distance,
                )
                reference = _t5_reference(
                    relative, bidirectional, num_buckets, max_distance, _correctly_rounded_log
                )
                assert np.array_equal(ours, reference), (bidirectional, num_buckets, max_distance)
