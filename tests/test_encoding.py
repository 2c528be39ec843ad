"""Unit tests of posenc.encoding: the sinusoidal table, its layouts and its argument checks."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import posenc
from posenc import implementations, reference
from posenc.encoding import layout_permutation, sinusoidal

# Every public function that builds a table takes the same arguments.
BUILDERS = [
    sinusoidal,
    implementations.angle_addition,
    implementations.naive_loops,
    implementations.vectorized,
    implementations.log_space,
    reference.exact_sinusoidal,
]
BUILDER_IDS = [f.__name__ for f in BUILDERS]


def test_package_exports():
    assert posenc.sinusoidal is sinusoidal
    assert posenc.layout_permutation is layout_permutation


def test_the_formula_entry_by_entry():
    table = sinusoidal(5, 6, base=100.0, start=3)
    for row in range(5):
        pos = 3 + row
        for i in range(3):
            angle = pos / 100.0 ** (2 * i / 6)
            assert table[row, 2 * i] == pytest.approx(math.sin(angle), abs=1e-15)
            assert table[row, 2 * i + 1] == pytest.approx(math.cos(angle), abs=1e-15)


def test_the_papers_d4_example():
    table = sinusoidal(3, 4)
    expected = [
        [0.0, 1.0, 0.0, 1.0],
        [math.sin(1), math.cos(1), math.sin(0.01), math.cos(0.01)],
        [math.sin(2), math.cos(2), math.sin(0.02), math.cos(0.02)],
    ]
    np.testing.assert_allclose(table, expected, rtol=0, atol=1e-16)


def test_odd_d_model_ends_with_the_sine_of_one_more_pair():
    d = 7
    table = sinusoidal(50, d)
    last = np.sin(np.arange(50) / 10000.0 ** ((d - 1) / d))
    np.testing.assert_allclose(table[:, -1], last, rtol=0, atol=1e-15)
    assert table.shape == (50, 7)


@pytest.mark.parametrize("length", [0, 1, 9])
def test_shape_and_dtype(length):
    for dtype in (np.float16, np.float32, np.float64):
        table = sinusoidal(length, 5, dtype=dtype)
        assert table.shape == (length, 5) and table.dtype == dtype


def test_start_shifts_the_rows():
    whole = sinusoidal(40, 10)
    np.testing.assert_array_equal(sinusoidal(15, 10, start=25), whole[25:])


def test_float16_and_longdouble_tables_are_the_float64_table_rounded_once():
    high = sinusoidal(300, 16, start=100_000)
    for dtype in (np.float16, np.longdouble):
        table = sinusoidal(300, 16, start=100_000, dtype=dtype)
        assert table.dtype == dtype
        np.testing.assert_array_equal(table, high.astype(dtype))


def test_float32_tables_stay_within_four_float32_roundings_of_the_float64_table():
    high = sinusoidal(300, 16, start=100_000)
    table = sinusoidal(300, 16, start=100_000, dtype=np.float32)
    assert table.dtype == np.float32
    gap = np.abs(table - high).max()
    assert 0 < gap <= 4 * 2.0**-24


@pytest.mark.parametrize(
    ("d_model", "expected"),
    [(1, [0]), (2, [0, 1]), (5, [0, 2, 4, 1, 3]), (6, [0, 2, 4, 1, 3, 5])],
)
def test_layout_permutation(d_model, expected):
    permutation = layout_permutation(np.int16(d_model))
    np.testing.assert_array_equal(permutation, expected)


@pytest.mark.parametrize("builder", BUILDERS, ids=BUILDER_IDS)
@pytest.mark.parametrize("d_model", [1, 2, 5, 8])
def test_concat_layout_is_a_column_permutation(builder, d_model):
    interleaved = builder(6, d_model, start=2)
    concat = builder(6, d_model, start=2, layout="concat")
    permutation = layout_permutation(d_model)
    np.testing.assert_array_equal(concat, interleaved[:, permutation])
    np.testing.assert_array_equal(concat[:, np.argsort(permutation)], interleaved)
    sines = (d_model + 1) // 2
    np.testing.assert_array_equal(concat[:, :sines], interleaved[:, 0::2])


# ---- bad input -------------------------------------------------------------------------

NOT_INTEGERS = st.one_of(
    st.floats(allow_nan=True),
    st.booleans(),
    st.text(max_size=3),
    st.none(),
    st.just(np.float64(3.0)),
    st.just(np.bool_(True)),
)


def _call(builder, **overrides):
    arguments = {"length": 3, "d_model": 4, "start": 0, "base": 10000.0, "layout": "interleaved"}
    if builder is not reference.exact_sinusoidal:
        arguments["dtype"] = np.float64
    arguments.update(overrides)
    length, d_model = arguments.pop("length"), arguments.pop("d_model")
    return builder(length, d_model, **arguments)


def _refused(exception: type[Exception], builder, name: str, value) -> None:
    """The call with ``name=value`` raises ``exception`` naming the argument and value."""
    with pytest.raises(exception) as error:
        _call(builder, **{name: value})
    message = str(error.value)
    assert name in message and repr(value) in message, message


def test_a_float_length_and_a_negative_base_are_refused_by_name():
    """Two refusals a reader meets first: each message names the argument and its value."""
    with pytest.raises(TypeError, match=r"^length must be an integer, got 3\.0"):
        sinusoidal(3.0, 4)
    with pytest.raises(ValueError, match=r"^base must be finite and > 0, got -10000\.0"):
        sinusoidal(3, 4, base=-1e4)


@pytest.mark.parametrize("builder", BUILDERS, ids=BUILDER_IDS)
@pytest.mark.parametrize("name", ["length", "d_model", "start"])
@given(value=NOT_INTEGERS)
def test_a_non_integer_is_a_type_error(builder, name, value):
    _refused(TypeError, builder, name, value)


@pytest.mark.parametrize("builder", BUILDERS, ids=BUILDER_IDS)
@given(
    name_and_value=st.one_of(
        st.tuples(st.just("length"), st.integers(max_value=-1)),
        st.tuples(st.just("start"), st.integers(max_value=-1)),
        st.tuples(st.just("d_model"), st.integers(max_value=0)),
    )
)
def test_an_integer_out_of_range_is_a_value_error(builder, name_and_value):
    _refused(ValueError, builder, *name_and_value)


@pytest.mark.parametrize("builder", BUILDERS, ids=BUILDER_IDS)
@given(
    base=st.one_of(
        st.floats(max_value=0.0),
        st.just(math.inf),
        st.just(math.nan),
        st.integers(max_value=0),
        st.just(10**400),
    )
)
def test_a_base_not_finite_and_positive_is_a_value_error(builder, base):
    _refused(ValueError, builder, "base", base)


@pytest.mark.parametrize("builder", BUILDERS, ids=BUILDER_IDS)
@pytest.mark.parametrize("base", ["10000", True, None, [10000.0], 1j])
def test_a_base_that_is_not_a_real_number_is_a_type_error(builder, base):
    _refused(TypeError, builder, "base", base)


@pytest.mark.parametrize("builder", BUILDERS, ids=BUILDER_IDS)
def test_an_unknown_layout(builder):
    _refused(ValueError, builder, "layout", "blocked")
    _refused(TypeError, builder, "layout", None)


@pytest.mark.parametrize("builder", BUILDERS[:-1], ids=BUILDER_IDS[:-1])
@pytest.mark.parametrize("dtype", [np.int32, np.bool_, np.complex128, "int8", object, None, "nope"])
def test_a_non_floating_dtype_is_a_type_error(builder, dtype):
    _refused(TypeError, builder, "dtype", dtype)


@pytest.mark.parametrize("builder", BUILDERS, ids=BUILDER_IDS)
def test_positions_beyond_two_to_the_53_are_refused(builder):
    with pytest.raises(ValueError, match="start"):
        _call(builder, start=2**53 - 2)


@pytest.mark.parametrize("builder", BUILDERS, ids=BUILDER_IDS)
@pytest.mark.parametrize("kind", [np.int8, np.uint16, np.int32, np.int64, np.uint64])
def test_numpy_integers_are_accepted(builder, kind):
    table = _call(builder, length=kind(3), d_model=kind(4), start=kind(2), base=kind(100))
    np.testing.assert_allclose(table, sinusoidal(3, 4, start=2, base=100.0), rtol=0, atol=1e-15)


@given(d_model=st.one_of(NOT_INTEGERS, st.integers(max_value=0)))
def test_layout_permutation_checks_d_model(d_model):
    expected = (
        ValueError if isinstance(d_model, int) and not isinstance(d_model, bool) else TypeError
    )
    with pytest.raises(expected) as error:
        layout_permutation(d_model)
    assert "d_model" in str(error.value)


# --- writing into an existing array (out=) ---------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("layout", ["interleaved", "concat"])
@pytest.mark.parametrize("d_model", [16, 7])
def test_out_receives_exactly_the_table_it_would_return(dtype, layout, d_model):
    options = {"start": 1000, "dtype": dtype, "layout": layout}
    out = np.full((300, d_model), np.nan, dtype=dtype)
    result = sinusoidal(300, d_model, out=out, **options)
    assert result is out
    np.testing.assert_array_equal(out, sinusoidal(300, d_model, **options))


@pytest.mark.parametrize(
    ("out", "error", "pattern"),
    [
        (np.zeros((5, 8)).tolist(), TypeError, "out must be a NumPy array, got list"),
        (np.zeros((5, 9)), ValueError, r"out must have shape \(5, 8\), got \(5, 9\)"),
        (np.zeros(40), ValueError, r"out must have shape \(5, 8\), got \(40,\)"),
        (np.zeros((5, 8), np.float32), TypeError, "out must have dtype float64.*float32"),
        (np.zeros((8, 5)).T, ValueError, "C-contiguous.*c_contiguous=False"),
        (np.zeros((5, 16))[:, ::2], ValueError, "c_contiguous=False"),
    ],
)
def test_out_of_the_wrong_kind_is_refused(out, error, pattern):
    with pytest.raises(error, match=pattern):
        sinusoidal(5, 8, out=out)


def test_a_read_only_out_is_refused():
    out = np.zeros((5, 8))
    out.flags.writeable = False
    with pytest.raises(ValueError, match="writeable=False"):
        sinusoidal(5, 8, out=out)
