"""Time RoPE on a CUDA GPU: clone, Hugging Face's form, torch.compile, posenc.

Run on a machine with a CUDA GPU: ``python benchmarks/rope_gpu.py [--out PATH]``. It
measures, with the median of ``triton.testing.do_bench``, q of the issue's shapes in
bfloat16 and float32:

- ``clone``: ``q.clone()``, one read and one write, the bound;
- ``hf_eager``: transformers' ``LlamaRotaryEmbedding`` (cos and sin for the positions)
  then ``apply_rotary_pos_emb``'s formula ``q * cos + rotate_half(q) * sin`` on q alone
  (every method here rotates q only), as a Llama layer runs them;
- ``hf_compiled``: ``torch.compile`` of that;
- ``posenc_half``, ``posenc_interleaved``: ``posenc.rotary.RotaryEmbedding`` called as
  ``module(q, positions)`` with positions None, and ``posenc_half_positions`` with
  (batch, seq) positions on the device;
- ``triton_half``, ``triton_interleaved``: :func:`posenc.rotary_triton.rotate` itself;

plus decode, q of (64, 32, 1, 128) at position 4095. For chapter 11 it also records, in
bfloat16 with half pairs: a sweep over sequence length (batch 1) and over batch
(sequence 1024), 32 heads of 128 (clone, hf_eager, hf_compiled, posenc_half,
triton_half); the backward pass (forward + backward of posenc's module and of
Hugging Face's formula under autograd, against two clones); RoPE's share of one
attention layer (``scaled_dot_product_attention``, causal, against RoPE on q and k);
and the GB/s of every clone (one read and one write of q). Every time above is a
launch from Python (``do_bench``): at small shapes that measures the host's launch
overhead, not the GPU, so the prefill and decode shapes are also timed replayed from a
CUDA graph (``do_bench_cudagraph``, ``graphs``; the time goals on those are
``graph_goals``), beside the eager cost of the position checks alone. It checks posenc's
module on the GPU against its float64 formula on the CPU (``kernel_checks``: pairings,
layouts, partial rotary, float32 and bfloat16, strided input, decode, gradients),
float32 accuracy on the GPU (<= 1e-6 against float64 at positions up to 10**6), runs
posenc's module once under
``torch.cuda.set_sync_debug_mode("error")`` (a host sync raises), writes
``data/rope_gpu.json`` (GPU, driver, versions, every time in ms and as a multiple of
the clone, the goals) and exits 1 if a goal is missed, 2 where there is no CUDA GPU.

The goals: posenc <= 1.25 x clone; with positions <= 1.5 x the time without;
decode no slower than Hugging Face's module + ``apply_rotary_pos_emb``'s formula. Evaluating them
and formatting the report are the pure functions :func:`goals` and :func:`format_report`
(tested on the CPU with made-up timings).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

SHAPES = (
    ((1, 32, 4096, 128), "bfloat16"),
    ((8, 32, 4096, 128), "bfloat16"),
    ((8, 32, 4096, 128), "float32"),
    ((1, 8, 32768, 128), "float32"),
)
DECODE_SHAPE = (64, 32, 1, 128)
DECODE_POSITION = 4095
DTYPES = ("bfloat16", "float32")
BASE = 10000.0
GOAL_MULTIPLE_OF_CLONE = 1.25
GOAL_POSITIONS_OVER_NONE = 1.5
ACCURACY_BOUND = 1e-6
ACCURACY_POSITION = 10**6
POSENC_METHODS = ("posenc_half", "posenc_interleaved")
SWEEP_SEQ = ((1, 32, 256, 128), (1, 32, 1024, 128), (1, 32, 4096, 128), (1, 32, 16384, 128))
SWEEP_BATCH = ((1, 32, 1024, 128), (4, 32, 1024, 128), (16, 32, 1024, 128), (64, 32, 1024, 128))
SWEEP_METHODS = ("clone", "hf_eager", "hf_compiled", "posenc_half", "triton_half")
BACKWARD_SHAPE = (8, 32, 4096, 128)
ATTENTION_SHAPE = (8, 32, 4096, 128)
DEFAULT_OUT = Path("data") / "rope_gpu.json"
DEVICE = "cuda"  # the tests run the measuring code on the CPU with a stand-in timer


def goals(rows: list[dict], decode: list[dict], accuracy: list[dict], no_sync: dict) -> list[dict]:
    """Each goal of the issue with its measured value and ``met``.

    ``rows``: one per (shape, dtype) with ``times`` in ms (keys: clone, posenc_half,
    posenc_interleaved, posenc_half_positions, ...). ``decode``: one per dtype with
    ``times`` (posenc_half_positions, hf_eager). ``accuracy``: rows with ``error`` and
    ``bound``. ``no_sync``: ``{"ok": bool, "detail": str}``.
    """
    found = []
    for row in rows:
        times, name = row["times"], f"{tuple(row['shape'])} {row['dtype']}"
        for method in POSENC_METHODS:
            ratio = times[method] / times["clone"]
            found.append(
                {
                    "goal": f"{method} <= {GOAL_MULTIPLE_OF_CLONE} x clone, {name}",
                    "value": ratio,
                    "met": ratio <= GOAL_MULTIPLE_OF_CLONE,
                }
            )
        ratio = times["posenc_half_positions"] / times["posenc_half"]
        found.append(
            {
                "goal": f"positions <= {GOAL_POSITIONS_OVER_NONE} x positions=None, {name}",
                "value": ratio,
                "met": ratio <= GOAL_POSITIONS_OVER_NONE,
            }
        )
    for row in decode:
        ratio = row["times"]["posenc_half_positions"] / row["times"]["hf_eager"]
        found.append(
            {
                "goal": f"decode {tuple(row['shape'])} {row['dtype']} no slower than HF (x HF)",
                "value": ratio,
                "met": ratio <= 1.0,
            }
        )
    for row in accuracy:
        found.append(
            {
                "goal": f"float32 error <= {row['bound']:g} at positions up to "
                f"{row['position']:,}, {row['method']}",
                "value": row["error"],
                "met": row["error"] <= row["bound"],
            }
        )
    found.append(
        {"goal": "no host sync in forward", "value": no_sync["detail"], "met": no_sync["ok"]}
    )
    return found


def graph_goals(graphs: list[dict]) -> list[dict]:
    """The time goals again on the GPU's time alone (calls replayed from a CUDA graph):
    prefill rows (start 0) against their clone and positions against none; decode
    rows (start > 0) against Hugging Face's eager form."""
    found = []
    for row in graphs:
        times, name = row["times"], f"{tuple(row['shape'])} {row['dtype']}"
        if row["start"] > 0:
            ratio = times["posenc_half_positions"] / times["hf_eager"]
            found.append({"goal": f"decode {name} no slower than HF (x HF), graph replay",
                          "value": ratio, "met": ratio <= 1.0})  # fmt: skip
            continue
        for method in POSENC_METHODS:
            ratio = times[method] / times["clone"]
            found.append({"goal": f"{method} <= {GOAL_MULTIPLE_OF_CLONE} x clone, {name}, "
                          "graph replay", "value": ratio,
                          "met": ratio <= GOAL_MULTIPLE_OF_CLONE})  # fmt: skip
        ratio = times["posenc_half_positions"] / times["posenc_half"]
        found.append({"goal": f"positions <= {GOAL_POSITIONS_OVER_NONE} x positions=None, "
                      f"{name}, graph replay", "value": ratio,
                      "met": ratio <= GOAL_POSITIONS_OVER_NONE})  # fmt: skip
    return found


