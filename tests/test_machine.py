"""posenc.machine: the parsing, the outlier and goal logic, the threaded bounds, the
allocator probe and the runner's JSON. No timing is asserted."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from posenc import fast, machine

ROOT = Path(__file__).resolve().parents[1]


def _fake_cache(root: Path, index: int, level, kind, size, shared="0"):
    folder = root / f"index{index}"
    folder.mkdir(parents=True)
    for name, value in (("level", level), ("type", kind), ("size", size)):
        (folder / name).write_text(f"{value}\n")
    (folder / "shared_cpu_list").write_text(f"{shared}\n")


def test_cache_levels_reads_a_sysfs_tree(tmp_path):
    _fake_cache(tmp_path, 0, 1, "Data", "48K")
    _fake_cache(tmp_path, 1, 1, "Instruction", "32K")
    _fake_cache(tmp_path, 2, 2, "Unified", "2048K")
    _fake_cache(tmp_path, 3, 3, "Unified", "300M", shared="0-1")
    caches = machine.cache_levels(tmp_path)
    assert [(c["level"], c["type"]) for c in caches] == [
        (1, "Data"),
        (1, "Instruction"),
        (2, "Unified"),
        (3, "Unified"),
    ]
    assert caches[-1]["shared_cpu_list"] == "0-1"
    assert machine.data_cache_bytes(caches) == {
        "L1d": 48 * 1024,
        "L2": 2048 * 1024,
        "L3": 300 * 2**20,
    }


def test_cache_levels_of_a_missing_tree_is_empty(tmp_path):
    assert machine.cache_levels(tmp_path / "absent") == []


@pytest.mark.parametrize("text", ["", "K", "12X", "1.5M", "-4K"])
def test_parse_size_refuses_what_is_not_a_size(text):
    with pytest.raises(ValueError, match="text"):
        machine.parse_size(text)


def test_parse_size_units():
    assert [machine.parse_size(t) for t in ("512", "48K", "2M", "1G\n")] == [
        512,
        48 * 2**10,
        2 * 2**20,
        2**30,
    ]


def test_outliers_are_those_above_three_times_the_median():
    summary = machine.summarize([1.0, 1.1, 0.9, 3.5, 2.9])
    assert (summary["median"], summary["min"], summary["max"]) == (1.1, 0.9, 3.5)
    assert summary["outliers"] == [3]  # 3.5 > 3.3; 2.9 is not
    named = machine.named_outliers({"rotate_half 32 MiB": summary})
    assert named == [
        {"what": "rotate_half 32 MiB", "index": 3, "value": 3.5, "x_median": 3.5 / 1.1}
    ]
    assert machine.summarize([1.0, 1.0, 3.0])["outliers"] == []  # at 3x, not above
    with pytest.raises(ValueError, match="samples"):
        machine.summarize([])


def test_goal_met_and_missed():
    met = [
        {"table": [2.0, 2.1, 1.9], "fill": [1.0, 1.0, 1.1]},  # ratio 2.0: at the target
        {"table": [3.0], "fill": [1.0]},  # an outlying repetition
        {"table": [1.5], "fill": [1.0]},
    ]
    goal = machine.goal_from_repetitions(met)
    assert goal["ratios"] == [2.0, 3.0, 1.5]
    assert (goal["value"], goal["met"]) == (2.0, True)
    missed = [{"table": [2.2], "fill": [1.0]}] * 2 + [{"table": [1.0], "fill": [1.0]}]
    goal = machine.goal_from_repetitions(missed)
    assert goal["value"] == pytest.approx(2.2)
    assert not goal["met"]
    with pytest.raises(ValueError, match="fill"):
        machine.goal_from_repetitions([{"table": [1.0]}])


@pytest.mark.parametrize("threads", [1, 2, 3, 8])
def test_threaded_fill_and_copy_write_every_element(threads):
    out = np.zeros((37, 5), dtype=np.float32)
    machine.threaded_fill(out, 0.5, threads)
    assert np.all(out == 0.5)
    source = np.arange(37 * 5, dtype=np.float32).reshape(37, 5)
    machine.threaded_copy(source, out, threads)
    np.testing.assert_array_equal(out, source)
    fresh = machine.fresh_fill((37, 5), np.float64, threads)
    assert fresh.dtype == np.float64
    assert np.all(fresh == 0.5)


def test_split_rows_covers_every_row_once():
    seen = []
    machine.split_rows(lambda lo, hi: seen.extend(range(lo, hi)), 11, 4)
    assert sorted(seen) == list(range(11))
    with pytest.raises(ValueError, match="threads"):
        machine.split_rows(lambda lo, hi: None, 11, 0)
    with pytest.raises(TypeError, match="threads"):
        machine.split_rows(lambda lo, hi: None, 11, 2.0)


def test_threaded_copy_refuses_mismatched_shapes():
    with pytest.raises(ValueError, match="shape"):
        machine.threaded_copy(np.zeros((3, 2)), np.zeros((2, 3)), 2)


def test_fast_threads_reads_posenc_fast(monkeypatch):
    assert machine.fast_threads(64, 128) == 1  # no whole block
    assert machine.fast_threads(8192, 1024) == min(fast.THREADS, 8192 // fast.BLOCK - 1)
    monkeypatch.setattr(fast, "THREADS", 5)
    assert machine.fast_threads(8192, 1024) == 5
    monkeypatch.setattr(fast, "THREADED_MIN_PRODUCTS", 2**40)
    assert machine.fast_threads(8192, 1024) == 1
    with pytest.raises(ValueError, match="length"):
        machine.fast_threads(0, 8)
    with pytest.raises(TypeError, match="d_model"):
        machine.fast_threads(8, 8.0)


def test_bandwidth_sizes_span_the_caches():
    assert machine.bandwidth_sizes(None) == machine.BANDWIDTH_SIZES
    assert machine.bandwidth_sizes(32 * 2**20) == machine.BANDWIDTH_SIZES  # 4x L3 is smaller
    assert machine.bandwidth_sizes(100 * 2**20)[-1] == 400 * 2**20
    assert machine.bandwidth_sizes(2**30)[-1] == machine.MAX_ARRAY_BYTES


def test_thread_speedups_read_the_large_sizes():
    def row(kind, nbytes, threads, seconds):
        return {"kind": kind, "bytes": nbytes, "threads": threads, "seconds": {"median": seconds}}

    rows = [row("fill_warm", 2**20, 1, 2.0), row("fill_warm", 2**20, 2, 1.0)]  # in cache
    rows += [row("fill_warm", 64 * 2**20, 1, 2.0), row("fill_warm", 64 * 2**20, 2, 2.0)]
    speedups = machine.thread_speedups(rows, [1, 2])
    assert [s["speedup"] for s in speedups["rows"]] == [2.0, 1.0]
    assert speedups["best_large"] == 1.0  # only 16 MiB and more count
    assert speedups["gil_released"] is False
    rows[-1] = row("fill_warm", 64 * 2**20, 2, 1.25)
    assert machine.thread_speedups(rows, [1, 2])["gil_released"] is True
    rows[-1] = row("fill_warm", 64 * 2**20, 2, 2.0 / 1.1)  # 10%: within the noise
    assert machine.thread_speedups(rows, [1, 2])["gil_released"] is False
    assert machine.thread_speedups(rows[:1], [1])["gil_released"] is None


def test_allocator_probe_counts_faults_in_a_fresh_process():
    probe = machine.allocator_probe((256, 1024), calls=2)  # 1 MiB: mapped on the first call
    assert probe["bytes"] == 2**20
    assert len(probe["faults"]) == 2
    assert all(isinstance(f, int) and f >= 0 for f in probe["faults"])
    assert probe["faults"][0] > 0  # a new mapping is faulted in
    assert probe["ms"]["median"] > 0
    with pytest.raises(ValueError, match="calls"):
        machine.allocator_probe((4, 4), calls=0)


def test_madvise_hugepage_is_restored():
    before = machine.numpy_madvise_hugepage()
    if before is None:
        pytest.skip("this NumPy does not expose its madvise-hugepage setting")
    with machine.madvise_hugepage(not before):
        assert machine.numpy_madvise_hugepage() is (not before)
    assert machine.numpy_madvise_hugepage() is before
    with pytest.raises(TypeError, match="enabled"):
        with machine.madvise_hugepage(1):
            pass


def _check_structure(results: dict) -> None:
    facts = results["machine"]
    for key in ("cpu", "cores", "caches", "cache_bytes", "transparent_hugepages", "glibc"):
        assert key in facts
    assert "numpy_threads" not in facts  # no thread count written down by hand
    assert facts["threads"]["posenc.fast large table"] >= 1
    bandwidth = results["bandwidth"]
    kinds = {(r["kind"], r["bytes"], r["threads"]) for r in bandwidth["rows"]}
    assert len(kinds) == 3 * len(bandwidth["sizes"]) * len(bandwidth["thread_counts"])
    for row in bandwidth["rows"]:
        seconds = row["seconds"]
        assert seconds["min"] <= seconds["median"] <= seconds["max"]
        assert len(seconds["samples"]) == results["rounds"]
        assert row["gb_per_s"] > 0
    assert [p["shape"] for p in results["allocator"]["probes"]] == [[8192, 1024], [8192, 1023]]
    for probe in results["allocator"]["probes"]:
        assert all(f >= 0 for f in probe["faults"])
    assert {row["dtype"] for row in results["goal"]} == {"float32", "float64"}
    for row in results["goal"]:
        assert len(row["ratios"]) == machine.GOAL_REPETITIONS
        assert row["value"] == pytest.approx(float(np.median(row["ratios"])))
        assert row["met"] == (row["value"] <= row["target"])
    share = results["rope_share"]
    if share is not None:
        assert 0 < share["rope_fraction"] < 1
    for outlier in results["outliers"]:
        assert outlier["x_median"] > results["outlier_factor"]


def test_quick_run_writes_the_json(tmp_path):
    out = tmp_path / "machine.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "machine.py"), "--quick", "--out", str(out)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert done.returncode in (0, 1), done.stderr  # 1: the goal missed on a busy machine
    assert "Traceback" not in done.stderr, done.stderr
    assert "goal: new table" in done.stdout
    results = json.loads(out.read_text())
    assert results["quick"] is True
    _check_structure(results)


@pytest.mark.skipif(
    not (ROOT / "data" / "machine.json").exists(), reason="make bench writes data/machine.json"
)
def test_committed_machine_json():
    results = json.loads((ROOT / "data" / "machine.json").read_text())
    assert results["quick"] is False
    _check_structure(results)
    assert max(results["bandwidth"]["sizes"]) >= 256 * 2**20


def test_paired_ratios_divide_round_by_round():
    assert machine.paired_ratios([2.0, 6.0, 3.0], [1.0, 2.0, 3.0]) == [2.0, 3.0, 1.0]
    with pytest.raises(ValueError, match="one nonzero length"):
        machine.paired_ratios([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="one nonzero length"):
        machine.paired_ratios([], [])


def test_median_interval_uses_order_statistics():
    five = machine.median_interval([5, 1, 4, 2, 3])
    assert (five["low"], five["high"], five["k"]) == (1.0, 5.0, 1)
    assert five["coverage"] == 1 - 2 / 2**5  # 93.75%: below 95%, still the widest
    fifteen = machine.median_interval(range(15))
    # P(Binomial(15, 1/2) <= 3) = 576 / 32768
    assert (fifteen["low"], fifteen["high"], fifteen["k"]) == (3.0, 11.0, 4)
    assert fifteen["coverage"] == 1 - 2 * 576 / 2**15
    assert machine.median_interval(range(15), 0.99)["k"] == 3
    with pytest.raises(ValueError, match="empty"):
        machine.median_interval([])
    with pytest.raises(ValueError, match="confidence"):
        machine.median_interval([1.0], 1.0)
