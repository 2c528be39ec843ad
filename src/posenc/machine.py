"""What the machine allows: the bounds chapter 11 measures its constructions against.

A bound is only a bound if it does what the measured code does, on as many threads.
This module records the machine (CPU, caches, transparent huge pages, glibc, the
threads each path really uses) and measures, every time as the median, min and max of
several rounds with the samples kept:

1. **Bandwidth, thread-matched.** With one thread and with the threads
   :mod:`posenc.fast` uses for a large table: *warm fill* (write an existing array),
   *copy* (read one existing array, write another; read plus write bytes are counted)
   and *fresh fill* (``np.empty`` and a fill: every page new), at sizes that span the
   caches. Threads split the rows between them, as :func:`posenc.fast._threaded` does;
   NumPy releases the GIL inside ``fill`` and ``copyto``, and the speedup of the
   threaded runs over one thread on large arrays is recorded as the evidence. Also
   PyTorch's ``clone`` of the RoPE benchmark's q with 1 and 2 threads.
2. **The allocator**, each probe in a fresh Python process with glibc's default malloc
   settings (see below).
3. **The goal**: a new (8192, 1024) table (:func:`posenc.sinusoidal`, float32 and
   float64) at most :data:`GOAL_MULTIPLE` times a thread-matched fresh fill of the
   same shape and dtype: the median of three ratios, each from one repetition that
   times the two side by side (:func:`posenc.benchmark.time_side_by_side`).
4. **RoPE's share of an attention layer** on the CPU: PyTorch's
   ``scaled_dot_product_attention(q, k, v, is_causal=True)`` and
   :class:`posenc.rotary.RotaryEmbedding` applied to q and k, side by side.

A sample above :data:`OUTLIER_FACTOR` times the median of its series is flagged as an
outlier and named in the report, with what it was.

**glibc's dynamic mmap threshold** (glibc ``malloc/malloc.c``, ``__libc_free`` and
``sysmalloc``; the ``mallopt(3)`` manual page, ``M_MMAP_THRESHOLD``). A request of at
least the threshold is served by a fresh ``mmap`` and returned to the kernel by
``munmap`` when freed; smaller ones come from the heap and are reused. The threshold
starts at 128 KiB (``DEFAULT_MMAP_THRESHOLD_MIN``). When a mapped chunk is freed whose
size is above the threshold and at most ``DEFAULT_MMAP_THRESHOLD_MAX``
(``4 * 1024 * 1024 * sizeof(long)``: 32 MiB on 64-bit), the threshold rises to that
chunk's size (and the trim threshold to twice that), so the next request of that size
is served from the heap, in pages already mapped. A chunk is the request plus a header,
rounded up to whole pages: an array of exactly 32 MiB or more makes a chunk above the
maximum, never raises the threshold to its size, and is mapped fresh on every call,
with every page faulted in and zeroed by the kernel again. A (8192, 1023) float32
array, 32 KiB under 32 MiB, is mapped once and then reused; a (8192, 1024) one never is.
Setting ``M_MMAP_THRESHOLD`` or ``M_TRIM_THRESHOLD`` with ``mallopt`` turns the
dynamic adjustment off (:func:`posenc.benchmark.set_malloc` does, for the table
benchmark), which is why the probes run in fresh processes.

**NumPy's huge-page advice** (NumPy ``numpy/_core/src/multiarray/alloc.c``,
``indicate_hugepages``; NumPy's reference, "Global state", "madvise hugepage on
Linux"). On Linux, NumPy calls ``madvise(MADV_HUGEPAGE)`` on every array data block of
4 MiB (``1 << 22`` bytes) or more when its ``madvise_hugepage`` setting is on: by
default on kernels 4.6 and newer, or as ``NUMPY_MADVISE_HUGEPAGE`` says at import; it
is read by ``numpy._core.multiarray._get_madvise_hugepage`` and changed by the private
``_set_madvise_hugepage``, which returns the previous value. With the kernel's
transparent huge pages in ``madvise`` (or ``always``) mode, a new large array is then
faulted in 2 MiB pages, each zeroed whole by the kernel: far fewer faults, and much of
a fresh fill's time is that zeroing. The probes measure a 64 MiB fresh fill with the
advice on and off.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import math
import os
import platform
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from posenc import benchmark, fast
from posenc.encoding import sinusoidal

KIB, MIB, GIB = 2**10, 2**20, 2**30
BANDWIDTH_SIZES = (256 * KIB, MIB, 4 * MIB, 16 * MIB, 64 * MIB, 256 * MIB)
QUICK_BANDWIDTH_SIZES = (256 * KIB, 4 * MIB)
MAX_ARRAY_BYTES = GIB  # the largest array measured: 4x L3 where that is below it
ROW_WIDTH = 1024  # float32 columns of the arrays the bandwidth is measured on
OUTLIER_FACTOR = 3.0
GOAL_SIZE = (8192, 1024)
GOAL_DTYPES = ("float32", "float64")
GOAL_MULTIPLE = 2.0  # a new table against a thread-matched fresh fill
GOAL_REPETITIONS = 3
ROPE_SHAPE = (1, 32, 2048, 128)
QUICK_ROPE_SHAPE = (1, 4, 256, 64)
ROPE_THREADS = 2
TORCH_CLONE_THREADS = (1, 2)
ALLOCATOR_SHAPES = ((8192, 1024), (8192, 1023))  # 32 MiB, and 32 KiB under it
ALLOCATOR_CALLS = 10
HUGEPAGE_BYTES = 64 * MIB
DEFAULT_OUT = Path("data") / "machine.json"
CACHE_ROOT = Path("/sys/devices/system/cpu/cpu0/cache")
# glibc's allocator reads these from the environment; the probes run without them.
_MALLOC_ENVIRONMENT = ("GLIBC_TUNABLES", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")


# --- summaries and outliers -----------------------------------------------------------


def summarize(samples) -> dict:
    """Median, min and max of ``samples`` (seconds, or any positive numbers), the
    samples themselves, and the indices of those above OUTLIER_FACTOR times the median."""
    values = [float(v) for v in samples]
    if not values:
        raise ValueError(f"samples must not be empty, got {samples!r}")
    median = float(np.median(values))
    return {
        "median": median,
        "min": min(values),
        "max": max(values),
        "samples": values,
        "outliers": [i for i, v in enumerate(values) if v > OUTLIER_FACTOR * median],
    }


def named_outliers(series: dict[str, dict]) -> list[dict]:
    """Every outlier of the summaries in ``series`` (name -> :func:`summarize` result),
    with the name of what it was, its index, its value and its multiple of the median."""
    found = []
    for what, summary in series.items():
        for index in summary["outliers"]:
            value = summary["samples"][index]
            found.append(
                {
                    "what": what,
                    "index": index,
                    "value": value,
                    "x_median": value / summary["median"],
                }
            )
    return found


def paired_ratios(numerator, denominator) -> list[float]:
    """Round-by-round ratios of two series timed side by side: sample ``i`` of each
    comes from round ``i`` of :func:`posenc.benchmark.time_side_by_side`, so a slow
    moment of the machine falls on both terms of the same ratio."""
    top, bottom = list(numerator), list(denominator)
    if len(top) != len(bottom) or not top:
        raise ValueError(f"need two series of one nonzero length, got {len(top)} and {len(bottom)}")
    return [float(a) / float(b) for a, b in zip(top, bottom, strict=True)]


def median_interval(values, confidence: float = 0.95) -> dict:
    """The narrowest interval between order statistics, ``sorted(values)[k - 1]`` to
    ``sorted(values)[n - k]``, that holds the median of the distribution the values
    were drawn from with probability at least ``confidence``, if they are independent
    draws; its exact ``coverage`` is ``1 - 2 P(Binomial(n, 1/2) < k)``. Five values
    give the min and max, at 93.75%, when ``confidence`` is at most that."""
    ordered = sorted(float(v) for v in values)
    n = len(ordered)
    if n == 0:
        raise ValueError("values must not be empty")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")

    def coverage(k):
        below = sum(math.comb(n, i) for i in range(k)) / 2**n
        return 1 - 2 * below

    k = 1
    while k + 1 <= (n + 1) // 2 and coverage(k + 1) >= confidence:
        k += 1
    return {"low": ordered[k - 1], "high": ordered[n - k], "k": k, "coverage": coverage(k)}


# --- machine facts --------------------------------------------------------------------


def parse_size(text: str) -> int:
    """Bytes in a sysfs cache size such as ``"48K"``, ``"2048K"`` or ``"300M"``."""
    units = {"K": KIB, "M": MIB, "G": GIB}
    stripped = text.strip()
    digits, unit = (stripped[:-1], stripped[-1]) if stripped[-1:] in units else (stripped, "")
    if not digits.isdigit():
        raise ValueError(f"text must be a cache size like '48K', got {text!r}")
    return int(digits) * units.get(unit, 1)


def cache_levels(root: Path = CACHE_ROOT) -> list[dict]:
    """The caches of one CPU, from the ``index*`` folders of a sysfs cache directory:
    level, type, size (bytes and as written) and the CPUs sharing it, by level.
    An empty list where the directory does not exist (not Linux)."""
    root = Path(root)
    caches = []
    for index in sorted(root.glob("index*")):
        fields = {}
        for name in ("level", "type", "size", "shared_cpu_list"):
            try:
                fields[name] = (index / name).read_text().strip()
            except OSError:
                fields[name] = None
        if fields["level"] is None or fields["size"] is None:
            continue
        caches.append(
            {
                "level": int(fields["level"]),
                "type": fields["type"],
                "size": fields["size"],
                "bytes": parse_size(fields["size"]),
                "shared_cpu_list": fields["shared_cpu_list"],
            }
        )
    return sorted(caches, key=lambda c: (c["level"], c["type"] or ""))


def data_cache_bytes(caches: list[dict]) -> dict[str, int]:
    """``{"L1d": ..., "L2": ..., "L3": ...}``: the data (or unified) caches by level."""
    found = {}
    for cache in caches:
        if cache["type"] == "Instruction":
            continue
        name = "L1d" if cache["level"] == 1 else f"L{cache['level']}"
        found[name] = cache["bytes"]
    return found


def _kernel_choice(path: str) -> str | None:
    try:
        text = Path(path).read_text()
    except OSError:
        return None
    chosen = [word[1:-1] for word in text.split() if word.startswith("[")]
    return chosen[0] if chosen else None


def _madvise_setter():
    try:
        from numpy._core import multiarray
    except ImportError:  # NumPy 1.x
        from numpy.core import multiarray
    return getattr(multiarray, "_get_madvise_hugepage", None), getattr(
        multiarray, "_set_madvise_hugepage", None
    )


def numpy_madvise_hugepage() -> bool | None:
    """NumPy's madvise-hugepage setting (None where this NumPy does not expose it)."""
    getter, _ = _madvise_setter()
    return None if getter is None else bool(getter())


