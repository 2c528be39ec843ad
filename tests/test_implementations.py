"""The chapters' implementations agree with each other and with the exact (mpmath) table."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from posenc import implementations, museum, properties, reference, sinusoidal

TABLES = [
    sinusoidal,
    implementations.angle_addition,
    implementations.naive_loops,
    implementations.vectorized,
    implementations.log_space,
]
TABLE_IDS = [f.__name__ for f in TABLES]

# The promise of chapters 2-5, in float64: within 1e-12 of the exact values below
# position 4096, within 1e-9 up to position 10**6.
NEAR, NEAR_TOLERANCE = 4096, 1e-12
FAR, FAR_TOLERANCE = 10**6, 1e-9
D_MODELS = [1, 2, 3, 4, 5, 7, 8, 16, 31, 64, 127, 128, 512, 1024]


def _max_error(builder, length, d_model, start):
    exact = reference.exact_sinusoidal(length, d_model, start=start)
    table = builder(length, d_model, start=start)
    assert table.shape == exact.shape == (length, d_model)
    return float(np.max(np.abs(table - exact), initial=0.0))


@pytest.mark.parametrize("builder", TABLES, ids=TABLE_IDS)
@pytest.mark.parametrize("d_model", D_MODELS)
def test_agrees_with_mpmath_below_4096(builder, d_model):
    for length, start in [(0, 0), (1, 0), (1, NEAR - 1), (24, 0), (24, NEAR - 24)]:
        assert _max_error(builder, length, d_model, start) <= NEAR_TOLERANCE


@pytest.mark.parametrize("builder", TABLES, ids=TABLE_IDS)
@pytest.mark.parametrize("d_model", D_MODELS)
def test_agrees_with_mpmath_up_to_a_million(builder, d_model):
    for length, start in [(1, FAR), (8, 10**4), (8, 10**5), (16, FAR - 15)]:
        assert _max_error(builder, length, d_model, start) <= FAR_TOLERANCE


@pytest.mark.parametrize("builder", TABLES, ids=TABLE_IDS)
@settings(max_examples=40)
@given(data=st.data(), d_model=st.integers(1, 300), length=st.integers(0, 6))
def test_agrees_with_mpmath_anywhere(builder, data, d_model, length):
    start = data.draw(st.integers(0, FAR - length), label="start")
    tolerance = NEAR_TOLERANCE if start + length <= NEAR else FAR_TOLERANCE
    assert _max_error(builder, length, d_model, start) <= tolerance


@pytest.mark.parametrize("builder", TABLES[1:], ids=TABLE_IDS[1:])
@pytest.mark.parametrize(("length", "d_model"), [(0, 4), (1, 1), (50, 7), (64, 64)])
def test_variants_match_the_entry_point(builder, length, d_model):
    for base in (10000.0, 2.0, 1e6):
        np.testing.assert_allclose(
            builder(length, d_model, base=base),
            sinusoidal(length, d_model, base=base),
            rtol=0,
            atol=1e-12,
        )


@pytest.mark.parametrize("builder", [implementations.vectorized, implementations.log_space])
def test_variants_compute_in_the_requested_dtype(builder):
    # Far from the origin a float32 angle is off by up to half an ulp of pos*omega, so the
    # float32 variants must be measurably worse than the float64 table rounded to float32.
    start = 100_000
    exact = reference.exact_sinusoidal(4, 8, start=start)
    in_float32 = builder(4, 8, start=start, dtype=np.float32)
    assert in_float32.dtype == np.float32
    rounded_once = sinusoidal(4, 8, start=start).astype(np.float32)
    error_in_float32 = np.abs(in_float32.astype(np.float64) - exact).max()
    error_rounded_once = np.abs(rounded_once.astype(np.float64) - exact).max()
    assert error_rounded_once <= 2.0**-25  # half an ulp of float32 at 1
    assert error_in_float32 > 100 * error_rounded_once


def test_naive_loops_use_the_pair_index():
    # Column 3 is the cosine of pair 1: exponent 2/d, not 6/d.
    table = implementations.naive_loops(2, 8)
    assert table[1, 3] == math.cos(1 / 10000 ** (2 / 8))


@pytest.mark.parametrize("builder", [implementations.vectorized, implementations.log_space])
def test_a_base_too_large_for_the_dtype_is_refused(builder):
    with pytest.raises(ValueError, match=r"base=100000\.0 .*float16"):
        builder(4, 8, base=1e5, dtype=np.float16)
    assert np.all(np.isfinite(builder(4, 8, base=1e5, dtype=np.float32)))
    assert np.all(np.isfinite(sinusoidal(4, 8, base=1e5, dtype=np.float16)))


# Chapter 3's three cheap checks: row 0, pairs on the unit circle, a shift turns each
# pair. Every entry is within NEAR_TOLERANCE of the exact value below position 4096
# (the tests above) and a rotation keeps that error's size, so a turned pair misses
# the row k positions on by at most (sqrt(2) + 1) * NEAR_TOLERANCE, plus a few
# roundings.
SHIFT_TOLERANCE = 3 * NEAR_TOLERANCE


def _row0_gap(table):
    """How far row 0 is from [0, 1, 0, 1, ...]: sin 0 = 0, cos 0 = 1."""
    expected = np.zeros(table.shape[1])
    expected[1::2] = 1.0
    return float(np.abs(table[0] - expected).max())


def _pair_gap(table):
    """How far each full sine-cosine pair is from the unit circle."""
    pairs = table.shape[1] // 2
    radius = np.hypot(table[:, 0 : 2 * pairs : 2], table[:, 1::2])
    return float(np.abs(radius - 1).max())


def _row_norm_gap(table):
    """How far each row's norm is from sqrt(d / 2): the weaker check."""
    norms = np.linalg.norm(table, axis=1)
    return float(np.abs(norms - math.sqrt(table.shape[1] / 2)).max())


