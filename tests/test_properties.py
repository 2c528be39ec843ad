"""Unit tests of posenc.properties: wavelengths, the rotation M_k and the offset dot product."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from posenc import reference
from posenc.encoding import frequencies, layout_permutation, sinusoidal
from posenc.properties import (
    diagonal_spread,
    offset_dot_product,
    rotation_matrix,
    wavelengths,
)

EVEN_D_MODELS = [2, 4, 8, 16, 64, 128, 512]


def test_frequencies_are_the_ones_the_table_uses():
    for d_model in (1, 2, 5, 64, 129):
        omega = frequencies(d_model, base=500.0)
        assert omega.shape == ((d_model + 1) // 2,)
        exact = reference.exact_frequencies(d_model, base=500.0)
        np.testing.assert_allclose(omega, exact, rtol=4.5e-16, atol=0)  # within 2 ulp
        angles = np.arange(7.0)[:, None] * omega
        assert np.array_equal(sinusoidal(7, d_model, base=500.0)[:, 0::2], np.sin(angles))


@pytest.mark.parametrize("d_model", EVEN_D_MODELS)
def test_wavelengths_are_a_geometric_progression(d_model):
    lam = wavelengths(d_model, base=10000.0)
    assert lam[0] == pytest.approx(2 * math.pi, rel=1e-15)
    ratios = lam[1:] / lam[:-1]
    np.testing.assert_allclose(ratios, 10000.0 ** (2 / d_model), rtol=1e-13)
    top = 2 * math.pi * 10000.0 ** ((d_model - 2) / d_model)
    assert lam[-1] == pytest.approx(top, rel=1e-13)
    assert lam[-1] < 2 * math.pi * 10000.0


def test_the_longest_wavelength_is_short_of_2pi_base():
    # For d_model = 512 the top end is 2 pi * 10000 * 10000**(-1/256), not 2 pi * 10000.
    assert wavelengths(512)[-1] / (2 * math.pi * 10000) == pytest.approx(0.96466, abs=1e-5)


@pytest.mark.parametrize("d_model", EVEN_D_MODELS)
@pytest.mark.parametrize("layout", ["interleaved", "concat"])
def test_rotation_moves_every_row_by_k(d_model, layout):
    table = sinusoidal(700, d_model, base=10000.0, layout=layout)
    for k in (-300, -17, -1, 0, 1, 2, 5, 64, 299):
        matrix = rotation_matrix(k, d_model, layout=layout)
        p = np.arange(max(0, -k), 700 - max(0, k))
        np.testing.assert_allclose(table[p] @ matrix.T, table[p + k], rtol=0, atol=1e-12)


def test_rotation_blocks_by_hand():
    k, omega = 3, 10000.0 ** (-2 / 4)
    expected = np.zeros((4, 4))
    expected[0:2, 0:2] = [[math.cos(3), math.sin(3)], [-math.sin(3), math.cos(3)]]
    expected[2:4, 2:4] = [
        [math.cos(k * omega), math.sin(k * omega)],
        [-math.sin(k * omega), math.cos(k * omega)],
    ]
    np.testing.assert_allclose(rotation_matrix(3, 4), expected, rtol=0, atol=1e-16)
    order = layout_permutation(4)
    assert np.array_equal(rotation_matrix(3, 4, layout="concat"), expected[np.ix_(order, order)])


@given(
    a=st.integers(-(10**6), 10**6),
    b=st.integers(-(10**6), 10**6),
    half_d=st.integers(1, 64),
    base=st.floats(2.0, 1e6),
)
def test_rotation_group_laws(a, b, half_d, base):
    d_model = 2 * half_d
    ma, mb = rotation_matrix(a, d_model, base=base), rotation_matrix(b, d_model, base=base)
    identity = np.eye(d_model)
    np.testing.assert_allclose(ma @ ma.T, identity, rtol=0, atol=1e-12)
    np.testing.assert_allclose(ma @ mb, rotation_matrix(a + b, d_model, base=base), atol=1e-9)
    assert np.array_equal(rotation_matrix(-a, d_model, base=base), ma.T)
    assert np.array_equal(rotation_matrix(0, d_model, base=base), identity)


@given(start=st.integers(0, 10**6), k=st.integers(-(10**4), 10**4), half_d=st.integers(1, 40))
def test_rotation_at_any_position_agrees_with_mpmath(start, k, half_d):
    d_model = 2 * half_d
    if start + k < 0:
        k = -k
    here = reference.exact_sinusoidal(1, d_model, start=start)[0]
    there = reference.exact_sinusoidal(1, d_model, start=start + k)[0]
    np.testing.assert_allclose(rotation_matrix(k, d_model) @ here, there, rtol=0, atol=1e-10)


@pytest.mark.parametrize("d_model", EVEN_D_MODELS)
def test_offset_dot_product_is_the_table_dot_product_at_every_position(d_model):
    table = sinusoidal(1500, d_model, base=10000.0)
    for p in (0, 1, 333, 1000):
        offsets = np.arange(1500) - p
        np.testing.assert_allclose(
            table @ table[p], offset_dot_product(offsets, d_model), rtol=0, atol=1e-11
        )


def test_offset_dot_product_values():
    # k = 0: the squared norm d/2; the sum of cosines by hand for d = 4, k = 2.
    assert offset_dot_product(0, 64) == pytest.approx(32.0, abs=1e-15)
    expected = math.cos(2) + math.cos(2 * 0.01)
    assert offset_dot_product(2, 4) == pytest.approx(expected, abs=1e-15)
    k = np.arange(-50, 51)
    values = offset_dot_product(k, 32, base=100.0)
    assert values.shape == k.shape
    assert np.array_equal(values, values[::-1]), "S(k) must equal S(-k)"
    assert offset_dot_product([[1, 2], [3, 4]], 8).shape == (2, 2)
    assert offset_dot_product(np.array(5, dtype=np.uint8), 8) == offset_dot_product(5, 8)


@pytest.mark.parametrize("function", [rotation_matrix, offset_dot_product])
@pytest.mark.parametrize("d_model", [1, 3, 63])
def test_odd_d_model_is_refused(function, d_model):
    with pytest.raises(ValueError, match=f"even d_model.*d_model={d_model}"):
        function(1, d_model)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"offset": 1.0}, TypeError, "offset must be an integer"),
        ({"offset": True}, TypeError, "offset must be an integer"),
        ({"offset": 2**53 + 1}, ValueError, "offset must be at most"),
        ({"offset": -(2**53) - 1}, ValueError, "offset must be at least"),
        ({"d_model": 0}, ValueError, "d_model must be at least 1"),
        ({"d_model": 4.0}, TypeError, "d_model must be an integer"),
        ({"base": 0.0}, ValueError, "base must be finite and > 0"),
        ({"base": "10000"}, TypeError, "base must be a real number"),
        ({"layout": "columns"}, ValueError, "layout must be one of"),
    ],
)
def test_rotation_matrix_bad_input(kwargs, error, match):
    arguments = {"offset": 1, "d_model": 8, **kwargs}
    with pytest.raises(error, match=match):
        rotation_matrix(arguments.pop("offset"), arguments.pop("d_model"), **arguments)


@pytest.mark.parametrize(
    ("offsets", "error", "match"),
    [
        ([1.0, 2.0], TypeError, "offsets must be integers"),
        ([True], TypeError, "offsets must be integers"),
        ("3", TypeError, "offsets must be integers"),
        ([[1], [1, 2]], TypeError, "offsets must be integers"),
        ([0, 2**53 + 1], ValueError, "offsets must lie in"),
        (np.array([2**63], dtype=np.uint64), ValueError, "offsets must lie in"),
    ],
)
def test_offset_dot_product_bad_offsets(offsets, error, match):
    with pytest.raises(error, match=match):
        offset_dot_product(offsets, 8)


def test_wavelengths_bad_input():
    with pytest.raises(TypeError, match="d_model must be an integer"):
        wavelengths(True)
    with pytest.raises(ValueError, match="base must be finite and > 0"):
        wavelengths(8, base=math.inf)


@pytest.mark.parametrize("d_model", [2, 4, 128])
def test_closest_rows_by_offset_match_every_pair_of_rows(d_model):
    """Chapter 6 finds the two closest rows by trying each offset k once.

    Rows k apart are sqrt(d_model - 2 S(k)) apart, whatever the position; here all
    1,999,000 pairs of the first 2000 rows are compared instead. The brute force
    subtracts nearly equal numbers where two rows nearly coincide, so the distances
    agree to a relative 1e-6.
    """
    n = 2000
    offsets = np.arange(1, n)
    by_offset = np.sqrt(np.maximum(d_model - 2 * offset_dot_product(offsets, d_model), 0))
    table = sinusoidal(n, d_model)
    squared = np.einsum("ij,ij->i", table, table)
    rows, cols = np.triu_indices(n, k=1)  # every pair p < q once
    pair_sq = (squared[:, None] + squared[None, :] - 2 * (table @ table.T))[rows, cols]
    best = pair_sq.argmin()
    assert cols[best] - rows[best] == offsets[by_offset.argmin()]
    brute = math.sqrt(max(pair_sq[best], 0.0))
    assert brute == pytest.approx(by_offset.min(), rel=1e-6)


def test_diagonal_spread_is_zero_for_a_function_of_the_offset_only():
    offsets = np.arange(6)[None, :] - np.arange(4)[:, None]  # key - query, (4, 6)
    scores = np.sin(0.3 * offsets) + offsets**2
    spread = diagonal_spread(scores)
    assert spread.shape == (4 + 6 - 1,) and not spread.any()
    scores[1, 3] += 0.5  # offset 2: entry 2 + 3 of the result
    spread = diagonal_spread(scores)
    assert spread[2 + 3] == 0.5 and np.count_nonzero(spread) == 1


def test_diagonal_spread_tells_a_shift_head_from_a_random_head():
    table = sinusoidal(40, 16)
    shift = table @ rotation_matrix(5, 16).T @ table.T
    random_head = np.random.default_rng(0).standard_normal((16, 16))
    assert diagonal_spread(shift).max() < 1e-12
    assert diagonal_spread(table @ random_head @ table.T).max() > 1


def test_diagonal_spread_refuses_what_is_not_a_matrix():
    for bad in (np.zeros(3), np.zeros((2, 2, 2)), np.zeros((0, 3))):
        with pytest.raises(ValueError, match="scores"):
            diagonal_spread(bad)


def test_diagonal_spread_leaves_out_masked_entries():
    offsets = np.arange(5)[None, :] - np.arange(5)[:, None]
    scores = np.where(offsets <= 0, -0.5 * np.abs(offsets), -np.inf)  # causal ALiBi-like
    assert not diagonal_spread(scores).any()
    scores[3, 1] = 7.0
    assert diagonal_spread(scores)[1 - 3 + 4] == 7.0 + 1.0
