"""The sinusoidal table built by angle addition, a block of rows at a time (chapter 11).

Chapter 6 shows that moving k positions rotates every sin/cos pair by the angle
``k * omega``. Chapter 11 turns that into an algorithm. Write each position as
``p = q * BLOCK + r`` with ``0 <= r < BLOCK``. For pair i, with ``a = q * BLOCK * omega_i``
and ``b = r * omega_i``::

    sin(a + b) = sin(a) cos(b) + cos(a) sin(b)
    cos(a + b) = cos(a) cos(b) - sin(a) sin(b)

So sines and cosines are needed only for the BLOCK offsets ``r`` and for the block
starts ``q * BLOCK``. Each of those is split once more, ``r = SPLIT * h + l`` and
``q = SPLIT * g + m``, and sin and cos are computed in float64 only for these digits
(44 rows of angles for an (8192, 1024) table), the factors being products of two
exact values. Every row is then four products and two sums per pair, with no
transcendental function at all.

The two identities are one complex product. Store a pair as ``w = sin + i*cos``, the
order of an interleaved row; then ``w(a + b) = w(a) * (cos(b) - i*sin(b))``. An
interleaved float32 table viewed as complex64 is exactly the array of ``w`` values, so
one NumPy complex multiplication per block writes the finished rows in place. A block
of offsets (BLOCK rows) stays in cache while it is reused for every block start.

Precision. For float32 the products are rounded to float32: each entry is within
``4 * 2**-24`` (about 2.4e-7) of the exact value, against ``2**-25`` for the float64
values rounded once. For float64 the same argument gives about 4.4e-16 plus the
rounding of the float64 angle itself, as for direct evaluation. Other dtypes (float16,
longdouble) get the float64 table rounded once.

Every row depends on its position alone (the grid of blocks is fixed at multiples
of BLOCK), so a table starting at ``start`` equals the rows ``start, ...`` of a
longer table, bit for bit. For positions below SPLIT every other factor is exactly 1
or i (sin 0 = 0, cos 0 = 1), so those rows equal direct evaluation exactly.
"""

from __future__ import annotations

import contextlib
import itertools
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

BLOCK = 128  # rows per block: position p = BLOCK * q + r, with 0 <= r < BLOCK
SPLIT = 16  # offsets split as r = SPLIT * h + l; block indices as q = SPLIT * g + m

# Large tables split their whole blocks between threads (NumPy releases the GIL inside
# a multiplication). Each row is the same product whichever thread computes it, so the
# table is the same bit for bit with any number of threads.
THREADS = min(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1, 8)
# Below these many results, one thread: handing work to the pool costs about 0.1 ms.
THREADED_MIN_EXP = 2**14  # complex exponentials (each about 15 ns)
THREADED_MIN_PRODUCTS = 2**18  # complex products (each about 1 ns)
_pool: ThreadPoolExecutor | None = None

# Temporaries are kept below glibc's starting mmap threshold (128 KiB), so that their
# memory is reused from call to call instead of being mapped fresh each time. That
# includes the buffer NumPy's ufuncs fill when an operand is broadcast (8192 elements by
# default: 128 KiB of complex128).
_TEMPORARY_BYTES = 64 * 1024
_UFUNC_BUFFER = _TEMPORARY_BYTES // np.dtype(np.complex128).itemsize


@contextlib.contextmanager
def _small_ufunc_buffers():
    """Ufuncs in this thread use buffers of _UFUNC_BUFFER elements inside the block."""
    previous = np.setbufsize(_UFUNC_BUFFER)
    try:
        yield
    finally:
        np.setbufsize(previous)