def _shift_gap(table, k, base=10000.0):
    """How far row pos, each pair turned by k * omega_i, is from row pos + k."""
    d_model, pairs = table.shape[1], table.shape[1] // 2
    turn = k * base ** (-2 * np.arange(pairs) / d_model)
    s, c = table[:, 0 : 2 * pairs : 2], table[:, 1::2]
    s_next = s[:-k] * np.cos(turn) + c[:-k] * np.sin(turn)
    c_next = c[:-k] * np.cos(turn) - s[:-k] * np.sin(turn)
    return float(max(np.abs(s_next - s[k:]).max(), np.abs(c_next - c[k:]).max()))


@pytest.mark.parametrize("builder", TABLES, ids=TABLE_IDS)
@pytest.mark.parametrize("d_model", [2, 3, 5, 8, 31, 64, 127, 512])
def test_row_zero_pairs_and_shifts_of_every_correct_table(builder, d_model):
    table = builder(NEAR, d_model)
    assert _row0_gap(table) == 0.0  # sin 0 and cos 0 are exact
    assert _pair_gap(table) <= 1e-12
    for k in (1, 37, 300, NEAR - 1):
        assert _shift_gap(table, k) <= SHIFT_TOLERANCE
    # An odd width's lone sine adds sin**2, between 0 and 1, to the squared norm.
    lone = np.linalg.norm(table, axis=1) ** 2 - d_model // 2
    if d_model % 2:
        assert lone.min() >= -1e-12 and lone.max() <= 1 + 1e-12
        last = np.arange(NEAR) * 10000.0 ** (-(d_model - 1) / d_model)
        assert np.abs(lone - np.sin(last) ** 2).max() <= 1e-11
    else:
        assert np.abs(lone).max() <= 1e-11


def test_each_check_catches_its_own_bug():
    # As published, column c turns at base**(-2c/d): the pairs mix two frequencies.
    published = museum.double_counted_as_found(512, 128)
    assert _row0_gap(published) == 0.0
    assert _pair_gap(published) > 0.1 and _shift_gap(published, 1) > 0.1
    # The cosine fixed alone: true pairs, at the frequencies of base**2.
    cosine_fixed = museum.double_counted(512, 128)
    assert _row0_gap(cosine_fixed) == 0.0 and _pair_gap(cosine_fixed) <= 1e-12
    assert _shift_gap(cosine_fixed, 1) > 0.1
    assert _shift_gap(cosine_fixed, 1, base=1e8) <= SHIFT_TOLERANCE
    # Positions from 1: a correct table of other positions; only row 0 sees it.
    off_by_one = sinusoidal(512, 128, start=1)
    assert _row0_gap(off_by_one) > 0.8
    assert _pair_gap(off_by_one) <= 1e-12 and _shift_gap(off_by_one, 1) <= SHIFT_TOLERANCE
    # Sines then cosines, read as interleaved: the row norm cannot see it.
    concat = sinusoidal(512, 128, layout="concat")
    assert _row_norm_gap(concat) <= 1e-12 and _pair_gap(concat) > 0.9
    shuffled = sinusoidal(512, 128)[:, np.random.default_rng(0).permutation(128)]
    assert _row_norm_gap(shuffled) <= 1e-12 and _pair_gap(shuffled) > 0.5


def test_the_published_table_breaks_the_offset_only_dot_product():
    # PE(p) . PE(p + 5) over p = 0..506: constant for true pairs (sum of cos 5 w_i),
    # moving with p when a pair's sine and cosine turn at alpha_i != beta_i.
    k, d, p = 5, 128, np.arange(507)[:, None]
    bound = 4 * d * np.finfo(float).eps * 512  # entries off by ~eps * 511 each
    for table, base in (
        (sinusoidal(512, d), 1e4),
        (museum.double_counted(512, d), 1e8),
    ):
        dots = np.sum(table[:-k] * table[k:], axis=1)
        assert np.abs(dots - properties.offset_dot_product(k, d, base=base)).max() < bound
    published = museum.double_counted_as_found(512, d)
    alpha = 10000.0 ** (-2 * np.arange(0, d, 2) / d)
    beta = 10000.0 ** (-2 * np.arange(1, d, 2) / d)
    moving = np.cos((2 * p + k) * beta) - np.cos((2 * p + k) * alpha)
    closed = 0.5 * np.sum(np.cos(k * alpha) + np.cos(k * beta) + moving, axis=1)
    dots = np.sum(published[:-k] * published[k:], axis=1)
    assert np.abs(dots - closed).max() < bound
    assert np.ptp(dots) > 9.0
