"""posenc.rope_benchmark: what it computes, never how fast anything ran."""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import ROOT, run_benchmark_quick

torch = pytest.importorskip("torch")

from posenc import rope_benchmark as rb  # noqa: E402

# cos and sin rounded once (2**-24 relative each), two products and a sum: the float32
# rotation of x with |x0|, |x1| <= m is within about 5 * 2**-24 * 2m of exact.
FLOAT32_ROTATION = 5 * 2.0**-24 * 2


def test_the_rotate_half_formulation_is_the_half_pairing_rotation():
    q = torch.randn(1, 3, 64, 16, generator=torch.Generator().manual_seed(0))
    positions = np.arange(64)
    exact = rb.exact_rotation(q.numpy(), positions, "half")
    got = rb.rotate_half_formulation(16, 64)(q).numpy()
    assert np.abs(got - exact).max() <= FLOAT32_ROTATION * float(q.abs().max())
    assert not np.allclose(got, rb.exact_rotation(q.numpy(), positions, "interleaved"))


def test_float32_angles_err_by_the_rounding_of_a_large_angle():
    # Near position 100,000 a float32 angle has ulp 2**-7: rounding alone moves cos and
    # sin by up to 2**-8 (3.9e-3) on the fastest pair, far above float32 arithmetic.
    errors = {
        (e["method"], e["start"]): e["max_abs_error"] for e in rb.measure_errors((1, 1, 512, 16))
    }
    assert errors["float32_angles", rb.FAR_START] > 1e-3
    for method in ("posenc_half", "posenc_interleaved", "numpy_half", "rotate_half"):
        for start in (0, rb.FAR_START):
            assert errors[method, start] <= rb.GOAL_FLOAT32_ERROR


def test_the_unblocked_by_head_and_formula_forms_give_the_module_result():
    from posenc.torch import RotaryEmbedding

    q = torch.randn(1, 2, 40, 16, generator=torch.Generator().manual_seed(1))
    module = RotaryEmbedding(16)
    with torch.no_grad():
        want = module(q)
        torch.testing.assert_close(rb.unblocked_half(module)(q), want, rtol=0, atol=1e-6)
        torch.testing.assert_close(rb.by_head_half(module)(q), want, rtol=0, atol=1e-6)
        torch.testing.assert_close(rb.formula(module)(q), want, rtol=0, atol=1e-6)


def _times(**speeds):
    rows = {"clone": {"seconds": 1.0, "x_copy": 1.0}, "rotate_half": {"seconds": 10.0}}
    for name, seconds in speeds.items():
        rows[name] = {
            "seconds": seconds,
            "x_copy": seconds,
            "x_faster_than_rotate_half": 10.0 / seconds,
        }
    return rows


def test_goals_are_met_only_within_their_targets():
    errors = [
        {"method": "posenc_half", "start": 0, "max_abs_error": 1e-6},
        {"method": "posenc_half", "start": rb.FAR_START, "max_abs_error": 3e-5},
        {"method": "posenc_interleaved", "start": 0, "max_abs_error": 1e-6},
        {"method": "posenc_interleaved", "start": rb.FAR_START, "max_abs_error": 1e-6},
    ]
    met = {
        g["goal"]: g["met"]
        for g in rb.goals(_times(posenc_half=4.5, posenc_interleaved=3.0), errors)
    }
    assert met == {
        "half: faster than rotate_half (x)": False,  # 10 / 4.5 = 2.2
        "half: multiple of q.clone()": False,  # 4.5
        "half: float32 error at 0-2047 and 100,000-102,047": False,  # 3e-5 far out
        "interleaved: faster than rotate_half (x)": True,
        "interleaved: multiple of q.clone()": True,
        "interleaved: float32 error at 0-2047 and 100,000-102,047": True,
    }


