"""The angle-addition table of posenc.fast (chapter 11): error bounds, exact reuse of rows,
both layouts and the number of sines it computes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from posenc import fast, implementations, reference, sinusoidal
from posenc.encoding import frequencies

BLOCK, GROUP = fast.BLOCK, fast.BLOCK * fast.SPLIT  # rows per block, rows per group of blocks
# Four float32 roundings (the two factors, their product, the sum): the promise for float32.
FLOAT32_BOUND = 4 * 2.0**-24
# Direct float64 evaluation, the yardstick below, is itself within 1e-9 of the exact
# values up to position 10**6 (tests/test_implementations.py checks it against mpmath).
YARDSTICK_ERROR = 1e-9
LAYOUTS = ["interleaved", "concat"]

# Lengths around the block and group boundaries, and starts that put them anywhere.
LENGTHS = [1, 2, BLOCK - 1, BLOCK, BLOCK + 1, 3 * BLOCK + 5, GROUP + 1]
STARTS = [0, 1, BLOCK - 1, BLOCK, GROUP - 2, 5 * GROUP + 77, 10**6 - 3 * BLOCK]


def yardstick(length, d_model, **kwargs):
    """Direct float64 evaluation: np.sin and np.cos of every angle (chapter 4)."""
    return implementations.vectorized(length, d_model, **kwargs)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("d_model", [1, 2, 3, 8, 63, 64])
@pytest.mark.parametrize("length", LENGTHS)
def test_float32_error_is_within_four_roundings_for_every_size_start_and_layout(
    length, d_model, layout
):
    for start in STARTS:
        table = sinusoidal(length, d_model, start=start, dtype=np.float32, layout=layout)
        assert table.shape == (length, d_model) and table.dtype == np.float32
        truth = yardstick(length, d_model, start=start, layout=layout)
        assert np.abs(table - truth).max() <= FLOAT32_BOUND + YARDSTICK_ERROR


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("d_model", [1, 2, 7, 64])
@pytest.mark.parametrize("length", LENGTHS[:-1])
def test_float64_error_is_that_of_direct_evaluation(length, d_model, layout):
    for start in STARTS:
        table = sinusoidal(length, d_model, start=start, layout=layout)
        truth = yardstick(length, d_model, start=start, layout=layout)
        tolerance = 2e-12 if start + length <= 4096 else 2 * YARDSTICK_ERROR
        assert np.abs(table - truth).max() <= tolerance


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_full_size_table_near_a_million_against_mpmath(dtype):
    # The rows with the largest angles, where block and group boundaries meet.
    start = 10**6 - 5
    table = sinusoidal(10, 1024, start=start, dtype=dtype)
    exact = reference.exact_sinusoidal(10, 1024, start=start)
    bound = FLOAT32_BOUND if dtype == np.float32 else YARDSTICK_ERROR
    assert np.abs(table - exact).max() <= bound


@pytest.mark.parametrize("start", [0, 10**6 - 8192])
def test_the_benchmark_size_in_float32(start):
    table = sinusoidal(8192, 1024, start=start, dtype=np.float32)
    error = np.abs(table - yardstick(8192, 1024, start=start)).max()
    assert 2.0**-25 < error <= FLOAT32_BOUND + YARDSTICK_ERROR  # not rounded once


def test_an_odd_and_a_wide_table():
    for d_model in (1023, 4096):
        table = sinusoidal(300, d_model, start=999, dtype=np.float32)
        truth = yardstick(300, d_model, start=999)
        assert np.abs(table - truth).max() <= FLOAT32_BOUND + YARDSTICK_ERROR


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_layouts_hold_the_same_numbers(dtype):
    # Even interleaved tables are written in place through a complex view, the others
    # through a scratch block: both must give the same values.
    for d_model in (6, 7):
        interleaved = sinusoidal(3 * BLOCK + 9, d_model, start=50, dtype=dtype)
        concat = sinusoidal(3 * BLOCK + 9, d_model, start=50, dtype=dtype, layout="concat")
        np.testing.assert_array_equal(concat, interleaved[:, fast_permutation(d_model)])


def fast_permutation(d_model):
    return np.concatenate([np.arange(0, d_model, 2), np.arange(1, d_model, 2)])


@settings(max_examples=60, deadline=None)
@given(
    start=st.integers(0, 10**7),
    cut=st.integers(0, 3 * GROUP),
    length=st.integers(1, 3 * BLOCK),
    d_model=st.integers(1, 24),
    dtype=st.sampled_from([np.float32, np.float64]),
    layout=st.sampled_from(LAYOUTS),
)
def test_each_row_depends_on_its_position_alone(start, cut, length, d_model, dtype, layout):
    # A table from position start + cut equals the same rows of a longer table, bit for
    # bit, whichever blocks the two begin and end in.
    longer = sinusoidal(cut + length, d_model, start=start, dtype=dtype, layout=layout)
    part = sinusoidal(length, d_model, start=start + cut, dtype=dtype, layout=layout)
    np.testing.assert_array_equal(part, longer[cut:])


def test_the_first_rows_are_direct_evaluation():
    # Below position SPLIT the other factors of a row are exactly 1 and i (sin 0 = 0,
    # cos 0 = 1), so the rows are np.sin and np.cos of the angles, rounded once.
    angles = np.arange(fast.SPLIT)[:, None] * frequencies(10)[None, :]
    direct = np.empty((fast.SPLIT, 10))
    direct[:, 0::2], direct[:, 1::2] = np.sin(angles), np.cos(angles)
    for dtype in (np.float32, np.float64):
        table = sinusoidal(fast.SPLIT, 10, dtype=dtype)
        np.testing.assert_array_equal(table, direct.astype(dtype))


def test_sines_are_computed_for_the_digits_only(monkeypatch):
    counted = []
    exact = fast._exact

    def counting(values, frequencies, out=None):
        counted.append(values.size)
        return exact(values, frequencies, out=out)

    monkeypatch.setattr(fast, "_exact", counting)
    sinusoidal(8 * GROUP, 64, start=3)  # 16,384 rows
    # offsets: 8 high and 16 low digits; block starts: 9 groups and 16 blocks in a group
    assert sum(counted) == 8 + 16 + 9 + 16
    counted.clear()
    sinusoidal(1, 64, start=10**6)
    assert sum(counted) == 4  # one digit of each kind


def test_empty_tables():
    for dtype in (np.float32, np.float64, np.float16):
        table = sinusoidal(0, 5, start=7, dtype=dtype)
        assert table.shape == (0, 5) and table.dtype == dtype


@pytest.mark.parametrize("start", [0, 77, 10**6])
def test_threads_change_nothing_bit_for_bit(monkeypatch, start):
    monkeypatch.setattr(fast, "THREADED_MIN_EXP", 1)  # thread even small tables
    monkeypatch.setattr(fast, "THREADED_MIN_PRODUCTS", 1)
    monkeypatch.setattr(fast, "THREADS", 3)
    threaded = sinusoidal(1000, 64, start=start, dtype=np.float32)
    monkeypatch.setattr(fast, "THREADS", 1)
    assert np.array_equal(threaded, sinusoidal(1000, 64, start=start, dtype=np.float32))


def test_every_thread_keeps_its_ufunc_buffers_small(monkeypatch):
    # NumPy's buffer size is a setting of each thread: the pool's threads must set it
    # themselves, or a broadcast product costs each of them a 128 KiB buffer.
    monkeypatch.setattr(fast, "THREADED_MIN_PRODUCTS", 1)
    monkeypatch.setattr(fast, "THREADS", 4)
    monkeypatch.setattr(fast, "_pool", None)
    seen = []

    def multiply(*args, **kwargs):
        seen.append(np.getbufsize())
        return np.multiply(*args, **kwargs)

    out = np.empty((8, 16), dtype=np.complex64)
    fast._threaded(
        multiply, np.ones((1, 16), np.complex64), np.ones((8, 1)), out=out, min_entries=1
    )
    assert len(seen) == 4 and set(seen) == {fast._UFUNC_BUFFER}
    assert np.getbufsize() != fast._UFUNC_BUFFER  # the caller's setting is left alone


@pytest.mark.parametrize("threads", [fast.THREADS, 8])
@pytest.mark.parametrize("out", [False, True])
def test_the_only_large_temporary_is_the_block_starts(monkeypatch, out, threads):
    # The exact values and the turns live in the table's own memory, products are made
    # a few rows at a time and ufunc buffers are kept small: beyond the output, the
    # peak is the block starts (one complex64 row per block), pieces below 128 KiB, and
    # one ufunc buffer (_UFUNC_BUFFER complex64 values) for each thread that multiplies
    # at once. Run with this machine's thread count and with the most any machine uses.
    import tracemalloc

    monkeypatch.setattr(fast, "THREADS", threads)
    monkeypatch.setattr(fast, "_pool", None)
    length, d_model = 8192, 1024
    buffer = np.empty((length, d_model), dtype=np.float32) if out else None
    sinusoidal(length, d_model, dtype=np.float32, out=buffer)  # threads started
    starts_bytes = -(-length // BLOCK) * (d_model // 2) * np.dtype(np.complex64).itemsize
    tracemalloc.start()
    try:
        table = sinusoidal(length, d_model, dtype=np.float32, out=buffer)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    extra = peak - (0 if out else table.nbytes)
    buffers = threads * fast._UFUNC_BUFFER * np.dtype(np.complex64).itemsize
    assert extra <= starts_bytes + 2 * fast._TEMPORARY_BYTES + buffers + 64 * 1024, extra