@contextlib.contextmanager
def madvise_hugepage(enabled: bool):
    """NumPy's madvise-hugepage setting set to ``enabled`` inside the block, then restored."""
    if not isinstance(enabled, bool):
        raise TypeError(f"enabled must be a bool, got {enabled!r}")
    _, setter = _madvise_setter()
    if setter is None:
        raise RuntimeError("this NumPy has no _set_madvise_hugepage")
    previous = setter(enabled)
    try:
        yield
    finally:
        setter(previous)


def fast_threads(length: int, d_model: int) -> int:
    """The threads :mod:`posenc.fast` uses for the whole blocks of a new (length, d_model)
    interleaved table, from its constants: up to ``fast.THREADS``, once the products
    reach ``fast.THREADED_MIN_PRODUCTS``, and no more than the rows of blocks split."""
    for name, value in (("length", length), ("d_model", d_model)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must be an int, got {value!r}")
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
    whole = length // fast.BLOCK
    inner = max(whole - 1, 0)  # the last whole block is made from the turns in place
    products = inner * fast.BLOCK * (d_model // 2)
    if inner == 0 or products < fast.THREADED_MIN_PRODUCTS:
        return 1
    return min(fast.THREADS, inner)


def machine_facts() -> dict:
    """What the numbers were measured on, the caches and threads included."""
    caches = cache_levels()
    facts = benchmark.machine()
    facts.pop("numpy_threads", None)  # a per-path count follows, measured from the code
    facts |= {
        "caches": caches,
        "cache_bytes": data_cache_bytes(caches),
        "transparent_hugepages": _kernel_choice("/sys/kernel/mm/transparent_hugepage/enabled"),
        "transparent_hugepages_defrag": _kernel_choice(
            "/sys/kernel/mm/transparent_hugepage/defrag"
        ),
        "glibc": _glibc_version(),
        "numpy_madvise_hugepage": numpy_madvise_hugepage(),
        "platform": platform.platform(),
        "threads": {
            "posenc.fast large table": fast_threads(*GOAL_SIZE),
            "posenc.fast.THREADS": fast.THREADS,
        },
    }
    try:
        import torch

        facts["threads"]["torch"] = torch.get_num_threads()
    except ImportError:
        pass
    return facts


def _glibc_version() -> str | None:
    try:
        return os.confstr("CS_GNU_LIBC_VERSION")
    except (AttributeError, ValueError, OSError):
        return None


# --- bandwidth ------------------------------------------------------------------------

_POOLS: dict[int, ThreadPoolExecutor] = {}


def split_rows(work: Callable[[int, int], object], rows: int, threads: int) -> None:
    """``work(lo, hi)`` on contiguous row ranges covering ``range(rows)``, on ``threads``
    threads (the calling thread alone for one), split as :mod:`posenc.fast` splits."""
    if isinstance(threads, bool) or not isinstance(threads, int):
        raise TypeError(f"threads must be an int, got {threads!r}")
    if threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    threads = min(threads, max(rows, 1))
    if threads == 1:
        work(0, rows)
        return
    if threads not in _POOLS:
        _POOLS[threads] = ThreadPoolExecutor(threads, thread_name_prefix="posenc-machine")
    bounds = np.linspace(0, rows, threads + 1).round().astype(int)
    jobs = [_POOLS[threads].submit(work, lo, hi) for lo, hi in itertools.pairwise(bounds)]
    for job in jobs:
        job.result()


def threaded_fill(out: np.ndarray, value: float, threads: int) -> np.ndarray:
    """``out.fill(value)`` with out's rows split between ``threads`` threads."""
    split_rows(lambda lo, hi: out[lo:hi].fill(value), out.shape[0], threads)
    return out


def threaded_copy(source: np.ndarray, out: np.ndarray, threads: int) -> np.ndarray:
    """``np.copyto(out, source)`` with the rows split between ``threads`` threads."""
    if source.shape != out.shape:
        raise ValueError(f"source shape {source.shape} does not match out shape {out.shape}")
    split_rows(lambda lo, hi: np.copyto(out[lo:hi], source[lo:hi]), out.shape[0], threads)
    return out


def fresh_fill(shape, dtype, threads: int) -> np.ndarray:
    """A new array (``np.empty``: new pages) filled on ``threads`` threads."""
    return threaded_fill(np.empty(shape, dtype=dtype), 0.5, threads)


def bandwidth_sizes(l3_bytes: int | None, *, quick: bool = False) -> tuple[int, ...]:
    """The array sizes measured: 256 KiB to 256 MiB, and 4x L3 where that is larger,
    up to MAX_ARRAY_BYTES."""
    if quick:
        return QUICK_BANDWIDTH_SIZES
    largest = min(4 * l3_bytes, MAX_ARRAY_BYTES) if l3_bytes else 0
    return BANDWIDTH_SIZES + ((largest,) if largest > BANDWIDTH_SIZES[-1] else ())


def measure_bandwidth(sizes, thread_counts, *, rounds: int, min_sample: float) -> dict:
    """Warm fill, copy and fresh fill at every size and thread count, side by side."""
    rows = []
    for nbytes in sizes:
        shape = (max(nbytes // (4 * ROW_WIDTH), 1), ROW_WIDTH)
        actual = shape[0] * shape[1] * 4
        source = np.ones(shape, dtype=np.float32)
        target = np.zeros(shape, dtype=np.float32)  # every page touched before timing
        calls, moved = {}, {}
        for threads in thread_counts:
            calls[("fill_warm", threads)] = lambda t=threads, o=target: threaded_fill(o, 0.5, t)
            calls[("copy", threads)] = lambda t=threads, i=source, o=target: threaded_copy(i, o, t)
            calls[("fill_fresh", threads)] = lambda t=threads, s=shape: fresh_fill(s, np.float32, t)
            moved |= {
                ("fill_warm", threads): actual,
                ("copy", threads): 2 * actual,
                ("fill_fresh", threads): actual,
            }
        samples = benchmark.time_side_by_side(calls, rounds=rounds, min_sample=min_sample)
        for (kind, threads), seconds in samples.items():
            summary = summarize(seconds)
            rows.append(
                {
                    "kind": kind,
                    "bytes": actual,
                    "threads": threads,
                    "bytes_moved": moved[(kind, threads)],
                    "gb_per_s": moved[(kind, threads)] / summary["median"] / 1e9,
                    "seconds": summary,
                }
            )
        del source, target, calls
    return {"rows": rows, "speedups": thread_speedups(rows, thread_counts)}


def thread_speedups(rows: list[dict], thread_counts) -> dict:
    """Time on one thread over time on the most threads, by kind and size, and whether
    the threads made large arrays (16 MiB or more) faster: the evidence that NumPy
    released the GIL inside ``fill`` and ``copyto``."""
    most = max(thread_counts)
    speedups = []
    for one in rows:
        if one["threads"] != 1 or most == 1:
            continue
        for other in rows:
            if (other["kind"], other["bytes"], other["threads"]) == (
                one["kind"],
                one["bytes"],
                most,
            ):
                ratio = one["seconds"]["median"] / other["seconds"]["median"]
                speedups.append({"kind": one["kind"], "bytes": one["bytes"], "speedup": ratio})
    large = [s["speedup"] for s in speedups if s["bytes"] >= 16 * MIB]
    return {
        "threads": most,
        "rows": speedups,
        "best_large": max(large) if large else None,
        "gil_released": None if not large else max(large) > 1.2,
    }


def measure_torch_clone(shape, *, rounds: int, min_sample: float) -> list[dict] | None:
    """``q.clone()`` of a float32 tensor of ``shape`` with 1 and 2 torch threads, with
    freed memory reused (as in a forward loop); GB/s counts read plus write."""
    try:
        import torch
    except ImportError:
        return None
    q = torch.randn(shape, dtype=torch.float32, generator=torch.Generator().manual_seed(0))
    moved = 2 * q.numel() * q.element_size()
    before = torch.get_num_threads()
    fixed = benchmark.set_malloc(benchmark.WARM_MALLOC)
    rows = []
    try:
        for threads in TORCH_CLONE_THREADS:
            torch.set_num_threads(threads)
            samples = benchmark.time_side_by_side(
                {"clone": q.clone}, rounds=rounds, min_sample=min_sample
            )["clone"]
            summary = summarize(samples)
            rows.append(
                {
                    "shape": list(shape),
                    "threads": threads,
                    "bytes_moved": moved,
                    "gb_per_s": moved / summary["median"] / 1e9,
                    "seconds": summary,
                }
            )
    finally:
        torch.set_num_threads(before)
        if fixed:
            benchmark.set_malloc(benchmark.MALLOC)
    return rows


# --- the allocator --------------------------------------------------------------------


def allocator_probe(shape, *, dtype="float32", calls=ALLOCATOR_CALLS, hugepage=None) -> dict:
    """In a fresh Python process with glibc's default malloc settings: ``calls`` times
    ``np.empty(shape, dtype)`` and a fill, with the minor page faults (``ru_minflt``)
    and milliseconds of each call. ``hugepage`` (bool), optional, sets NumPy's
    madvise-hugepage in that process first."""
    if hugepage is not None and not isinstance(hugepage, bool):
        raise TypeError(f"hugepage must be a bool or None, got {hugepage!r}")
    if isinstance(calls, bool) or not isinstance(calls, int) or calls < 1:
        raise ValueError(f"calls must be an int >= 1, got {calls!r}")
    request = {"shape": [int(n) for n in shape], "dtype": str(np.dtype(dtype)), "calls": calls}
    request["hugepage"] = hugepage
    code = f"from posenc.machine import _probe_child; _probe_child({json.dumps(request)!r})"
    env = {k: v for k, v in os.environ.items() if k not in _MALLOC_ENVIRONMENT}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    found = json.loads(done.stdout.strip().splitlines()[-1])
    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    return {
        "shape": request["shape"],
        "dtype": request["dtype"],
        "bytes": nbytes,
        "madvise_hugepage": found["madvise_hugepage"],
        "faults": found["faults"],
        "faults_median": float(np.median(found["faults"])),
        "ms": summarize(found["ms"]),
    }


def _probe_child(request_json: str) -> None:
    """Run by :func:`allocator_probe` in its fresh process; prints one JSON line."""
    request = json.loads(request_json)
    shape, dtype = tuple(request["shape"]), np.dtype(request["dtype"])
    context = contextlib.nullcontext()
    if request["hugepage"] is not None:
        context = madvise_hugepage(request["hugepage"])
    faults, ms = [], []
    with context:
        setting = numpy_madvise_hugepage()
        for _ in range(request["calls"]):
            before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            started = time.perf_counter()
            array = np.empty(shape, dtype=dtype)
            array.fill(0.5)
            del array
            ms.append((time.perf_counter() - started) * 1e3)
            faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    print(json.dumps({"faults": faults, "ms": ms, "madvise_hugepage": setting}))


def measure_allocator(*, calls=ALLOCATOR_CALLS) -> dict:
    """The probes: (8192, 1024) and (8192, 1023) float32 with NumPy's defaults, and a
    64 MiB fresh fill with NumPy's huge-page advice on and off."""
    probes = [allocator_probe(shape, calls=calls) for shape in ALLOCATOR_SHAPES]
    hugepage_shape = (HUGEPAGE_BYTES // (4 * ROW_WIDTH), ROW_WIDTH)
    hugepage = {}
    if numpy_madvise_hugepage() is not None:
        for enabled in (True, False):
            hugepage["on" if enabled else "off"] = allocator_probe(
                hugepage_shape, calls=calls, hugepage=enabled
            )
    return {
        "mmap_threshold_max": 4 * MIB * np.dtype(np.int_).itemsize,  # glibc, 64-bit long
        "probes": probes,
        "hugepage": hugepage,
    }


# --- the goal -------------------------------------------------------------------------


def goal_from_repetitions(repetitions: list[dict[str, list[float]]], *, target=GOAL_MULTIPLE):
    """The goal from side-by-side samples: each repetition maps ``"table"`` and
    ``"fill"`` to their seconds; its ratio is median(table) / median(fill), and the goal
    is met when the median of the ratios is at most ``target``."""
    if not repetitions:
        raise ValueError(f"repetitions must not be empty, got {repetitions!r}")
    ratios = []
    for index, samples in enumerate(repetitions):
        missing = {"table", "fill"} - set(samples)
        if missing:
            raise ValueError(f"repetitions[{index}] lacks {sorted(missing)}: got {list(samples)}")
        ratios.append(float(np.median(samples["table"]) / np.median(samples["fill"])))
    value = float(np.median(ratios))
    return {"ratios": ratios, "value": value, "target": target, "met": value <= target}


def measure_goal(size, *, rounds: int, min_sample: float) -> list[dict]:
    """A new table against a fresh fill on the threads posenc.fast uses, per dtype,
    GOAL_REPETITIONS times side by side, with new pages every call."""
    length, d_model = size
    threads = fast_threads(length, d_model)
    results = []
    for dtype in GOAL_DTYPES:
        calls = {
            "table": lambda d=dtype: sinusoidal(length, d_model, dtype=d),
            "fill": lambda d=dtype: fresh_fill((length, d_model), d, threads),
        }
        repetitions = [
            benchmark.time_side_by_side(calls, rounds=rounds, min_sample=min_sample)
            for _ in range(GOAL_REPETITIONS)
        ]
        goal = goal_from_repetitions(repetitions)
        results.append(
            {
                "length": length,
                "d_model": d_model,
                "dtype": dtype,
                "fill_threads": threads,
                "repetitions": [
                    {name: summarize(seconds) for name, seconds in samples.items()}
                    for samples in repetitions
                ],
            }
            | goal
        )
    return results


# --- RoPE's share of attention --------------------------------------------------------


def measure_rope_share(shape, *, rounds: int, min_sample: float) -> dict | None:
    """Attention (``scaled_dot_product_attention``, causal) and RoPE on q and k
    (:class:`posenc.rotary.RotaryEmbedding`), side by side on ROPE_THREADS torch threads."""
    try:
        import torch

        from posenc.rotary import RotaryEmbedding
    except ImportError:
        return None
    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(shape, generator=generator) for _ in range(3))
    rope = RotaryEmbedding(shape[-1])
    before = torch.get_num_threads()
    fixed = benchmark.set_malloc(benchmark.WARM_MALLOC)
    try:
        torch.set_num_threads(ROPE_THREADS)
        with torch.inference_mode():
            samples = benchmark.time_side_by_side(
                {
                    "attention": lambda: torch.nn.functional.scaled_dot_product_attention(
                        q, k, v, is_causal=True
                    ),
                    "rope": lambda: rope.apply(q, k),
                },
                rounds=rounds,
                min_sample=min_sample,
            )
    finally:
        torch.set_num_threads(before)
        if fixed:
            benchmark.set_malloc(benchmark.MALLOC)
    attention, rotary = summarize(samples["attention"]), summarize(samples["rope"])
    return {
        "shape": list(shape),
        "dtype": "float32",
        "threads": ROPE_THREADS,
        "attention": attention,
        "rope": rotary,
        "rope_fraction": rotary["median"] / (rotary["median"] + attention["median"]),
    }


# --- the run --------------------------------------------------------------------------


def run(*, quick: bool = False, rounds: int | None = None, progress=None) -> dict:
    """Everything this module measures, as the dict :func:`main` writes."""
    rounds = rounds or (3 if quick else 5)
    min_sample = 0.005 if quick else 0.05
    say = progress or (lambda text: None)
    facts = machine_facts()
    threads = facts["threads"]["posenc.fast large table"]
    thread_counts = sorted({1, threads})
    fixed = benchmark.set_malloc(benchmark.MALLOC)  # new pages for every fresh array
    sizes = bandwidth_sizes(facts["cache_bytes"].get("L3"), quick=quick)
    say("bandwidth")
    bandwidth = measure_bandwidth(sizes, thread_counts, rounds=rounds, min_sample=min_sample)
    say("torch clone")
    clone = measure_torch_clone(
        QUICK_ROPE_SHAPE if quick else ROPE_SHAPE, rounds=rounds, min_sample=min_sample
    )
    say("allocator probes")
    allocator = measure_allocator(calls=3 if quick else ALLOCATOR_CALLS)
    say("goal")
    goal = measure_goal(GOAL_SIZE, rounds=rounds, min_sample=min_sample)
    say("rope share")
    share = measure_rope_share(
        QUICK_ROPE_SHAPE if quick else ROPE_SHAPE, rounds=rounds, min_sample=min_sample
    )
    results = {
        "machine": facts,
        "quick": quick,
        "rounds": rounds,
        "outlier_factor": OUTLIER_FACTOR,
        "malloc": benchmark.MALLOC | {"fixed": fixed},
        "bandwidth": {"thread_counts": thread_counts, "sizes": list(sizes)} | bandwidth,
        "torch_clone": clone,
        "allocator": allocator,
        "goal": goal,
        "rope_share": share,
    }
    results["outliers"] = named_outliers(_series(results))
    return results


def _series(results: dict) -> dict[str, dict]:
    """Every timed series of a run, by a name that says what it was."""
    series = {}
    for row in results["bandwidth"]["rows"]:
        name = f"{row['kind']} {_size(row['bytes'])} on {row['threads']} thread(s)"
        series[name] = row["seconds"]
    for row in results["torch_clone"] or []:
        series[f"torch clone {tuple(row['shape'])} on {row['threads']} thread(s)"] = row["seconds"]
    probes = results["allocator"]["probes"] + list(results["allocator"]["hugepage"].values())
    for probe in probes:
        advice = probe["madvise_hugepage"]
        name = f"new {tuple(probe['shape'])} {probe['dtype']} (madvise_hugepage {advice}), ms"
        series[name] = probe["ms"]
    for row in results["goal"]:
        for index, repetition in enumerate(row["repetitions"]):
            for part, summary in repetition.items():
                what = f"goal {part} {row['length']}x{row['d_model']} {row['dtype']}"
                series[f"{what}, repetition {index + 1}"] = summary
    share = results["rope_share"]
    if share is not None:
        for part in ("attention", "rope"):
            series[f"{part} {tuple(share['shape'])}"] = share[part]
    return series


def _size(nbytes: int) -> str:
    return f"{nbytes / MIB:g} MiB" if nbytes >= MIB else f"{nbytes / KIB:g} KiB"


def format_report(results: dict) -> str:
    """The report :func:`main` prints."""
    facts = results["machine"]
    caches = ", ".join(f"{k} {_size(v)}" for k, v in facts["cache_bytes"].items())
    lines = [
        f"{facts['cpu']}, {facts['cores']} cores; caches: {caches or 'unknown'}",
        f"THP {facts['transparent_hugepages']} (defrag {facts['transparent_hugepages_defrag']}),"
        f" {facts['glibc']}, NumPy madvise_hugepage {facts['numpy_madvise_hugepage']}",
        f"threads: {facts['threads']}",
        "\nbandwidth, GB/s (median; min-max of the time as GB/s)",
    ]
    for row in results["bandwidth"]["rows"]:
        seconds = row["seconds"]
        fastest, slowest = row["bytes_moved"] / seconds["min"], row["bytes_moved"] / seconds["max"]
        lines.append(
            f"  {row['kind']:<10} {_size(row['bytes']):>9} {row['threads']} thread(s): "
            f"{row['gb_per_s']:6.1f} ({slowest / 1e9:.1f}-{fastest / 1e9:.1f})"
        )
    speedups = results["bandwidth"]["speedups"]
    best = speedups["best_large"]
    lines.append(
        f"  {speedups['threads']} threads against 1, 16 MiB or more: best speedup "
        f"{'-' if best is None else f'{best:.2f}'}, GIL released: {speedups['gil_released']}"
    )
    for row in results["torch_clone"] or []:
        lines.append(
            f"  torch clone {tuple(row['shape'])} {row['threads']} thread(s): "
            f"{row['gb_per_s']:.1f} GB/s"
        )
    allocator = results["allocator"]
    lines.append("\nallocator (fresh process, glibc defaults): faults per call, ms per call")
    for probe in allocator["probes"] + list(allocator["hugepage"].values()):
        lines.append(
            f"  {tuple(probe['shape'])} {probe['dtype']} madvise_hugepage "
            f"{probe['madvise_hugepage']}: faults {probe['faults']}, "
            f"median {probe['ms']['median']:.2f} ms"
        )
    lines.append("\ngoal: new table / thread-matched fresh fill (median of 3 ratios)")
    for row in results["goal"]:
        mark = "met" if row["met"] else "NOT MET"
        ratios = ", ".join(f"{r:.2f}" for r in row["ratios"])
        lines.append(
            f"  {row['length']}x{row['d_model']} {row['dtype']} on {row['fill_threads']} "
            f"thread(s): {row['value']:.2f} [{ratios}] (target {row['target']:g}) {mark}"
        )
    share = results["rope_share"]
    if share is not None:
        lines.append(
            f"\nRoPE share of attention at {tuple(share['shape'])}, {share['threads']} threads: "
            f"attention {share['attention']['median'] * 1e3:.2f} ms, RoPE "
            f"{share['rope']['median'] * 1e3:.2f} ms, fraction {share['rope_fraction']:.3f}"
        )
    lines.append(f"\noutliers (above {results['outlier_factor']:g}x their median):")
    for o in results["outliers"]:
        lines.append(
            f"  {o['what']}: sample {o['index']} = {o['value']:.3g} ({o['x_median']:.1f}x)"
        )
    if not results["outliers"]:
        lines.append("  none")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, a few seconds")
    parser.add_argument("--rounds", type=int, default=None, help="rounds per series")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the JSON to write")
    args = parser.parse_args(argv)

    def say(text):
        print(f"measuring {text}", file=sys.stderr, flush=True)

    results = run(quick=args.quick, rounds=args.rounds, progress=say)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1) + "\n")
    print(f"{format_report(results)}\n\nwrote {args.out}")
    return int(not all(row["met"] for row in results["goal"]))
