"""Chapter 11's second benchmark: RoPE applied to queries or keys, every forward pass.

The table of chapters 2-5 is built once; the rotation of RoPE runs on every query and
key of every layer at every step. This module times, side by side and interleaved
round by round, ways of applying it to ``q`` of shape (1, 32, 2048, 128) in float32:

- ``clone``: ``q.clone()``, reading q once and writing a new tensor once, the least any
  out-of-place rotation can do (the bound);
- ``rotate_half``: ``q * cos + rotate_half(q) * sin`` with cos and sin of width
  head_dim precomputed, the formulation of GPT-NeoX and Hugging Face code;
- ``formula_half``: the plain pair formula ``(x0 cos - x1 sin, x0 sin + x1 cos)``;
- ``unblocked_half``: three passes (out = x * [cos, cos], then two fused multiply-adds)
  over the whole tensor at once;
- ``by_head_half``: the same three passes one head at a time, on a slice that stays
  in cache, and 3 * batch * heads operations a call;
- ``posenc_half`` and ``posenc_interleaved``: :class:`posenc.torch.RotaryEmbedding`
  (on the CPU: the three passes, or one complex product, over every head at once);
- ``compiled_half`` and ``compiled_interleaved``: ``torch.compile`` of the module, where
  it compiles here (it needs a C++ compiler); what happened is recorded either way;
- NumPy, on one thread: ``np.copy`` and :func:`posenc.alternatives.rope` for both
  pairings.

It also measures the largest error of each against the rotation in float64, at
positions 0-2047 and 100,000-102,047, including cos and sin computed from float32
angles, as Hugging Face's rotary module computes them.

The allocator is set so that freed memory is reused (``WARM_MALLOC``), as in a
model's forward loop, where the same sizes come back every step; the time of new pages
is the table benchmark's subject (:mod:`posenc.benchmark`).

A second measurement (:func:`measure_busy`) times the module and ``by_head_half``
against ``rotate_half``
while another process keeps one core busy, as on a shared machine: at (1, 32, 2048,
128) and at (256, 32, 16, 128), short sequences in a large batch, with 1 and 2 threads.
Each parallel operation waits for all of its threads, and a thread that shares its core
with the other process can wait a whole scheduler time slice; a path made of many small
operations is sunk by that, whatever the quiet-machine timing says.

``make bench`` runs :func:`main` and writes ``data/rope_benchmark.json``, which the
chapter reads, and ``data/rope_busy.json``. Timings are never asserted by the tests.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from posenc import benchmark
from posenc.alternatives import rope

SHAPE = (1, 32, 2048, 128)
QUICK_SHAPE = (1, 4, 256, 64)
FAR_START = 100_000
THREADS = 2
DEFAULT_OUT = Path("data") / "rope_benchmark.json"
DEFAULT_BUSY_OUT = Path("data") / "rope_busy.json"
BUSY_SHAPES = ((1, 32, 2048, 128), (256, 32, 16, 128))
QUICK_BUSY_SHAPES = ((1, 4, 256, 64), (16, 4, 16, 64))
BUSY_THREADS = (1, 2)

GOAL_SPEEDUP_OVER_ROTATE_HALF = 2.5
GOAL_MULTIPLE_OF_CLONE = 3.5
GOAL_FLOAT32_ERROR = 2e-5
PAIRINGS = ("half", "interleaved")


def rotate_half_formulation(head_dim: int, length: int, *, start: int = 0, float32_angles=False):
    """``q * cos + rotate_half(q) * sin``, with cos and sin of width head_dim precomputed.

    ``float32_angles=True`` computes them as Hugging Face's rotary module does:
    inverse frequencies, positions and their products in float32. Otherwise the angles
    are float64, rounded once, so that only the arithmetic differs.
    """
    import torch

    if float32_angles:
        inv_freq = 1.0 / (
            10000.0 ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim)
        )
        t = torch.arange(start, start + length, dtype=torch.float32)
        freqs = torch.outer(t, inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos(), emb.sin()
    else:
        theta = 10000.0 ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
        angles = np.arange(start, start + length, dtype=np.float64)[:, None] * theta
        angles = np.concatenate([angles, angles], axis=-1)
        cos = torch.from_numpy(np.cos(angles).astype(np.float32))
        sin = torch.from_numpy(np.sin(angles).astype(np.float32))
    half = head_dim // 2

    def rotate_half(x):
        return torch.cat((-x[..., half:], x[..., :half]), dim=-1)

    def apply(q):
        return q * cos + rotate_half(q) * sin

    return apply


def unblocked_half(module):
    """posenc_half's three passes (x * [cos, cos], then two multiply-adds), unblocked."""
    import torch

    def apply(q):
        length = q.shape[-2]
        _, sin, both = module._tables(length, q.dtype, q.device)
        half = q.shape[-1] // 2
        out = torch.mul(q, both)
        out[..., :half].addcmul_(q[..., half:], sin, value=-1)
        out[..., half:].addcmul_(q[..., :half], sin)
        return out

    return apply


