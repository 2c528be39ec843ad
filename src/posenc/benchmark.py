"""Chapter 11's benchmark: every way of building the table, measured side by side.

For each size and dtype it times every construction in the same run, interleaved
round by round, and reports the median time, the output written per second, the
time as a multiple of the *fill bound* (``np.empty`` plus ``fill`` of an array of the
same shape and dtype: writing the output once, the least any construction can do),
the largest error against exact values, and the peak memory as a multiple of the
output. A second part builds (8192, 1024) tables of the positions just below 10**6.

``make bench`` runs :func:`main`, prints the tables and the goals of chapter 11, and
writes everything to ``data/benchmark.json``, which the chapter reads. Timings are
never asserted by the tests: the machine is shared and noisy.

Two details keep the numbers honest on Linux. Peak memory is the growth of the
process's resident set (``VmHWM``, reset through ``/proc/self/clear_refs``) during one
call; the kernel counts it in batches, so it is reported only for outputs of 4 MiB
and more. And glibc's allocator gets fixed thresholds, its own starting values: every
block of 128 KiB or more is mapped fresh from the kernel when requested and returned
when freed, as in a program's first call, while smaller blocks are kept for reuse.
Left to itself, glibc raises those thresholds as a program runs, and a table's time
then depends on whether the memory it gets was used before: writing 32 MB into
pages already mapped is four times faster here than into new ones.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import math
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from posenc import implementations, reference
from posenc.encoding import sinusoidal

SIZES = (
    (512, 128),
    (1024, 256),
    (2048, 512),
    (4096, 512),
    (8192, 1024),
    (16384, 1024),
    (32768, 1024),
    (65536, 1024),
)
QUICK_SIZES = ((512, 128), (2048, 256))
GOAL_SIZE = (8192, 1024)
FAR_LENGTH, FAR_START = 8192, 10**6 - 8192  # rows 991,808 to 999,999
NAIVE_ENTRIES = 2**18  # the Python loops only up to (1024, 256)
DTYPES = ("float32", "float64")
DEFAULT_OUT = Path("data") / "benchmark.json"

# Chapter 11's goals, at GOAL_SIZE in float32 unless stated.
GOAL_SPEEDUP_OVER_PYTORCH = 2.0
GOAL_MULTIPLE_OF_FILL = 1.6  # a new table against a new array, filled
GOAL_MULTIPLE_OF_WARM_FILL = 3.0  # into an existing array against filling one
GOAL_FLOAT32_ERROR = 5e-7
GOAL_FLOAT64_ERROR = 1e-9
SMALL_SIZES = ((512, 128), (1024, 256))  # where the fast path must not be slower


def annotated_transformer(length, d_model, *, start=0, dtype=np.float32) -> np.ndarray:
    """The table as the Annotated Transformer builds it, with PyTorch on the CPU.

    ``position * div_term`` is an int64 column times a row of the working dtype, so the
    angles are rounded to float32 (or float64), then ``sin`` and ``cos`` fill the even
    and odd columns of a zero table. ``start`` shifts the positions (the original
    always starts at 0). Returns the tensor's memory as a NumPy array.
    """
    import torch

    working = {np.dtype(np.float32): torch.float32, np.dtype(np.float64): torch.float64}
    tdtype = working[np.dtype(dtype)]
    pe = torch.zeros(length, d_model, dtype=tdtype)
    position = torch.arange(start, start + length).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d_model, 2, dtype=tdtype) * -(math.log(10000.0) / d_model))
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe.numpy()


def fill_bound(length, d_model, *, start=0, dtype=np.float32) -> np.ndarray:
    """Write the output once: a new array of the table's shape and dtype, filled."""
    out = np.empty((length, d_model), dtype=dtype)
    out.fill(0.5)
    return out


_BUFFERS: dict[tuple, np.ndarray] = {}


def existing_buffer(length, d_model, dtype) -> np.ndarray:
    """An array of this shape and dtype, allocated and written once, then reused."""
    key = (length, d_model, np.dtype(dtype).str)
    if key not in _BUFFERS:
        _BUFFERS.clear()  # one size at a time: the sizes run one after the other
        buffer = np.empty((length, d_model), dtype=dtype)
        buffer.fill(0)  # every page touched now, not on the first timed write
        _BUFFERS[key] = buffer
    return _BUFFERS[key]


