"""Unit tests of posenc.reference: the exact tables the book measures against."""

from __future__ import annotations

import math

import numpy as np
import pytest

from posenc import reference


def test_exact_frequencies():
    np.testing.assert_array_equal(reference.exact_frequencies(4), [1.0, 0.01])
    frequencies = reference.exact_frequencies(5, base=2.0)
    expected = [2.0 ** (-2 * i / 5) for i in range(3)]
    np.testing.assert_allclose(frequencies, expected, rtol=2e-16)


def test_exact_table_small_values():
    table = reference.exact_sinusoidal(3, 4)
    expected = [
        [0.0, 1.0, 0.0, 1.0],
        [math.sin(1), math.cos(1), math.sin(0.01), math.cos(0.01)],
        [math.sin(2), math.cos(2), math.sin(0.02), math.cos(0.02)],
    ]
    np.testing.assert_allclose(table, expected, rtol=0, atol=1.2e-16)
    assert table.dtype == np.float64


def test_exact_table_is_correctly_rounded_far_out():
    # sin(10**6) = -0.34999350217129295211... (mpmath at 30 digits), rounded to float64.
    value = reference.exact_sinusoidal(1, 1, start=10**6)[0, 0]
    assert value == -0.34999350217129294


@pytest.mark.parametrize("d_model", [1, 6, 7])
def test_exact_table_layouts(d_model):
    interleaved = reference.exact_sinusoidal(3, d_model, start=5)
    concat = reference.exact_sinusoidal(3, d_model, start=5, layout="concat")
    sines = (d_model + 1) // 2
    np.testing.assert_array_equal(concat[:, :sines], interleaved[:, 0::2])
    np.testing.assert_array_equal(concat[:, sines:], interleaved[:, 1::2])


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        ({"d_model": 0}, ValueError),
        ({"d_model": 4.0}, TypeError),
        ({"d_model": True}, TypeError),
        ({"d_model": 4, "base": -1.0}, ValueError),
        ({"d_model": 4, "base": float("nan")}, ValueError),
        ({"d_model": 4, "base": "10000"}, TypeError),
    ],
)
def test_exact_frequencies_refuses_bad_arguments(arguments, error):
    with pytest.raises(error) as raised:
        reference.exact_frequencies(**arguments)
    name = "base" if "base" in arguments else "d_model"
    assert name in str(raised.value) and repr(arguments[name]) in str(raised.value)