def by_head_half(module):
    """unblocked_half's three passes one head at a time: a slice that stays in cache.

    Each (seq, head_dim) slice of 2048 x 128 float32 is 1 MiB; three operations per
    slice make 3 * batch * heads operations a call, each run by every thread.
    """
    import torch

    def apply(q):
        length, width = q.shape[-2], q.shape[-1]
        _, sin, both = module._tables(length, q.dtype, q.device)
        half = width // 2
        out = torch.empty_like(q)
        for x, o in zip(q.reshape(-1, length, width), out.view(-1, length, width), strict=True):
            torch.mul(x, both, out=o)
            o[:, :half].addcmul_(x[:, half:], sin, value=-1)
            o[:, half:].addcmul_(x[:, :half], sin)
        return out

    return apply


def formula(module):
    """The module's plain pair formula (what autograd and torch.compile see)."""
    from posenc.rotary import _rotate

    def apply(q):
        cos, sin, _ = module._tables(q.shape[-2], q.dtype, q.device)
        return _rotate(q, cos, sin, module.pairing, module.rotary_dim)

    return apply


def _compiled(module, q):
    """torch.compile(module), warmed up; (callable or None, what happened)."""
    import torch

    started = time.perf_counter()
    try:
        compiled = torch.compile(module)
        with torch.no_grad():
            compiled(q)
    except Exception as error:  # a missing compiler surfaces as one of many types
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else ""
        return None, f"failed: {type(error).__name__}: {first_line[:200]}"
    return compiled, f"compiled in {time.perf_counter() - started:.1f} s"


def exact_rotation(q: np.ndarray, positions: np.ndarray, pairing: str) -> np.ndarray:
    """The rotation in float64 (float64 angles and arithmetic)."""
    return rope(q.astype(np.float64), positions, pairing=pairing)


def measure_errors(shape=SHAPE) -> list[dict]:
    """Max abs error against the float64 rotation at positions 0.. and FAR_START.."""
    import torch

    from posenc.torch import RotaryEmbedding

    _, heads, length, head_dim = shape
    q = torch.randn(1, min(heads, 4), length, head_dim, generator=torch.Generator().manual_seed(0))
    qn = q.numpy()
    rows = []
    for start in (0, FAR_START):
        positions = np.arange(start, start + length)
        exact = {p: exact_rotation(qn, positions, p) for p in PAIRINGS}
        with torch.no_grad():
            for pairing in PAIRINGS:
                module = RotaryEmbedding(head_dim, pairing=pairing)
                got = module(q, torch.from_numpy(positions))
                rows.append(_error_row(f"posenc_{pairing}", start, got.numpy(), exact[pairing]))
                got = rope(qn, positions, pairing=pairing)
                rows.append(_error_row(f"numpy_{pairing}", start, got, exact[pairing]))
            for float32_angles, name in ((False, "rotate_half"), (True, "float32_angles")):
                apply = rotate_half_formulation(
                    head_dim, length, start=start, float32_angles=float32_angles
                )
                rows.append(_error_row(name, start, apply(q).numpy(), exact["half"]))
    return rows


def _error_row(method, start, got, exact) -> dict:
    return {"method": method, "start": start, "max_abs_error": float(np.abs(got - exact).max())}