def with_multiples(rows: list[dict]) -> list[dict]:
    """Rows with ``x_clone``: every time as a multiple of that row's clone."""
    return [
        {**row, "x_clone": {k: t / row["times"]["clone"] for k, t in row["times"].items()}}
        if row["times"].get("clone")
        else row
        for row in rows
    ]


def clone_gbps(shape, dtype_name: str, ms: float) -> float:
    """GB/s of a clone of q: one read and one write of its bytes in ``ms``."""
    size = {"bfloat16": 2, "float16": 2, "float32": 4}[dtype_name]
    count = 1
    for n in shape:
        count *= n
    return 2 * count * size / (ms * 1e-3) / 1e9


def format_report(results: dict) -> str:
    """The tables and the goals as text."""
    lines = [f"RoPE on {results['gpu']} (driver {results['driver']})", ""]
    for title, key in (("prefill", "rows"), ("decode", "decode")):
        lines.append(f"{title}: median ms (x clone)")
        for row in with_multiples(results[key]):
            cells = ", ".join(
                f"{method} {t:.4f} ({row['x_clone'][method]:.2f}x)"
                for method, t in row["times"].items()
            )
            lines.append(f"  {tuple(row['shape'])} {row['dtype']}: {cells}")
    lines.append("goals:")
    for goal in results["goals"] + results.get("graph_goals", []):
        value = goal["value"]
        shown = f"{value:.3g}" if isinstance(value, float) else str(value)
        lines.append(f"  [{'met' if goal['met'] else 'MISSED'}] {goal['goal']}: {shown}")
    return "\n".join(lines)