def test_busy_goals_compare_each_pairing_with_rotate_half_in_its_own_rounds():
    def row(shape, threads, method, ratio):
        return {"shape": shape, "threads": threads, "method": method, "x_rotate_half": ratio}

    rows = [
        row([1, 2, 3, 4], 1, "clone", 0.2),
        row([1, 2, 3, 4], 1, "rotate_half", 1.0),
        row([1, 2, 3, 4], 1, "posenc_half", 0.9),
        row([1, 2, 3, 4], 2, "posenc_interleaved", 1.3),
    ]
    found = rb.busy_goals(rows)
    assert [(g["goal"], g["met"]) for g in found] == [
        ("busy core, 1x2x3x4, 1 thread(s), half: x rotate_half", True),
        ("busy core, 1x2x3x4, 2 thread(s), interleaved: x rotate_half", False),
    ]


def test_busy_core_keeps_a_process_running_and_stops_it():
    with rb.busy_core() as spinner:
        assert spinner.poll() is None
    assert spinner.poll() is not None


@pytest.mark.slow
def test_quick_run_writes_the_results(tmp_path):
    out = tmp_path / "rope.json"
    done = run_benchmark_quick("rope.py", out)
    assert "goals" in done.stdout and "posenc_half" in done.stdout
    _check_results(json.loads(out.read_text()), rb.QUICK_SHAPE, compiled=False)
    _check_busy(json.loads((tmp_path / "rope_busy.json").read_text()), rb.QUICK_BUSY_SHAPES)


def test_the_committed_results_are_a_full_run():
    results = json.loads((ROOT / "data" / "rope_benchmark.json").read_text())
    _check_results(results, rb.SHAPE, compiled=True)
    assert results["machine"]["torch_threads"] == rb.THREADS
    assert set(results["compile"]) == set(rb.PAIRINGS)


def test_the_committed_busy_results_are_a_full_run():
    _check_busy(json.loads((ROOT / "data" / "rope_busy.json").read_text()), rb.BUSY_SHAPES)


def _check_busy(results, shapes):
    methods = {"clone", "rotate_half", "posenc_half", "posenc_interleaved", "by_head_half"}
    keys = {(tuple(r["shape"]), r["threads"], r["method"]) for r in results["times"]}
    assert keys == {(tuple(s), t, m) for s in shapes for t in rb.BUSY_THREADS for m in methods}
    for row in results["times"]:
        assert 0 < row["seconds_min"] <= row["seconds"] <= row["seconds_max"]
        reference = next(
            r["seconds"]
            for r in results["times"]
            if (r["shape"], r["threads"], r["method"])
            == (row["shape"], row["threads"], "rotate_half")
        )
        assert row["x_rotate_half"] == pytest.approx(row["seconds"] / reference)
    assert len(results["goals"]) == 2 * len(shapes) * len(rb.BUSY_THREADS)


def _check_results(results, shape, *, compiled):
    assert results["shape"] == list(shape) and results["dtype"] == "float32"
    names = {"clone", "rotate_half", "formula_half", "unblocked_half", "by_head_half"}
    names |= {"posenc_half"}
    names |= {"posenc_interleaved", "np_copy", "numpy_half", "numpy_interleaved"}
    assert names <= set(results["times"])
    for row in results["times"].values():
        assert 0 < row["seconds_min"] <= row["seconds"] <= row["seconds_max"]
        assert row["rounds"] == results["rounds"]
        bound = "np_copy" if row["library"] == "numpy" else "clone"
        ratio = row["seconds"] / results["times"][bound]["seconds"]
        assert row["x_copy"] == pytest.approx(ratio)
    methods = {(e["method"], e["start"]) for e in results["errors"]}
    for method in ("posenc_half", "posenc_interleaved", "numpy_half", "float32_angles"):
        assert {(method, 0), (method, rb.FAR_START)} <= methods
    assert len(results["goals"]) == 6
    if compiled:  # a compiled row exactly where compilation is reported to have worked
        for pairing, note in results["compile"].items():
            assert (f"compiled_{pairing}" in results["times"]) == note.startswith("compiled")