def measure_times(shape=SHAPE, *, rounds=7, min_sample=0.05, compile_=True) -> dict:
    """Median, min and max seconds of every way of applying RoPE, side by side."""
    import torch

    from posenc.torch import RotaryEmbedding

    torch.set_num_threads(THREADS)
    head_dim, length = shape[-1], shape[-2]
    q = torch.randn(*shape, generator=torch.Generator().manual_seed(0))
    qn = q.numpy()
    modules = {p: RotaryEmbedding(head_dim, pairing=p) for p in PAIRINGS}
    torch_calls = {
        "clone": q.clone,
        "rotate_half": rotate_half_formulation(head_dim, length),
        "formula_half": formula(modules["half"]),
        "unblocked_half": unblocked_half(modules["half"]),
        "by_head_half": by_head_half(modules["half"]),
        "posenc_half": modules["half"],
        "posenc_interleaved": modules["interleaved"],
    }
    compile_notes = {}
    if compile_:
        for pairing in PAIRINGS:
            compiled, note = _compiled(RotaryEmbedding(head_dim, pairing=pairing), q)
            compile_notes[pairing] = note
            if compiled is not None:
                torch_calls[f"compiled_{pairing}"] = compiled
    numpy_calls = {
        "np_copy": lambda: np.copy(qn),
        "numpy_half": lambda: rope(qn, pairing="half"),
        "numpy_interleaved": lambda: rope(qn, pairing="interleaved"),
    }
    calls = {name: (lambda f=f: f(q)) for name, f in torch_calls.items()}
    calls["clone"] = q.clone
    calls |= numpy_calls
    fixed = benchmark.set_malloc(benchmark.WARM_MALLOC)
    with torch.no_grad():
        samples = benchmark.time_side_by_side(calls, rounds=rounds, min_sample=min_sample)
    if fixed:
        benchmark.set_malloc(benchmark.MALLOC)
    times = {}
    for name, values in samples.items():
        bound = "np_copy" if name in numpy_calls else "clone"
        median = float(np.median(values))
        times[name] = {
            "seconds": median,
            "seconds_min": float(min(values)),
            "seconds_max": float(max(values)),
            "rounds": len(values),
            "x_copy": median / float(np.median(samples[bound])),
            "library": "numpy" if name in numpy_calls else "torch",
        }
    for name, row in times.items():
        if row["library"] == "torch" and name != "clone":
            row["x_faster_than_rotate_half"] = times["rotate_half"]["seconds"] / row["seconds"]
    return {"times": times, "compile": compile_notes, "malloc_fixed": fixed}


def goals(times: dict, errors: list[dict]) -> list[dict]:
    """The issue's goals for both pairings, each with its measured value."""
    found = []
    for pairing in PAIRINGS:
        row = times[f"posenc_{pairing}"]
        speedup = row["x_faster_than_rotate_half"]
        found.append(
            {
                "goal": f"{pairing}: faster than rotate_half (x)",
                "value": speedup,
                "target": GOAL_SPEEDUP_OVER_ROTATE_HALF,
                "met": speedup >= GOAL_SPEEDUP_OVER_ROTATE_HALF,
            }
        )
        found.append(
            {
                "goal": f"{pairing}: multiple of q.clone()",
                "value": row["x_copy"],
                "target": GOAL_MULTIPLE_OF_CLONE,
                "met": row["x_copy"] <= GOAL_MULTIPLE_OF_CLONE,
            }
        )
        worst = max(e["max_abs_error"] for e in errors if e["method"] == f"posenc_{pairing}")
        found.append(
            {
                "goal": f"{pairing}: float32 error at 0-2047 and 100,000-102,047",
                "value": worst,
                "target": GOAL_FLOAT32_ERROR,
                "met": worst <= GOAL_FLOAT32_ERROR,
            }
        )
    return found


@contextlib.contextmanager
def busy_core():
    """Another process spinning on one core while the block runs."""
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.2)  # let it start and take its core
        yield spinner
    finally:
        spinner.kill()
        spinner.wait()


def measure_busy(shapes=BUSY_SHAPES, threads=BUSY_THREADS, *, rounds=5, min_sample=0.05):
    """Seconds of clone, rotate_half and the module, with one core kept busy meanwhile.

    One row per (shape, threads, method): median, min and max over ``rounds``, and the
    ratio to rotate_half's median in the same rounds (> 1: slower than rotate_half).
    """
    import torch

    from posenc.rotary import RotaryEmbedding

    before = torch.get_num_threads()
    rows = []
    fixed = benchmark.set_malloc(benchmark.WARM_MALLOC)
    try:
        with busy_core(), torch.no_grad():
            for shape in shapes:
                head_dim, length = shape[-1], shape[-2]
                q = torch.randn(*shape, generator=torch.Generator().manual_seed(0))
                appliers = {"rotate_half": rotate_half_formulation(head_dim, length)}
                for pairing in PAIRINGS:
                    appliers[f"posenc_{pairing}"] = RotaryEmbedding(head_dim, pairing=pairing)
                appliers["by_head_half"] = by_head_half(appliers["posenc_half"])
                calls = {"clone": q.clone}
                calls |= {name: functools.partial(f, q) for name, f in appliers.items()}
                for count in threads:
                    torch.set_num_threads(count)
                    samples = benchmark.time_side_by_side(
                        calls, rounds=rounds, min_sample=min_sample
                    )
                    reference = float(np.median(samples["rotate_half"]))
                    for name, values in samples.items():
                        median = float(np.median(values))
                        rows.append(
                            {
                                "shape": list(shape),
                                "threads": count,
                                "method": name,
                                "seconds": median,
                                "seconds_min": float(min(values)),
                                "seconds_max": float(max(values)),
                                "x_rotate_half": median / reference,
                            }
                        )
    finally:
        torch.set_num_threads(before)
        if fixed:
            benchmark.set_malloc(benchmark.MALLOC)
    return rows