def all_met(results: dict) -> bool:
    """Every goal met, and no section or method failed on the way."""
    failed = results.get("errors") or any(
        row.get("errors") for key in ("rows", "decode") for row in results.get(key) or ()
    )
    checks = all(c["met"] for c in results.get("kernel_checks") or [])
    goals_met = all(g["met"] for g in results.get("goals") or [])
    return "goals" in results and not failed and checks and goals_met


def _driver() -> str:
    try:
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        return done.stdout.strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        import torch

        return f"CUDA {torch.version.cuda} (nvidia-smi unavailable)"


def _hf_rotary(head_dim: int, device):
    """transformers' LlamaRotaryEmbedding and rotate_half, for one head_dim."""
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import (
        LlamaRotaryEmbedding,
        rotate_half,
    )

    config = LlamaConfig(
        hidden_size=head_dim * 32,
        num_attention_heads=32,
        head_dim=head_dim,
        rope_parameters={"rope_type": "default", "rope_theta": BASE},
    )
    return LlamaRotaryEmbedding(config).to(device), rotate_half


def _methods(q, positions, hf_module, rotate_half):
    """name -> zero-argument callable, for one q."""
    import torch

    from posenc import rotary_triton
    from posenc.rotary import RotaryEmbedding

    head_dim = q.shape[-1]
    half = RotaryEmbedding(head_dim, base=BASE)
    interleaved = RotaryEmbedding(head_dim, base=BASE, pairing="interleaved")
    theta = torch.from_numpy(half.frequencies).to(q.device)

    def hf(q):
        # q alone, as every other method here: apply_rotary_pos_emb's formula for one
        # tensor (it rotates q and k; passing q twice would time two rotations)
        cos, sin = hf_module(q, positions)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        return q * cos + rotate_half(q) * sin

    compiled = torch.compile(hf)
    return {
        "clone": lambda: q.clone(),
        "hf_eager": lambda: hf(q),
        "hf_compiled": lambda: compiled(q),
        "posenc_half": lambda: half(q),
        "posenc_interleaved": lambda: interleaved(q),
        "posenc_half_positions": lambda: half(q, positions),
        "posenc_interleaved_positions": lambda: interleaved(q, positions),
        "triton_half": lambda: rotary_triton.rotate(q, theta),
        "triton_interleaved": lambda: rotary_triton.rotate(q, theta, pairing="interleaved"),
    }


def _prepared(shape, dtype_name: str, start: int) -> tuple:
    """(positions, methods) for a random q of ``shape``: positions start .. start + seq - 1
    for every sequence, and :func:`_methods`' callables, with a fresh torch.compile cache
    (its recompile limit would otherwise send later shapes back to eager without a word)."""
    import torch

    q = torch.randn(shape, device=DEVICE, dtype=getattr(torch, dtype_name))
    batch, _, seq, head_dim = shape
    positions = (torch.arange(seq, device=DEVICE) + start).expand(batch, seq).contiguous()
    hf_module, apply = _hf_rotary(head_dim, DEVICE)
    torch._dynamo.reset()
    return positions, _methods(q, positions, hf_module, apply)


