"""posenc.benchmark and make bench: what they compute, never how fast anything ran."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from conftest import ROOT, run_benchmark_quick
from posenc import benchmark, implementations

FLOAT32_BOUND = 4 * 2.0**-24
pytest.importorskip("torch")


def test_the_annotated_transformer_construction_rounds_its_angles_to_float32():
    table = benchmark.annotated_transformer(8192, 16)
    assert table.shape == (8192, 16) and table.dtype == np.float32
    truth = implementations.vectorized(8192, 16)
    # the float32 angle near position 8191 is off by up to half its ulp, 2**-11
    assert 1e-4 < np.abs(table - truth).max() < 1e-3
    wide = benchmark.annotated_transformer(300, 16, start=5000, dtype=np.float64)
    assert wide.dtype == np.float64
    assert np.abs(wide - implementations.vectorized(300, 16, start=5000)).max() < 1e-11


def test_the_fill_bound_writes_the_whole_output():
    out = benchmark.fill_bound(7, 5, dtype=np.float64)
    assert out.shape == (7, 5) and out.dtype == np.float64 and np.all(out == 0.5)


def test_every_callable_is_sampled_once_per_round():
    calls = {"a": 0, "b": 0}

    def counting(name):
        def call():
            calls[name] += 1

        return call

    samples = benchmark.time_side_by_side(
        {"a": counting("a"), "b": counting("b")}, rounds=4, min_sample=0.0
    )
    assert {name: len(s) for name, s in samples.items()} == {"a": 4, "b": 4}
    assert all(t >= 0 for s in samples.values() for t in s)
    assert calls == {"a": 5, "b": 5}  # one warm-up call each, then one per round


def test_sampled_rows_include_the_first_and_the_last_eight():
    rows = benchmark.sampled_rows(1000)
    assert rows[0] == 0 and list(rows[-8:]) == list(range(992, 1000))
    assert np.all(np.diff(rows) > 0)
    assert list(benchmark.sampled_rows(3)) == [0, 1, 2]


def test_errors_are_measured_on_the_whole_float32_table_and_sampled_float64_rows():
    truth = implementations.vectorized(50, 8)
    wrong = truth.astype(np.float32)
    wrong[17, 3] += 0.25  # not a sampled row
    exact_rows = benchmark._exact_rows(50, 8, 0)
    assert benchmark.max_error(wrong, start=0, truth64=truth, exact_rows=exact_rows) > 0.24
    wrong64 = truth.copy()
    wrong64[49, 0] += 0.5  # the last row is always sampled
    assert benchmark.max_error(wrong64, start=0, truth64=None, exact_rows=exact_rows) > 0.49


def _run(
    method,
    seconds,
    *,
    dtype="float32",
    size=benchmark.GOAL_SIZE,
    x_fill=1.0,
    x_fill_warm=None,
    error=0.0,
):
    return {
        "method": method,
        "dtype": dtype,
        "length": size[0],
        "d_model": size[1],
        "seconds": seconds,
        "x_fill": x_fill,
        "x_fill_warm": x_fill_warm,
        "max_abs_error": error,
    }


def test_goals_compare_the_right_runs():
    runs = [
        _run("sinusoidal", 1.0, x_fill=1.5, error=1e-7),
        _run("sinusoidal_out", 0.8, x_fill_warm=3.2, error=1e-7),
        _run("pytorch", 1.9),
        _run("sinusoidal", 1.0, size=(512, 128)),
        _run("vectorized", 2.0, size=(512, 128)),
    ]
    far = [
        {"method": "sinusoidal", "dtype": "float32", "max_abs_error": 6e-7},
        {"method": "sinusoidal", "dtype": "float64", "max_abs_error": 1e-10},
    ]
    met = {g["goal"]: g["met"] for g in benchmark.goals(runs, far)}
    assert met == {
        "faster than the PyTorch construction (x)": False,  # 1.9x < 2x
        "new table: multiple of the fresh-page bound": True,  # 1.5 <= 1.6
        "into an existing array: multiple of the warm bound": False,  # 3.2 > 3
        "float32 error, rows 0-8191": True,
        "float32 error, rows near 10**6": False,
        "float64 error, rows near 10**6": True,
        "time / vectorized at 512x128 float32": True,
    }


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="Linux only")
def test_peak_memory_of_a_fill_is_its_output():
    nbytes = 64 * 2**20
    peak = benchmark.peak_memory(lambda: benchmark.fill_bound(nbytes // 8, 1, dtype=np.float64))
    assert 0.9 * nbytes < peak < 1.3 * nbytes


@pytest.mark.slow
def test_make_bench_quick_writes_the_results(tmp_path):
    out = tmp_path / "bench.json"
    done = run_benchmark_quick("tables.py", out)
    assert "goals" in done.stdout and "sinusoidal" in done.stdout
    results = json.loads(out.read_text())
    _check_results(results, benchmark.QUICK_SIZES)
    assert results["far"] == []


def test_the_committed_results_are_a_full_run():
    results = json.loads((ROOT / "data" / "benchmark.json").read_text())
    _check_results(results, benchmark.SIZES)
    far = {(r["method"], r["dtype"]): r["max_abs_error"] for r in results["far"]}
    assert far["sinusoidal", "float32"] <= FLOAT32_BOUND
    assert far["sinusoidal", "float64"] <= 1e-9
    assert far["pytorch", "float32"] > 1e-2  # float32 angles near 10**6


def _check_results(results, sizes):
    assert results["sizes"] == [list(s) for s in sizes]
    assert list(results["methods"]) == [m.name for m in benchmark.METHODS]
    seen = {(r["method"], r["dtype"], r["length"], r["d_model"]): r for r in results["runs"]}
    for method in benchmark.METHODS:
        for dtype in benchmark.DTYPES:
            for length, d_model in sizes:
                key = (method.name, dtype, length, d_model)
                assert (key in seen) == method.applies(length, d_model, dtype), key
    for (name, dtype, length, d_model), r in seen.items():
        nbytes = length * d_model * np.dtype(dtype).itemsize
        assert r["gb_per_s"] == pytest.approx(nbytes / r["seconds"] / 1e9)
        assert 0 < r["seconds_min"] <= r["seconds"]
        if name == "fill":
            assert r["x_fill"] == 1.0 and r["max_abs_error"] is None
        elif name in ("sinusoidal", "sinusoidal_out"):
            assert r["max_abs_error"] <= (FLOAT32_BOUND if dtype == "float32" else 1e-11)
        if name == "fill_warm":
            assert r["x_fill_warm"] == 1.0 and r["max_abs_error"] is None
        assert r["seconds_min"] <= r["seconds"] <= r["seconds_max"]
        assert r["rounds"] == results["rounds"]
        if nbytes < benchmark.PEAK_MIN_BYTES:
            assert r["peak_x_output"] is None
