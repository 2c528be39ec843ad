"""benchmarks/rope_gpu.py on the CPU: goal evaluation and the report with made-up timings,
and the exit status where there is no CUDA GPU."""

from __future__ import annotations

import importlib.util
import json

import pytest

from conftest import ROOT

spec = importlib.util.spec_from_file_location("rope_gpu", ROOT / "benchmarks" / "rope_gpu.py")
rope_gpu = importlib.util.module_from_spec(spec)
spec.loader.exec_module(rope_gpu)


def synthetic(**overrides):
    """Results where every goal is met, with ``overrides`` applied to the first row's times."""
    times = {
        "clone": 0.2,
        "hf_eager": 1.8,
        "hf_compiled": 0.21,
        "posenc_half": 0.22,
        "posenc_interleaved": 0.23,
        "posenc_half_positions": 0.24,
        "triton_half": 0.22,
        "triton_interleaved": 0.23,
    }
    rows = [
        {"shape": [1, 32, 4096, 128], "dtype": "bfloat16", "times": {**times, **overrides}},
        {"shape": [8, 32, 4096, 128], "dtype": "float32", "times": dict(times)},
    ]
    decode = [
        {
            "shape": [64, 32, 1, 128],
            "dtype": "bfloat16",
            "times": {"clone": 0.004, "hf_eager": 0.05, "posenc_half_positions": 0.006},
        }
    ]
    accuracy = [{"method": "triton_half", "position": 10**6, "error": 4e-7, "bound": 1e-6}]
    return rows, decode, accuracy, {"ok": True, "detail": "no sync"}


def test_all_goals_met():
    found = rope_gpu.goals(*synthetic())
    # 2 rows x (2 pairings + positions) + decode + accuracy + no sync
    assert len(found) == 2 * 3 + 1 + 1 + 1
    assert all(goal["met"] for goal in found)


@pytest.mark.parametrize(
    ("overrides", "missed"),
    [
        ({"posenc_half": 0.26, "posenc_half_positions": 0.27}, "posenc_half <= 1.25 x clone"),
        ({"posenc_interleaved": 0.3}, "posenc_interleaved <= 1.25 x clone"),
        ({"posenc_half_positions": 0.34}, "positions <= 1.5 x positions=None"),
    ],
)
def test_a_missed_goal_is_reported(overrides, missed):
    found = rope_gpu.goals(*synthetic(**overrides))
    failed = [goal["goal"] for goal in found if not goal["met"]]
    assert len(failed) == 1 and failed[0].startswith(missed), failed


def test_decode_accuracy_and_sync_goals_can_fail():
    rows, decode, accuracy, _ = synthetic()
    decode[0]["times"]["posenc_half_positions"] = 0.06
    accuracy[0]["error"] = 2e-6
    found = rope_gpu.goals(rows, decode, accuracy, {"ok": False, "detail": "synchronizing"})
    failed = [goal["goal"] for goal in found if not goal["met"]]
    assert len(failed) == 3
    assert failed[0].startswith("decode") and failed[1].startswith("float32 error")
    assert failed[2] == "no host sync in forward"


def test_report_and_multiples():
    rows, decode, accuracy, no_sync = synthetic(posenc_half=0.3)
    results = {
        "gpu": "Made-up GPU",
        "driver": "0.0",
        "rows": rope_gpu.with_multiples(rows),
        "decode": rope_gpu.with_multiples(decode),
        "goals": rope_gpu.goals(rows, decode, accuracy, no_sync),
    }
    assert results["rows"][0]["x_clone"]["posenc_half"] == pytest.approx(1.5)
    assert results["rows"][0]["x_clone"]["clone"] == 1.0
    report = rope_gpu.format_report(results)
    assert "Made-up GPU" in report
    assert "posenc_half 0.3000 (1.50x)" in report
    assert "[MISSED] posenc_half <= 1.25 x clone, (1, 32, 4096, 128) bfloat16: 1.5" in report
    assert not rope_gpu.all_met(results)
    json.dumps(results)  # what main() writes