def measure(shape, dtype_name: str, *, start: int = 0, only=None) -> dict:
    """Median ms of every method (or those in ``only``) for q of ``shape``; positions
    start .. start + seq - 1; with the clone's GB/s."""
    from triton.testing import do_bench

    _, methods = _prepared(shape, dtype_name, start)
    times, errors = {}, {}
    for name, call in methods.items():
        if only is None or name in only:
            try:
                times[name] = float(do_bench(call, return_mode="median"))
            except Exception as error:  # one failing method must not lose the others
                errors[name] = f"{type(error).__name__}: {str(error)[:300]}"
    _progress(f"{tuple(shape)} {dtype_name} start {start}: {times} {errors or ''}")
    gbps = clone_gbps(shape, dtype_name, times["clone"])
    found = {"shape": list(shape), "dtype": dtype_name, "start": start, "times": times}
    return found | {"clone_gbps": gbps} | ({"errors": errors} if errors else {})


GRAPH_METHODS = (
    "clone",
    "hf_eager",
    "hf_compiled",
    "posenc_half",
    "posenc_half_positions",
    "posenc_interleaved",
    "posenc_interleaved_positions",
    "triton_half",
)


def measure_graphs(shape, dtype_name: str, *, start: int = 0) -> dict:
    """Median ms of each call replayed from a CUDA graph (``do_bench_cudagraph``): the
    GPU's time alone, no Python or launch overhead; and the eager time of the position
    checks (``_check_position_values``) on their own."""
    import torch
    from triton.testing import do_bench, do_bench_cudagraph

    from posenc.rotary import _check_position_values

    positions, methods = _prepared(shape, dtype_name, start)
    times, errors = {}, {}
    for name, call in methods.items():
        if name not in GRAPH_METHODS:
            continue
        try:
            call()  # compile, fill caches: nothing may copy from the host under capture
            if DEVICE == "cuda":
                torch.cuda.synchronize()
            times[name] = float(do_bench_cudagraph(call, return_mode="median"))
        except Exception as error:
            errors[name] = f"{type(error).__name__}: {str(error)[:300]}"
    check = float(do_bench(lambda: _check_position_values(positions), return_mode="median"))
    _progress(f"graphs {tuple(shape)} {dtype_name}: {times} check {check} {errors or ''}")
    found = {"shape": list(shape), "dtype": dtype_name, "start": start, "times": times}
    found["position_check_eager"] = check
    return found | ({"errors": errors} if errors else {})


def measure_backward(shape=BACKWARD_SHAPE, dtype_name="bfloat16") -> dict:
    """Forward + backward under autograd: posenc's module, HF's formula, two clones."""
    import torch
    from triton.testing import do_bench

    from posenc.rotary import RotaryEmbedding

    dtype = getattr(torch, dtype_name)
    q = torch.randn(shape, device=DEVICE, dtype=dtype, requires_grad=True)
    grad = torch.randn_like(q)
    batch, _, seq, head_dim = shape
    positions = torch.arange(seq, device=DEVICE).expand(batch, seq).contiguous()
    hf_module, rotate_half = _hf_rotary(head_dim, DEVICE)
    module = RotaryEmbedding(head_dim, base=BASE)

    def hf():
        cos, sin = hf_module(q, positions)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        (q * cos + rotate_half(q) * sin).backward(grad)

    calls = {
        "two_clones": lambda: (q.detach().clone(), grad.clone()),
        "hf_eager": hf,
        "posenc_half": lambda: module(q).backward(grad),
        "posenc_half_positions": lambda: module(q, positions).backward(grad),
    }
    times = {name: float(do_bench(call, grad_to_none=[q], return_mode="median"))
             for name, call in calls.items()}  # fmt: skip
    return {"shape": list(shape), "dtype": dtype_name, "times": times}


def measure_attention_share(shape=ATTENTION_SHAPE, dtype_name="bfloat16") -> dict:
    """One causal attention layer's core against RoPE on q and k, same q, k, v."""
    import torch
    from triton.testing import do_bench

    from posenc.rotary import RotaryEmbedding

    dtype = getattr(torch, dtype_name)
    q, k, v = (torch.randn(shape, device=DEVICE, dtype=dtype) for _ in range(3))
    module = RotaryEmbedding(shape[-1], base=BASE)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    times = {
        "attention": float(do_bench(lambda: sdpa(q, k, v, is_causal=True), return_mode="median")),
        "rope_q_and_k": float(do_bench(lambda: module.apply(q, k), return_mode="median")),
    }
    share = times["rope_q_and_k"] / (times["rope_q_and_k"] + times["attention"])
    return {"shape": list(shape), "dtype": dtype_name, "times": times, "rope_share": share}


