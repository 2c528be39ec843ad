"""posenc.long_context: each method against its published description, by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from posenc.alternatives import rope_frequencies
from posenc.long_context import scaled_frequencies


def test_none_is_ropes_frequencies():
    frequencies, scale = scaled_frequencies(16)
    assert np.array_equal(frequencies, rope_frequencies(16)) and scale == 1.0
    assert frequencies.dtype == np.float64 and frequencies.shape == (8,)


def test_linear_divides_every_frequency_by_the_factor():
    frequencies, scale = scaled_frequencies(8, method="linear", factor=4.0)
    by_hand = [1 / 4, 10000 ** (-2 / 8) / 4, 10000 ** (-4 / 8) / 4, 10000 ** (-6 / 8) / 4]
    np.testing.assert_allclose(frequencies, by_hand, rtol=1e-15)
    assert scale == 1.0


def test_ntk_keeps_the_fastest_pair_and_divides_the_slowest_by_the_factor():
    # base' = 10000 * 4^(8/6); theta_i = base'^(-2i/8)
    frequencies, _ = scaled_frequencies(8, method="ntk", factor=4.0)
    base = 10000 * 4 ** (8 / 6)
    np.testing.assert_allclose(frequencies, [base ** (-i / 4) for i in range(4)], rtol=1e-14)
    assert frequencies[0] == 1.0
    assert frequencies[-1] == pytest.approx(10000 ** (-6 / 8) / 4, rel=1e-14)


def test_dynamic_ntk_is_rope_up_to_the_original_length_then_grows_the_base():
    kwargs = {"method": "dynamic_ntk", "factor": 2.0, "original_length": 32}
    for seq_len in (1, 16, 32):
        frequencies, _ = scaled_frequencies(16, seq_len=seq_len, **kwargs)
        assert np.array_equal(frequencies, rope_frequencies(16))
    frequencies, _ = scaled_frequencies(16, seq_len=64, **kwargs)
    base = 10000 * (2 * 64 / 32 - 1) ** (16 / 14)  # 3^(8/7)
    np.testing.assert_allclose(frequencies, rope_frequencies(16, base=base), rtol=1e-14)


def test_yarn_ramp_by_rotations_within_the_original_length():
    # head_dim 16, base 10000, L = 32: pair i turns 32 theta_i / (2 pi) times.
    # beta_fast = 2 rotations at index 8 ln(32 / (4 pi)) / ln(10000) = 0.812 -> floor 0;
    # beta_slow = 0.5 at 8 ln(32 / pi) / ln(10000) = 2.017 -> ceil 3.
    low = 8 * math.log(32 / (2 * 2 * math.pi)) / math.log(10000)
    high = 8 * math.log(32 / (0.5 * 2 * math.pi)) / math.log(10000)
    assert (math.floor(low), math.ceil(high)) == (0, 3)
    frequencies, scale = scaled_frequencies(
        16, method="yarn", factor=4.0, original_length=32, beta_fast=2.0, beta_slow=0.5
    )
    theta = rope_frequencies(16)
    ramp = np.array([0, 1 / 3, 2 / 3, 1, 1, 1, 1, 1])
    np.testing.assert_allclose(frequencies, theta * (1 - ramp) + theta / 4 * ramp, rtol=1e-14)
    assert scale == pytest.approx(0.1 * math.log(4) + 1, rel=1e-15)


def test_yarn_with_the_paper_defaults_keeps_fast_pairs_and_interpolates_slow_ones():
    frequencies, scale = scaled_frequencies(128, method="yarn", factor=16, original_length=4096)
    theta = rope_frequencies(128)
    rotations = 4096 * theta / (2 * math.pi)
    assert np.array_equal(frequencies[rotations > 32], theta[rotations > 32])
    np.testing.assert_allclose(frequencies[rotations < 1], theta[rotations < 1] / 16, rtol=1e-15)
    assert scale == pytest.approx(1 + 0.1 * math.log(16))


def test_llama3_bands_by_wavelength():
    # Llama 3.1: factor 8, low 1, high 4, original length 8192, base 500000, head 128.
    frequencies, scale = scaled_frequencies(
        128, base=500000.0, method="llama3", factor=8.0, original_length=8192
    )
    theta = rope_frequencies(128, base=500000.0)
    wavelength = 2 * math.pi / theta
    for i in range(64):
        if wavelength[i] < 8192 / 4:
            expected = theta[i]
        elif wavelength[i] > 8192 / 1:
            expected = theta[i] / 8
        else:
            s = (8192 / wavelength[i] - 1) / (4 - 1)
            expected = (1 - s) * theta[i] / 8 + s * theta[i]
        assert frequencies[i] == pytest.approx(expected, rel=1e-14), i
    assert scale == 1.0
    kept = wavelength < 2048
    assert kept.any() and (wavelength > 8192).any() and (~kept & (wavelength <= 8192)).any()


def test_factor_one_changes_nothing_except_dynamic_ntk_past_the_original_length():
    for method in ("none", "linear", "ntk", "yarn", "llama3"):
        kwargs = {"original_length": 64} if method in ("yarn", "llama3") else {}
        frequencies, scale = scaled_frequencies(32, method=method, factor=1.0, **kwargs)
        np.testing.assert_allclose(frequencies, rope_frequencies(32), rtol=1e-14)
        assert scale == 1.0
    # Dynamic NTK grows the base with seq_len / L even at factor 1: base * 2^(32/30).
    frequencies, _ = scaled_frequencies(
        32, method="dynamic_ntk", factor=1.0, original_length=64, seq_len=128
    )
    expected = rope_frequencies(32, base=10000 * 2 ** (32 / 30))
    np.testing.assert_allclose(frequencies, expected, rtol=1e-14)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"head_dim": 15}, "head_dim must be even, got 15"),
        ({"head_dim": 0}, "head_dim"),
        ({"method": "linear", "factor": 0.5}, "factor must be finite and >= 1, got 0.5"),
        ({"method": "linear", "factor": math.inf}, "factor must be finite"),
        ({"method": "linear", "factor": math.nan}, "factor must be finite"),
        ({"method": "rope_scaling"}, "method must be one of"),
        ({"method": "yarn", "factor": 2.0}, "'yarn' needs original_length"),
        ({"method": "llama3", "factor": 2.0}, "'llama3' needs original_length"),
        ({"method": "dynamic_ntk", "original_length": 8}, "needs seq_len"),
        ({"method": "linear", "seq_len": 64}, "seq_len=64 is used by method 'dynamic_ntk'"),
        ({"beta_fast": 1.0, "beta_slow": 1.0}, r"beta_fast \(1.0\) must be greater"),
        ({"low_freq_factor": 4.0}, r"low_freq_factor \(4.0\) must be smaller"),
    ],
)
def test_bad_input_names_the_value(kwargs, message):
    kwargs = {"head_dim": 16, **kwargs}
    with pytest.raises(ValueError, match=message):
        scaled_frequencies(**kwargs)


def test_factor_of_the_wrong_type_is_refused():
    with pytest.raises(TypeError, match="factor must be a real number"):
        scaled_frequencies(16, method="linear", factor="2")


def test_rope_uses_given_frequencies_and_attention_scale():
    from posenc.alternatives import rope

    x = np.random.default_rng(0).standard_normal((2, 40, 16))
    frequencies, scale = scaled_frequencies(16, method="yarn", factor=4.0, original_length=16)
    got = rope(x, frequencies=frequencies, attention_scale=scale)
    angles = np.arange(40)[:, None] * frequencies
    x0, x1 = x[..., 0::2], x[..., 1::2]
    expected = np.empty_like(x)
    expected[..., 0::2] = scale * (x0 * np.cos(angles) - x1 * np.sin(angles))
    expected[..., 1::2] = scale * (x0 * np.sin(angles) + x1 * np.cos(angles))
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-13)
    # the logits scale by scale^2, whatever the positions
    q, k = rope(x[:1], attention_scale=scale), rope(x[1:], attention_scale=scale)
    np.testing.assert_allclose(
        q @ k.swapaxes(-1, -2), scale**2 * (rope(x[:1]) @ rope(x[1:]).swapaxes(-1, -2)), rtol=1e-12
    )
    # default frequencies are RoPE's, and partial rotary takes frequencies per rotated pair
    assert np.array_equal(rope(x, frequencies=rope_frequencies(16)), rope(x))
    partial = rope(x, rotary_dim=8, frequencies=frequencies[:4])
    assert np.array_equal(partial[..., 8:], x[..., 8:])
    with pytest.raises(ValueError, match="frequencies must be 8 finite numbers"):
        rope(x, frequencies=frequencies[:4])
    with pytest.raises(ValueError, match="attention_scale must be finite and > 0"):
        rope(x, attention_scale=0.0)


def test_turns_and_slowdowns_read_a_head_pair_by_pair():
    from posenc.long_context import slowdowns, turns

    r = turns(16, 32)
    assert r[0] == 32 / (2 * np.pi)  # pair 0 turns at 1 rad per token
    assert r[1] == pytest.approx(32 * 10000 ** (-2 / 16) / (2 * np.pi))
    assert np.sum(turns(128, 8192, base=500_000.0) >= 1) == 35
    assert np.allclose(slowdowns(16, method="linear", factor=8), 8)
    kappa = slowdowns(16, method="ntk", factor=4)
    assert kappa[0] == 1 and kappa[-1] == pytest.approx(4)
    llama = slowdowns(16, method="llama3", factor=8, original_length=32)
    assert llama[0] == 1 and round(llama[1], 2) == 3.3 and np.allclose(llama[2:], 8)
    with pytest.raises(ValueError, match="length"):
        turns(16, 0)