_HIGH_OFFSET_DIGITS, _LOW_OFFSET_DIGITS = np.arange(BLOCK // SPLIT), np.arange(SPLIT)

# dtype of the table -> the complex dtype its interleaved rows can be viewed as
_COMPLEX = {
    np.dtype(np.float32): np.dtype(np.complex64),
    np.dtype(np.float64): np.dtype(np.complex128),
}


def _exact(values: np.ndarray, frequencies: np.ndarray, out: np.ndarray | None = None):
    """The turn ``cos(x) - i*sin(x)`` for every angle x = value * frequency, in float64.

    ``np.exp`` of an imaginary number computes the cosine and the sine of one angle
    together, bit for bit what ``np.cos`` and ``np.sin`` give, and faster than the two.
    Values are integers below 2**53, exact in float64, so each angle is one correctly
    rounded product, as in direct evaluation. ``out``, optional, is a complex128 array
    of shape (values.size, frequencies.size) to hold the result.
    """
    if out is None:
        out = np.empty((values.size, frequencies.size), dtype=np.complex128)
    out.real = 0.0
    np.multiply(values.astype(np.float64)[:, None], -frequencies[None, :], out=out.imag)
    _threaded(np.exp, out, out, out=out, min_entries=THREADED_MIN_EXP)
    return out


def _threaded(ufunc, a: np.ndarray, b: np.ndarray, *, out: np.ndarray, min_entries: int):
    """``ufunc(a, b, out=out)`` (or ``ufunc(a, out=out)`` when b is out), its rows split
    between up to THREADS threads when out has at least ``min_entries`` entries.
    ``a`` and ``b`` broadcast against ``out``. The buffer size is a per-thread setting,
    so each thread sets it: a broadcast operand costs every thread one small buffer
    (_UFUNC_BUFFER elements), and the memory beyond the output grows with the threads
    by that much each."""
    threads = min(THREADS, out.shape[0]) if out.size >= min_entries else 1

    def part(lo, hi):
        first = a if a.shape[0] == 1 else a[lo:hi]
        with _small_ufunc_buffers():
            if b is out:
                ufunc(first, out=out[lo:hi])
            else:
                ufunc(first, b if b.shape[0] == 1 else b[lo:hi], out=out[lo:hi])

    if threads <= 1:
        part(0, out.shape[0])
        return
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(max_workers=THREADS, thread_name_prefix="posenc")
    bounds = np.linspace(0, out.shape[0], threads + 1).round().astype(int)
    jobs = [_pool.submit(part, lo, hi) for lo, hi in itertools.pairwise(bounds)]
    for job in jobs:
        job.result()


def _digits(values: np.ndarray, base: int):
    """The high digits ``v // base`` and low digits ``v % base`` of ``values``: the run
    of each that occurs, and where each value's digits sit in those runs."""
    high, low = values // base, values % base
    high_first, low_first = int(high.min()), int(low.min())
    high_run = np.arange(high_first, int(high.max()) + 1)
    low_run = np.arange(low_first, int(low.max()) + 1)
    return high_run, low_run, high - high_first, low - low_first


def _run_digits(first: int, last: int, base: int):
    """The runs of high digits ``v // base`` and low digits ``v % base`` that occur in
    ``first, first + 1, ..., last``, without searching it."""
    high_first, high_last = first // base, last // base
    if high_first == high_last:
        low_first, low_last = first % base, last % base
    else:
        low_first, low_last = 0, base - 1
    return np.arange(high_first, high_last + 1), np.arange(low_first, low_last + 1)


def _product(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """``out = a * b`` for complex rows: ``a`` and ``b`` are each (n, P) or one row (P,).

    The product is computed in the inputs' precision and rounded once to out's dtype
    (complex128 factors into a complex64 table), a few rows at a time, so that no
    temporary reaches glibc's mmap threshold (each would cost new pages every call; a
    ufunc asked to cast allocates a 128 KiB buffer of its own, hence no ``casting=``).
    NumPy multiplies complex numbers with one code path for every shape here but one:
    (1, 1) by (1,) takes another, which can round differently. With one pair per row
    both sides are made plain vectors, so a row never depends on the table. The order
    of the factors is kept too: a rounding inside the product may fall on a or on b.
    """
    if out.shape[1] == 1:
        a, b = (np.broadcast_to(x, out.shape)[:, 0].copy() for x in (a, b))
        out[:, 0] = a * b
        return
    wide = np.result_type(a, b)
    if wide == out.dtype:
        np.multiply(a, b, out=out)
        return
    step = max(1, _TEMPORARY_BYTES // (out.shape[1] * wide.itemsize))
    for lo in range(0, out.shape[0], step):
        out[lo : lo + step] = (a if a.ndim == 1 else a[lo : lo + step]) * (
            b if b.ndim == 1 else b[lo : lo + step]
        )


def _blocks(spec) -> list[tuple[int, int, int, int]]:
    """The blocks of the table as ``(k, row, t, n)``: n rows from table row ``row`` are
    ``turns[t : t + n]`` times ``starts[k]`` (see :func:`_factors`)."""
    first, last = spec.start, spec.start + spec.length
    every_offset = spec.length >= BLOCK
    blocks, row = [], 0
    for k, q in enumerate(range(first // BLOCK, (last - 1) // BLOCK + 1)):
        r_from, r_to = max(first - q * BLOCK, 0), min(last - q * BLOCK, BLOCK)
        blocks.append((k, row, r_from if every_offset else row, r_to - r_from))
        row += r_to - r_from
    return blocks


def _factors(spec, ctype, *, turns_out=None, scratch=None) -> tuple[np.ndarray, np.ndarray]:
    """The two factors of every row, rounded to ``ctype``.

    Returns ``starts`` (the pair at each block start the table touches) and ``turns``
    (the turn by each offset it needs: all BLOCK of them, or a short table's own).
    ``turns_out``, optional, is where to write the BLOCK turns of a table of BLOCK rows
    or more; ``scratch``, optional, a 1-D complex128 array that the exact values may use
    while the factors are made. Both let the table's own memory, which is written
    anyway, hold what would otherwise be new temporaries.
    """
    with _small_ufunc_buffers():
        return _make_factors(spec, ctype, turns_out, scratch)


def _make_factors(spec, ctype, turns_out, scratch) -> tuple[np.ndarray, np.ndarray]:
    first, last = spec.start, spec.start + spec.length
    q_first, q_last = first // BLOCK, (last - 1) // BLOCK
    every_offset = spec.length >= BLOCK

    # Exact sin and cos, in one call, for the two digits of every offset and of every
    # block index: r = SPLIT * h + l and q = SPLIT * g + m, so that
    # turn(r) = turn(SPLIT * h) * turn(l) and
    # pair(BLOCK * q) = pair(BLOCK * SPLIT * g) * turn(BLOCK * m).
    if every_offset:
        hs, ls = _HIGH_OFFSET_DIGITS, _LOW_OFFSET_DIGITS
    else:
        hs, ls, h_at, l_at = _digits(np.arange(first, last) % BLOCK, SPLIT)
    gs, ms = _run_digits(q_first, q_last, SPLIT)
    values = np.concatenate([SPLIT * hs, ls, BLOCK * SPLIT * gs, BLOCK * ms])
    frequencies = spec.frequencies
    pairs = frequencies.size
    held = None
    if scratch is not None and scratch.size >= values.size * pairs:
        held = scratch[: values.size * pairs].reshape(values.size, pairs)
    exact = _exact(values, frequencies, out=held)
    h_turns, l_turns = exact[: hs.size], exact[hs.size : hs.size + ls.size]
    g_turns, m_turns = exact[hs.size + ls.size : -ms.size], exact[-ms.size :]
    g_pairs = np.empty_like(g_turns)  # pair = sin + i*cos = i * turn: an exact swap
    np.negative(g_turns.imag, out=g_pairs.real)
    g_pairs.imag = g_turns.real
    # Products in complex128, each rounded once to ctype: the digits, and so every
    # factor, depend on the position alone. Block indices with the same high digit g
    # are a run, whose low digits m are a run too.
    starts = np.empty((q_last - q_first + 1, pairs), dtype=ctype)
    for g, m_first in enumerate(range(q_first - q_first % SPLIT, q_last + 1, SPLIT)):
        lo, hi = max(m_first, q_first), min(m_first + SPLIT, q_last + 1)
        m = lo - m_first - int(ms[0])
        _product(g_pairs[g], m_turns[m : m + hi - lo], starts[lo - q_first : hi - q_first])
    if every_offset:  # as many digits h at a time as keep the temporary small
        turns = np.empty((BLOCK, pairs), dtype=ctype) if turns_out is None else turns_out
        by_h = turns.reshape(hs.size, SPLIT, pairs)
        step = _TEMPORARY_BYTES // (SPLIT * pairs * exact.itemsize)
        if pairs > 1 and step >= 2:
            for h in range(0, hs.size, step):
                by_h[h : h + step] = h_turns[h : h + step, None] * l_turns[None]
        else:
            for h, h_turn in enumerate(h_turns):
                _product(h_turn, l_turns, by_h[h])
    else:
        turns = np.empty((spec.length, pairs), dtype=ctype)
        _product(h_turns[h_at], l_turns[l_at], turns)
    return starts, turns


def table(spec, out: np.ndarray | None = None) -> np.ndarray:
    """The table described by a :class:`posenc.encoding.TableSpec`, by angle addition,
    written into ``out`` (checked by the caller) when one is given."""
    length, d_model, dtype = spec.length, spec.d_model, spec.dtype
    if dtype not in _COMPLEX:  # float16, longdouble: the float64 table, rounded once
        wide = table(spec._replace(dtype=np.dtype(np.float64)))
        if out is None:
            return wide.astype(dtype)
        np.copyto(out, wide, casting="same_kind")
        return out
    ctype = _COMPLEX[dtype]
    if out is None:
        out = np.empty((length, d_model), dtype=dtype)
    if length == 0:
        return out
    blocks = _blocks(spec)
    pairs = (d_model + 1) // 2

    if spec.layout == "interleaved" and d_model % 2 == 0 and pairs > 1:
        # The table viewed as complex numbers, one per pair, sin + i*cos: the products
        # write finished rows in place. Whole blocks go in one broadcast product,
        # which reuses the block of offsets (in cache) for every block start.
        rows = out.view(ctype)
        whole = [block for block in blocks if block[3] == BLOCK]
        turns_out = scratch = None
        if whole:
            # The turns are kept in the last whole block, made last, in place; the
            # exact values in the whole blocks before it, overwritten once used. New
            # temporaries would cost fresh pages of their own.
            k_last, row_last = whole[-1][:2]
            turns_out = rows[row_last : row_last + BLOCK]
            scratch = rows[whole[0][1] : row_last].reshape(-1).view(np.complex128)
        starts, turns = _factors(spec, ctype, turns_out=turns_out, scratch=scratch)
        for k, row, t, n in blocks:
            if n < BLOCK:
                _product(turns[t : t + n], starts[k], rows[row : row + n])
        if len(whole) > 1:
            k, row = whole[0][:2]
            inner = rows[row:row_last].reshape(len(whole) - 1, BLOCK, pairs)
            _whole_blocks(turns, starts[k:k_last], inner)
        if whole:
            last = starts[k_last][None]
            _threaded(np.multiply, turns, last, out=turns, min_entries=THREADED_MIN_PRODUCTS)
        return out
    starts, turns = _factors(spec, ctype)
    scratch = np.empty((min(BLOCK, length), pairs), dtype=ctype)
    for k, row, t, n in blocks:
        _product(turns[t : t + n], starts[k], scratch[:n])
        _place(out[row : row + n], scratch[:n], spec.layout)
    return out


def _whole_blocks(turns: np.ndarray, starts: np.ndarray, out: np.ndarray) -> None:
    """``out[j] = turns * starts[j]`` for every block j, on up to THREADS threads."""
    _threaded(np.multiply, turns[None], starts[:, None], out=out, min_entries=THREADED_MIN_PRODUCTS)


def _place(rows: np.ndarray, w: np.ndarray, layout: str) -> None:
    """Copy the sines and cosines of ``w`` into ``rows`` in the given column layout."""
    d_model = rows.shape[1]
    if layout == "interleaved":
        rows[:, 0::2] = w.real
        rows[:, 1::2] = w.imag[:, : d_model // 2]
    else:
        pairs = w.shape[1]
        rows[:, :pairs] = w.real
        rows[:, pairs:] = w.imag[:, : d_model // 2]