def _progress(text: str) -> None:
    """One line on stderr, so a run cut short still shows how far it got."""
    print(text, file=sys.stderr, flush=True)


def _section(name: str, make, results: dict) -> None:
    """results[name] = make(), or the error under results["errors"][name]."""
    try:
        results[name] = make()
    except Exception as error:
        results.setdefault("errors", {})[name] = f"{type(error).__name__}: {str(error)[:500]}"
        _progress(f"{name} failed: {results['errors'][name]}")


def check_accuracy() -> list[dict]:
    """Largest float32 error against float64, |x| <= 1, positions up to 10**6, on the GPU."""
    import torch

    from posenc import rotary_triton
    from posenc.rotary import RotaryEmbedding

    batch, heads, seq, head_dim = 2, 4, 512, 128
    x = torch.rand(batch, heads, seq, head_dim, device=DEVICE, dtype=torch.float64) * 2 - 1
    positions = torch.randint(0, ACCURACY_POSITION + 1, (batch, seq), device=DEVICE)
    positions[:, -1] = ACCURACY_POSITION
    found = []
    for pairing in ("half", "interleaved"):
        module = RotaryEmbedding(head_dim, base=BASE, pairing=pairing)
        theta = torch.from_numpy(module.frequencies).to(DEVICE)
        exact = module(x, positions)  # float64 throughout: the yardstick
        xf = x.float()
        for method, got in (
            (f"posenc_{pairing}", module(xf, positions)),
            (f"triton_{pairing}", rotary_triton.rotate(xf, theta, positions, pairing=pairing)),
        ):
            error = float((got.double() - exact).abs().max())
            found.append(
                {
                    "method": method,
                    "position": ACCURACY_POSITION,
                    "error": error,
                    "bound": ACCURACY_BOUND,
                }
            )
    return found


def check_kernel() -> list[dict]:
    """posenc's module on the GPU against its float64 pair formula on the CPU: both
    pairings and layouts, full and partial rotary, float32 and bfloat16, positions or
    none, a strided view of a fused projection, decode; and the gradient in float32.
    Each row: the largest error and the bound it must meet (a few float32 roundings
    for float32, one bfloat16 rounding, 2**-8 of |x| <= 1, for bfloat16)."""
    import torch

    from posenc.rotary import RotaryEmbedding

    generator = torch.Generator().manual_seed(0)
    found = []
    cases = [
        (pairing, layout, rotary, dtype, shape, with_positions, strided)
        for pairing in ("half", "interleaved")
        for layout in ("bhsd", "bshd")
        for rotary in (None, 32)
        for dtype in ("float32", "bfloat16")
        for shape, with_positions, strided in (
            ((2, 4, 37, 64), True, False),
            ((2, 4, 37, 64), False, True),
            ((3, 8, 1, 64), True, False),
        )
    ]
    for pairing, layout, rotary, dtype, shape, with_positions, strided in cases:
        batch, heads, seq, head_dim = shape
        dims = (batch, heads, seq) if layout == "bhsd" else (batch, seq, heads)
        exact_x = torch.rand(*dims, head_dim, generator=generator, dtype=torch.float64) * 2 - 1
        positions = torch.randint(0, 70000, (batch, seq), generator=generator)
        module = RotaryEmbedding(head_dim, pairing=pairing, rotary_dim=rotary, layout=layout)
        x = exact_x.to(getattr(torch, dtype))
        if strided:  # the middle third of a fused (q, k, v) projection
            fused = torch.cat([x, x, x], dim=-1).to(DEVICE)
            x_dev = fused[..., head_dim : 2 * head_dim]
        else:
            x_dev = x.to(DEVICE)
        p_dev = positions.to(DEVICE) if with_positions else None
        got = module(x_dev, p_dev).double().cpu()
        exact = module(x.double(), positions if with_positions else None)
        bound = 2e-6 if dtype == "float32" else 2**-8 + 2e-6  # one rounding below 2
        error = float((got - exact).abs().max())
        found.append(
            {
                "case": f"{pairing} {layout} rotary={rotary} {dtype} {shape} "
                f"positions={with_positions} strided={strided}",
                "error": error,
                "bound": bound,
                "met": error <= bound,
            }
        )
    x = torch.rand(2, 4, 37, 64, dtype=torch.float64, generator=generator) * 2 - 1
    grad = torch.rand(2, 4, 37, 64, dtype=torch.float64, generator=generator) * 2 - 1
    for pairing in ("half", "interleaved"):
        module = RotaryEmbedding(64, pairing=pairing)
        x_dev = x.float().to(DEVICE).requires_grad_()
        module(x_dev).backward(grad.float().to(DEVICE))
        exact_x = x.clone().requires_grad_()
        module(exact_x).backward(grad)
        error = float((x_dev.grad.double().cpu() - exact_x.grad).abs().max())
        found.append(
            {"case": f"gradient {pairing} float32", "error": error, "bound": 2e-6,
             "met": error <= 2e-6}
        )  # fmt: skip
    return found