def warm_fill_bound(length, d_model, *, start=0, dtype=np.float32) -> np.ndarray:
    """Write the output once into an existing array: no page faults, the warm bound."""
    out = existing_buffer(length, d_model, dtype)
    out.fill(0.5)
    return out


def sinusoidal_into(length, d_model, *, start=0, dtype=np.float32) -> np.ndarray:
    """``posenc.sinusoidal(..., out=)`` into an existing array."""
    out = existing_buffer(length, d_model, dtype)
    return sinusoidal(length, d_model, start=start, dtype=dtype, out=out)


def _rounded_once(length, d_model, *, start=0, dtype=np.float32) -> np.ndarray:
    # What posenc.sinusoidal did before chapter 11: direct evaluation in float64.
    return implementations.vectorized(length, d_model, start=start).astype(dtype)


@dataclass(frozen=True)
class Method:
    """One construction: its key, its label in tables and figures, and how to call it."""

    name: str
    label: str
    build: Callable[..., np.ndarray]
    dtypes: tuple[str, ...] = DTYPES
    max_entries: int | None = None
    warm: bool = False  # writes into an existing array (allocated before it is timed)

    def applies(self, length: int, d_model: int, dtype: str) -> bool:
        small_enough = self.max_entries is None or length * d_model <= self.max_entries
        return dtype in self.dtypes and small_enough


METHODS = (
    Method("fill", "np.empty + fill (the fresh-page bound)", fill_bound),
    Method("fill_warm", "fill an existing array (the warm bound)", warm_fill_bound, warm=True),
    Method(
        "naive_loops", "naive loops (ch. 3)", implementations.naive_loops, max_entries=NAIVE_ENTRIES
    ),
    Method("vectorized", "vectorized (ch. 4)", implementations.vectorized),
    Method("log_space", "log-space div_term (ch. 5)", implementations.log_space),
    Method("pytorch", "PyTorch, Annotated Transformer", annotated_transformer),
    Method("rounded_once", "float64 vectorized, rounded once", _rounded_once, dtypes=("float32",)),
    Method("sinusoidal", "posenc.sinusoidal (angle addition)", sinusoidal),
    Method(
        "sinusoidal_out", "posenc.sinusoidal, out= an existing array", sinusoidal_into, warm=True
    ),
)


# --- measuring ------------------------------------------------------------------------


def _glibc():
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL("libc.so.6")
        return libc if hasattr(libc, "mallopt") else None
    except OSError:
        return None


M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
MALLOC = {"mmap_threshold": 128 * 1024, "trim_threshold": 128 * 1024}  # glibc's start
WARM_MALLOC = {"mmap_threshold": 2**30, "trim_threshold": 2**30}  # freed memory is reused
PEAK_MIN_BYTES = 4 * 2**20  # the resident-set counters are too coarse below this


def set_malloc(settings: dict[str, int]) -> bool:
    """Fix glibc's mmap and trim thresholds (bytes); False where there is no glibc."""
    libc = _glibc()
    if libc is None:
        return False
    ok = libc.mallopt(M_MMAP_THRESHOLD, settings["mmap_threshold"])
    ok &= libc.mallopt(M_TRIM_THRESHOLD, settings["trim_threshold"])
    return bool(ok)