def busy_goals(rows: list[dict]) -> list[dict]:
    """The module no slower than rotate_half, for every shape, thread count and pairing."""
    found = []
    for row in rows:
        if not row["method"].startswith("posenc_"):
            continue
        pairing = row["method"].removeprefix("posenc_")
        shape = "x".join(map(str, row["shape"]))
        found.append(
            {
                "goal": f"busy core, {shape}, {row['threads']} thread(s), {pairing}: x rotate_half",
                "value": row["x_rotate_half"],
                "target": 1.0,
                "met": row["x_rotate_half"] <= 1.0,
            }
        )
    return found


def run_busy(shapes=BUSY_SHAPES, *, rounds=5, min_sample=0.05) -> dict:
    import torch

    rows = measure_busy(shapes, rounds=rounds, min_sample=min_sample)
    return {
        "machine": benchmark.machine() | {"torch": torch.__version__},
        "dtype": "float32",
        "busy": "one other process spinning on one core for the whole measurement",
        "malloc": benchmark.WARM_MALLOC,
        "rounds": rounds,
        "times": rows,
        "goals": busy_goals(rows),
    }


def format_busy_report(results: dict) -> str:
    lines = ["\nRoPE with one core kept busy by another process (float32)"]
    lines.append(f"{'shape':18} {'threads':>7} {'method':20} {'median ms':>10} {'x rot_half':>10}")
    for row in results["times"]:
        shape = "x".join(map(str, row["shape"]))
        lines.append(
            f"{shape:18} {row['threads']:>7} {row['method']:20} "
            f"{row['seconds'] * 1e3:10.2f} {row['x_rotate_half']:10.2f}"
        )
    lines += benchmark.format_goals(results["goals"], width=64)
    return "\n".join(lines)


def run(shape=SHAPE, *, rounds=7, min_sample=0.05, compile_=True) -> dict:
    measured = measure_times(shape, rounds=rounds, min_sample=min_sample, compile_=compile_)
    errors = measure_errors(shape)
    return {
        "machine": benchmark.machine() | {"torch_threads": THREADS},
        "shape": list(shape),
        "dtype": "float32",
        "malloc": benchmark.WARM_MALLOC | {"fixed": measured["malloc_fixed"]},
        "rounds": rounds,
        "times": measured["times"],
        "compile": measured["compile"],
        "errors": errors,
        "goals": goals(measured["times"], errors),
    }


def format_report(results: dict) -> str:
    lines = [f"RoPE applied to q of shape {tuple(results['shape'])} float32"]
    lines.append(f"{'':22} {'median ms':>10} {'min':>7} {'max':>7} {'x copy':>7} {'x faster':>9}")
    for name, row in results["times"].items():
        faster = row.get("x_faster_than_rotate_half")
        lines.append(
            f"{name:22} {row['seconds'] * 1e3:10.2f} {row['seconds_min'] * 1e3:7.2f} "
            f"{row['seconds_max'] * 1e3:7.2f} {row['x_copy']:7.2f} "
            + ("" if faster is None else f"{faster:9.2f}")
        )
    for pairing, note in results["compile"].items():
        lines.append(f"torch.compile ({pairing}): {note}")
    lines.append("\nmax abs error against the float64 rotation")
    for e in results["errors"]:
        lines.append(f"  {e['method']:<20} from {e['start']:>7}: {e['max_abs_error']:.1e}")
    lines += benchmark.format_goals(results["goals"], width=56)
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a small shape, one round")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--busy-out", type=Path, help="default: rope_busy.json beside --out")
    args = parser.parse_args(argv)
    print("measuring RoPE application", file=sys.stderr, flush=True)
    if args.quick:
        results = run(QUICK_SHAPE, rounds=1, min_sample=0.005, compile_=False)
        busy = run_busy(QUICK_BUSY_SHAPES, rounds=1, min_sample=0.005)
    else:
        results = run()
        busy = run_busy()
    print(format_report(results))
    print(format_busy_report(busy))
    busy_out = args.busy_out or args.out.with_name(DEFAULT_BUSY_OUT.name)
    for path, data in ((args.out, results), (busy_out, busy)):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data, indent=1) + "\n")
        print(f"\nwrote {path}")
    met = all(g["met"] for g in results["goals"] + busy["goals"])
    return 0 if met else 1