def check_no_sync() -> dict:
    """Run posenc's forward with positions under set_sync_debug_mode("error")."""
    import torch

    from posenc.rotary import RotaryEmbedding

    q = torch.randn(2, 4, 16, 128, device="cuda")
    positions = torch.arange(16, device="cuda").expand(2, 16).contiguous()
    module = RotaryEmbedding(128, base=BASE)
    module(q, positions), module(q)  # warm: compile, build caches
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        module(q, positions)
        module(q)
    except RuntimeError as error:
        return {"ok": False, "detail": str(error).splitlines()[0]}
    finally:
        torch.cuda.set_sync_debug_mode("default")
    return {"ok": True, "detail": "no sync"}


def run() -> dict:
    import torch
    import transformers
    import triton

    results = {
        "gpu": torch.cuda.get_device_name(),
        "driver": _driver(),
        "cuda": torch.version.cuda,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "transformers": transformers.__version__,
    }
    _section("rows", lambda: [measure(shape, dtype) for shape, dtype in SHAPES], results)
    _section(
        "decode",
        lambda: [measure(DECODE_SHAPE, dtype, start=DECODE_POSITION) for dtype in DTYPES],
        results,
    )
    _section("kernel_checks", check_kernel, results)
    _progress(f"kernel checks: {[c for c in results.get('kernel_checks', []) if not c['met']]}")
    _section("accuracy", check_accuracy, results)
    _section("no_sync", check_no_sync, results)
    _section(
        "sweep",
        lambda: {
            "sequence": [measure(s, "bfloat16", only=SWEEP_METHODS) for s in SWEEP_SEQ],
            "batch": [measure(s, "bfloat16", only=SWEEP_METHODS) for s in SWEEP_BATCH],
        },
        results,
    )
    _section(
        "graphs",
        lambda: (
            [measure_graphs(shape, dtype) for shape, dtype in SHAPES]
            + [measure_graphs(DECODE_SHAPE, d, start=DECODE_POSITION) for d in DTYPES]
        ),
        results,
    )
    _section("backward", measure_backward, results)
    _section("attention", measure_attention_share, results)
    found = {k: results.get(k) for k in ("rows", "decode", "accuracy", "no_sync")}
    _section("goals", lambda: goals(**found), results)
    _section("graph_goals", lambda: graph_goals(results["graphs"]), results)
    for key in ("rows", "decode"):
        if key in results:
            results[key] = with_multiples(results[key])
    if "graphs" in results:
        results["graphs"] = with_multiples(results["graphs"])
    if "sweep" in results:
        results["sweep"] = {axis: with_multiples(f) for axis, f in results["sweep"].items()}
    return results


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    try:
        import torch
    except ImportError:
        torch = None
    if torch is None or not torch.cuda.is_available():
        print("rope_gpu.py needs a CUDA GPU (torch.cuda.is_available() is False)", file=sys.stderr)
        return 2
    results = run()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1) + "\n")
    try:
        print(format_report(results))
    except (KeyError, TypeError) as error:  # a section failed: the file says which
        print(f"no report ({error!r}); errors: {results.get('errors')}")
    return 0 if all_met(results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