def test_main_exits_2_without_cuda(monkeypatch, tmp_path, capsys):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    out = tmp_path / "rope_gpu.json"
    assert rope_gpu.main(["--out", str(out)]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err
    assert not out.exists()


@pytest.fixture
def on_the_cpu(monkeypatch):
    """The measuring code run on the CPU: small shapes, a stand-in for do_bench that
    calls each function twice (and clears the gradients it names), no compilation, the
    Triton kernel in its interpreter."""
    import torch
    import triton.testing

    calls = []

    def do_bench(fn, grad_to_none=None, return_mode="median"):
        for _ in range(2):
            fn()
            for tensor in grad_to_none or ():
                tensor.grad = None
        calls.append(return_mode)
        return 1.0

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(triton.testing, "do_bench", do_bench)
    monkeypatch.setattr(triton.testing, "do_bench_cudagraph", do_bench)
    monkeypatch.setattr(torch, "compile", lambda fn: fn)
    monkeypatch.setattr(rope_gpu, "DEVICE", "cpu")
    return calls


def test_the_measuring_code_runs(on_the_cpu):
    row = rope_gpu.measure((2, 4, 8, 16), "float32", start=5)
    assert set(row["times"]) == {
        "clone", "hf_eager", "hf_compiled", "posenc_half", "posenc_interleaved",
        "posenc_half_positions", "posenc_interleaved_positions", "triton_half",
        "triton_interleaved",
    }  # fmt: skip
    assert row["clone_gbps"] == pytest.approx(2 * 2 * 4 * 8 * 16 * 4 / 1e-3 / 1e9)
    only = rope_gpu.measure((1, 2, 4, 16), "bfloat16", only=rope_gpu.SWEEP_METHODS)
    assert set(only["times"]) == set(rope_gpu.SWEEP_METHODS)
    backward = rope_gpu.measure_backward((1, 2, 8, 16), "float32")
    assert set(backward["times"]) == {
        "two_clones", "hf_eager", "posenc_half", "posenc_half_positions"
    }  # fmt: skip
    attention = rope_gpu.measure_attention_share((1, 2, 8, 16), "float32")
    assert attention["rope_share"] == pytest.approx(0.5)
    assert len(on_the_cpu) == 9 + 5 + 4 + 2
    graphs = rope_gpu.measure_graphs((2, 4, 8, 16), "float32", start=5)
    assert set(graphs["times"]) == set(rope_gpu.GRAPH_METHODS) and "errors" not in graphs
    assert graphs["position_check_eager"] == 1.0
    assert len(on_the_cpu) == 9 + 5 + 4 + 2 + len(rope_gpu.GRAPH_METHODS) + 1


def test_the_kernel_checks_compare_with_the_float64_formula(on_the_cpu):
    # On the CPU the module computes float32 in float32 (within the bound) and bfloat16
    # in bfloat16 (several roundings: over the one-rounding bound the GPU kernel meets)
    rows = rope_gpu.check_kernel()
    assert len(rows) == 2 * 2 * 2 * 2 * 3 + 2
    exact = [row for row in rows if "bfloat16" not in row["case"]]
    assert exact and all(row["met"] for row in exact), exact
    assert not all(row["met"] for row in rows if "bfloat16" in row["case"])


def test_the_hugging_face_side_rotates_q_as_the_module_does(on_the_cpu):
    # Every method of the table computes the same rotation: a method that rotated
    # something else (or two tensors) would not be timing the same work.
    import torch

    from posenc.rotary import RotaryEmbedding

    q = torch.randn(2, 4, 8, 16, dtype=torch.float32)
    positions = (torch.arange(8) + 3).expand(2, 8).contiguous()
    hf_module, rotate_half = rope_gpu._hf_rotary(16, "cpu")
    methods = rope_gpu._methods(q, positions, hf_module, rotate_half)
    want = RotaryEmbedding(16, base=rope_gpu.BASE)(q.double(), positions).float()
    torch.testing.assert_close(methods["hf_eager"](), want, rtol=0, atol=1e-5)
    torch.testing.assert_close(methods["posenc_half_positions"](), want, rtol=0, atol=1e-5)


def test_the_committed_gpu_results_are_a_full_run():
    # data/rope_gpu.json: one run of this script on a CUDA GPU, every section present,
    # no method failed, every multiple and goal what its own times give
    results = json.loads((ROOT / "data" / "rope_gpu.json").read_text())
    assert "errors" not in results and results["gpu"].startswith("NVIDIA")
    shapes = [(tuple(r["shape"]), r["dtype"]) for r in results["rows"]]
    assert shapes == [(tuple(s), d) for s, d in rope_gpu.SHAPES]
    assert [(tuple(r["shape"]), r["dtype"]) for r in results["decode"]] == [
        (rope_gpu.DECODE_SHAPE, d) for d in rope_gpu.DTYPES
    ]
    for row in results["rows"] + results["decode"]:
        assert "errors" not in row and len(row["times"]) == 9
    assert [tuple(r["shape"]) for r in results["graphs"]] == [tuple(s) for s, _ in shapes] + [
        rope_gpu.DECODE_SHAPE
    ] * 2
    for row in results["graphs"]:
        assert "errors" not in row and set(row["times"]) == set(rope_gpu.GRAPH_METHODS)
    for axis, shapes_ in (("sequence", rope_gpu.SWEEP_SEQ), ("batch", rope_gpu.SWEEP_BATCH)):
        rows = results["sweep"][axis]
        assert [tuple(r["shape"]) for r in rows] == list(shapes_)
        assert all(set(r["times"]) == set(rope_gpu.SWEEP_METHODS) for r in rows)
    for row in rope_gpu.with_multiples(results["rows"] + results["graphs"]):
        assert all(t > 0 for t in row["times"].values())
    kept = {k: results[k] for k in ("accuracy", "no_sync")}
    found = rope_gpu.goals(results["rows"], results["decode"], **kept)
    assert [g["goal"] for g in found] == [g["goal"] for g in results["goals"]]
    assert [g["met"] for g in found] == [g["met"] for g in results["goals"]]
    assert rope_gpu.graph_goals(results["graphs"]) == results["graph_goals"]
    assert len(results["kernel_checks"]) == 2 * 2 * 2 * 2 * 3 + 2
    assert all(c["met"] for c in results["kernel_checks"])
    share = results["attention"]["times"]
    assert results["attention"]["rope_share"] == pytest.approx(
        share["rope_q_and_k"] / (share["rope_q_and_k"] + share["attention"])
    )