def _status(key: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(key)


def peak_memory(call: Callable[[], object]) -> int | None:
    """Bytes by which the resident set grew during ``call()`` at its peak (Linux only)."""
    try:
        gc.collect()
        with open("/proc/self/clear_refs", "w") as clear:
            clear.write("5")  # reset the peak (VmHWM) to the current resident set
        before = _status("VmRSS")
        result = call()
        peak = _status("VmHWM")
    except OSError:
        return None
    del result
    return max(peak - before, 0)


def time_side_by_side(
    calls: dict[str, Callable[[], object]], *, rounds: int = 5, min_sample: float = 0.05
) -> dict[str, list[float]]:
    """Seconds per call of every callable, sampled round by round in rotating order.

    Each sample repeats a call enough times to last about ``min_sample`` seconds, so
    that fast calls are not lost in the clock's resolution; every round times every
    callable once, so that a slow moment of the machine falls on all of them alike.
    """
    repeats = {}
    for name, call in calls.items():  # warm up, and size each sample
        started = time.perf_counter()
        call()
        once = time.perf_counter() - started
        repeats[name] = max(1, math.ceil(min_sample / max(once, 1e-9)))
    samples: dict[str, list[float]] = {name: [] for name in calls}
    names = list(calls)
    for round_index in range(rounds):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            call, n = calls[name], repeats[name]
            started = time.perf_counter()
            for _ in range(n):
                call()
            samples[name].append((time.perf_counter() - started) / n)
    return samples


def sampled_rows(length: int) -> np.ndarray:
    """Rows checked against mpmath: eight spread over the table and its last eight."""
    spread = np.linspace(0, length - 1, 8).round().astype(int)
    return np.unique(np.concatenate([spread, np.arange(max(length - 8, 0), length)]))


def max_error(table: np.ndarray, *, start: int, truth64: np.ndarray, exact_rows) -> float:
    """Largest error of ``table``: over every entry against direct float64 evaluation for
    float32 tables; on :func:`sampled_rows` against mpmath for float64 tables, whose
    errors are as small as those of direct evaluation itself."""
    if table.dtype == np.float32:
        return float(np.abs(table - truth64).max())
    rows, exact = exact_rows
    return float(np.abs(table[rows] - exact).max())


def _exact_rows(length: int, d_model: int, start: int):
    rows = sampled_rows(length)
    exact = np.concatenate(
        [reference.exact_sinusoidal(1, d_model, start=start + int(r)) for r in rows]
    )
    return rows, exact


# --- the run --------------------------------------------------------------------------


def _methods(names=None) -> list[Method]:
    available = [m for m in METHODS if names is None or m.name in names]
    try:
        import torch  # noqa: F401
    except ImportError:
        available = [m for m in available if m.name != "pytorch"]
    return available


def measure_size(length, d_model, dtype, methods, *, rounds, min_sample) -> list[dict]:
    """Time, error and peak memory of every method at one size and dtype."""
    chosen = [m for m in methods if m.applies(length, d_model, dtype)]
    nbytes = length * d_model * np.dtype(dtype).itemsize
    truth64 = implementations.vectorized(length, d_model) if dtype == "float32" else None
    exact = _exact_rows(length, d_model, 0) if dtype == "float64" else None

    peaks = dict.fromkeys((m.name for m in chosen), None)
    for method in chosen:
        method.build(min(length, 64), d_model, dtype=dtype)  # warm up (threads, caches)
        if method.warm:
            existing_buffer(length, d_model, dtype)  # its array exists before any timing
        if nbytes >= PEAK_MIN_BYTES:
            peaks[method.name] = peak_memory(lambda m=method: m.build(length, d_model, dtype=dtype))
    # Two regimes, each timed side by side: new arrays in new pages (glibc's starting
    # thresholds, as a program's first call) and writing into an existing array with
    # the allocator reusing freed memory (as a long-running program does).
    samples = {}
    for warm in (False, True):
        group = [m for m in chosen if m.warm == warm]
        if not group:
            continue
        fixed = set_malloc(WARM_MALLOC if warm else MALLOC)
        calls = {m.name: (lambda m=m: m.build(length, d_model, dtype=dtype)) for m in group}
        samples |= time_side_by_side(calls, rounds=rounds, min_sample=min_sample)
        if warm and fixed:
            set_malloc(MALLOC)

    fill_seconds = float(np.median(samples["fill"]))
    warm_seconds = float(np.median(samples["fill_warm"])) if "fill_warm" in samples else None
    results = []
    for method in chosen:
        seconds = float(np.median(samples[method.name]))
        table = method.build(length, d_model, dtype=dtype)
        error = max_error(table, start=0, truth64=truth64, exact_rows=exact)
        peak = peaks[method.name]
        results.append(
            {
                "length": length,
                "d_model": d_model,
                "dtype": dtype,
                "method": method.name,
                "seconds": seconds,
                "seconds_min": float(min(samples[method.name])),
                "seconds_max": float(max(samples[method.name])),
                "rounds": len(samples[method.name]),
                "gb_per_s": nbytes / seconds / 1e9,
                "x_fill": seconds / fill_seconds,
                "x_fill_warm": None if warm_seconds is None else seconds / warm_seconds,
                "max_abs_error": None if method.name.startswith("fill") else error,
                "peak_bytes": peak,
                "peak_x_output": None if peak is None else peak / nbytes,
            }
        )
    return results


def measure_far(methods) -> list[dict]:
    """Errors of every method on the (8192, 1024) rows just below position 10**6."""
    length, d_model = FAR_LENGTH, GOAL_SIZE[1]
    truth64 = implementations.vectorized(length, d_model, start=FAR_START)
    exact = _exact_rows(length, d_model, FAR_START)
    rows = []
    for dtype in DTYPES:
        for method in methods:
            if method.name.startswith("fill") or method.name == "naive_loops":
                continue
            if dtype not in method.dtypes:
                continue
            table = method.build(length, d_model, start=FAR_START, dtype=dtype)
            error = max_error(table, start=FAR_START, truth64=truth64, exact_rows=exact)
            rows.append(
                {
                    "dtype": dtype,
                    "method": method.name,
                    "start": FAR_START,
                    "length": length,
                    "d_model": d_model,
                    "max_abs_error": error,
                }
            )
    return rows


def goals(runs: list[dict], far: list[dict]) -> list[dict]:
    """Chapter 11's goals, each with its measured value and whether it is met."""

    def run(method, dtype="float32", size=GOAL_SIZE):
        for r in runs:
            if (r["method"], r["dtype"], (r["length"], r["d_model"])) == (method, dtype, size):
                return r
        return None

    def far_error(method, dtype):
        return next(r["max_abs_error"] for r in far if (r["method"], r["dtype"]) == (method, dtype))

    found = []

    def add(text, value, target, met):
        found.append({"goal": text, "value": value, "target": target, "met": bool(met)})

    fast, torch_run = run("sinusoidal"), run("pytorch")
    if fast is not None:
        if torch_run is not None:
            speedup = torch_run["seconds"] / fast["seconds"]
            add(
                "faster than the PyTorch construction (x)",
                speedup,
                GOAL_SPEEDUP_OVER_PYTORCH,
                speedup >= GOAL_SPEEDUP_OVER_PYTORCH,
            )
        add(
            "new table: multiple of the fresh-page bound",
            fast["x_fill"],
            GOAL_MULTIPLE_OF_FILL,
            fast["x_fill"] <= GOAL_MULTIPLE_OF_FILL,
        )
        into = run("sinusoidal_out")
        if into is not None and into["x_fill_warm"] is not None:
            add(
                "into an existing array: multiple of the warm bound",
                into["x_fill_warm"],
                GOAL_MULTIPLE_OF_WARM_FILL,
                into["x_fill_warm"] <= GOAL_MULTIPLE_OF_WARM_FILL,
            )
        add(
            "float32 error, rows 0-8191",
            fast["max_abs_error"],
            GOAL_FLOAT32_ERROR,
            fast["max_abs_error"] <= GOAL_FLOAT32_ERROR,
        )
    if far:
        error32, error64 = far_error("sinusoidal", "float32"), far_error("sinusoidal", "float64")
        add(
            "float32 error, rows near 10**6",
            error32,
            GOAL_FLOAT32_ERROR,
            error32 <= GOAL_FLOAT32_ERROR,
        )
        add(
            "float64 error, rows near 10**6",
            error64,
            GOAL_FLOAT64_ERROR,
            error64 <= GOAL_FLOAT64_ERROR,
        )
    for size in SMALL_SIZES:
        for dtype in DTYPES:
            mine = run("sinusoidal", dtype, size)
            for other in ("vectorized", "rounded_once"):
                theirs = run(other, dtype, size)
                if mine is None or theirs is None:
                    continue
                ratio = mine["seconds"] / theirs["seconds"]
                add(f"time / {other} at {size[0]}x{size[1]} {dtype}", ratio, 1.0, ratio <= 1.0)
    return found


def machine() -> dict:
    """What the numbers were measured on."""
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    info = {
        "cpu": model,
        "cores": _cores(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "numpy_threads": 1,  # NumPy's elementwise functions run on the calling thread
        "transparent_hugepages": transparent_hugepages(),
    }
    try:
        import torch

        info |= {"torch": torch.__version__, "torch_threads": torch.get_num_threads()}
    except ImportError:
        pass
    return info


def transparent_hugepages() -> str | None:
    """The kernel's transparent-huge-page mode ("always", "madvise", "never"), if known."""
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as setting:
            text = setting.read()
    except OSError:
        return None
    chosen = [word[1:-1] for word in text.split() if word.startswith("[")]
    return chosen[0] if chosen else None


def _cores() -> int:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def run(sizes=SIZES, *, rounds=5, min_sample=0.05, methods=None, far=True, progress=None):
    """The whole benchmark as a dict (what :func:`main` writes as JSON)."""
    chosen = _methods(methods)
    fixed = set_malloc(MALLOC)
    runs = []
    for length, d_model in sizes:
        for dtype in DTYPES:
            if progress:
                progress(f"{length} x {d_model} {dtype}")
            runs += measure_size(
                length, d_model, dtype, chosen, rounds=rounds, min_sample=min_sample
            )
    far_rows = measure_far(chosen) if far else []
    return {
        "machine": machine(),
        "malloc": MALLOC | {"fixed": fixed},
        "warm_malloc": WARM_MALLOC,
        "rounds": rounds,
        "sizes": [list(size) for size in sizes],
        "methods": {m.name: m.label for m in chosen},
        "runs": runs,
        "far": far_rows,
        "goals": goals(runs, far_rows),
    }


# --- reporting ------------------------------------------------------------------------


def format_report(results: dict) -> str:
    """The tables ``make bench`` prints: time and multiple of fill, errors, goals."""
    lines = []
    names = list(results["methods"])
    for dtype in DTYPES:
        lines.append(f"\n{dtype}: median ms (multiple of the fill bound)")
        lines.append(f"{'size':>12} " + " ".join(f"{n:>19}" for n in names))
        for length, d_model in results["sizes"]:
            cells = []
            for name in names:
                r = _find(results["runs"], name, dtype, length, d_model)
                cells.append("-" if r is None else f"{r['seconds'] * 1e3:.3g} ({r['x_fill']:.2f})")
            lines.append(f"{length:>6}x{d_model:<5} " + " ".join(f"{c:>19}" for c in cells))
        lines.append(f"{dtype}: max abs error | GB/s | peak memory / output")
        for length, d_model in results["sizes"]:
            cells = []
            for name in names:
                r = _find(results["runs"], name, dtype, length, d_model)
                if r is None:
                    cells.append("-")
                    continue
                error = "-" if r["max_abs_error"] is None else f"{r['max_abs_error']:.1e}"
                peak = "-" if r["peak_x_output"] is None else f"{r['peak_x_output']:.1f}"
                cells.append(f"{error}|{r['gb_per_s']:.1f}|{peak}")
            lines.append(f"{length:>6}x{d_model:<5} " + " ".join(f"{c:>19}" for c in cells))
    if results["far"]:
        lines.append(
            f"\nrows {FAR_START}..{FAR_START + FAR_LENGTH - 1}, d_model 1024: max abs error"
        )
        for r in results["far"]:
            lines.append(f"  {r['dtype']:<8} {r['method']:<14} {r['max_abs_error']:.1e}")
    lines += format_goals(results["goals"], width=48)
    return "\n".join(lines)


def format_goals(goals: list[dict], *, width: int) -> list[str]:
    """The lines that print the goals: each with its value, target and whether met."""
    lines = ["\ngoals"]
    for g in goals:
        mark = "met" if g["met"] else "NOT MET"
        lines.append(f"  {g['goal']:<{width}} {g['value']:.3g} (target {g['target']:g}) {mark}")
    return lines


def _find(runs, name, dtype, length, d_model):
    for r in runs:
        if (r["method"], r["dtype"], r["length"], r["d_model"]) == (name, dtype, length, d_model):
            return r
    return None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="two small sizes, one round")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    sizes = QUICK_SIZES if args.quick else SIZES
    rounds = args.rounds or (1 if args.quick else 5)
    results = run(
        sizes,
        rounds=rounds,
        min_sample=0.01 if args.quick else 0.05,
        far=not args.quick,
        progress=lambda text: print(f"measuring {text}", file=sys.stderr, flush=True),
    )
    print(format_report(results))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1) + "\n")
    print(f"\nwrote {args.out}")
    return 0 if all(g["met"] for g in results["goals"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
