"""posenc.experiments.long_context: the stretched RoPE models, the script, the data."""

from __future__ import annotations

import csv
import dataclasses
import itertools
import math

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("tqdm")

from conftest import ROOT  # noqa: E402
from posenc.experiments import length_generalization as lg  # noqa: E402
from posenc.experiments import long_context as lc  # noqa: E402
from posenc.long_context import METHODS  # noqa: E402


def _rows(path):
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        return tuple(reader.fieldnames), list(reader)


def _check(path, study):
    fields, rows = _rows(path)
    assert fields == lc.FIELDS
    assert {r["setup"] for r in rows} == {study.id}
    expected = []
    for task, seed in itertools.product(study.tasks, range(study.seeds)):
        for method in METHODS:
            for factor in (1.0,) if method == "none" else study.factors:
                scales = (True, False) if method == "yarn" else (True,)
                for n, tempered in itertools.product(study.eval_lens, scales):
                    expected.append((task, seed, method, factor, tempered, "zero_shot", 0, n))
        for method in METHODS:
            factor = 1.0 if method == "none" else study.finetune_factor
            for n, steps in itertools.product(study.eval_lens, study.finetune_steps):
                expected.append((task, seed, method, factor, True, "fine_tuned", steps, n))
    got = []
    for r in rows:
        method, factor, scale = r["method"], float(r["factor"]), float(r["attention_scale"])
        yarn_scale = 0.1 * math.log(factor) + 1
        # YaRN rows carry its temperature or none; every other method has none
        tempered = math.isclose(scale, yarn_scale, abs_tol=1e-6) if method == "yarn" else True
        assert scale == 1.0 or (method == "yarn" and tempered)
        key = (r["task"], int(r["seed"]), method, factor, tempered, r["stage"])
        got.append((*key, int(r["finetune_steps"]), int(r["eval_len"])))
    assert sorted(got) == sorted(expected)
    train_len = study.plan.setup.train_len
    for r in rows:
        assert 0.0 <= float(r["accuracy"]) <= 1.0 and float(r["loss"]) >= 0.0
        beyond = r["accuracy_beyond_train_len"]
        assert (beyond == "") == (int(r["eval_len"]) == train_len)
        # the mean over queries t >= length - N of an entropy in [0, ln(t + 1)]
        assert 0.0 <= float(r["entropy"]) <= math.log(int(r["eval_len"]) + 1)


def test_quick_run_resumes_and_refuses_another_setup(tmp_path):
    out = tmp_path / "lc.csv"
    assert lc.main(["--quick", "--out", str(out), "--no-progress"]) == 0
    _check(out, lc.QUICK)
    before = out.read_bytes()
    assert lc.run(lc.QUICK, out, tmp_path / "lc_rates.csv", progress=False) == 0
    assert out.read_bytes() == before
    other = dataclasses.replace(lc.QUICK, finetune_steps=(3,))
    with pytest.raises(ValueError, match=f"another setup .{lc.QUICK.id}; this one is {other.id}"):
        lc.run(other, out, tmp_path / "lc_rates.csv", progress=False)
    assert out.read_bytes() == before


def test_zero_shot_with_factor_one_at_the_training_length_is_plain_rope(tmp_path):
    out = tmp_path / "lc.csv"
    lc.main(["--quick", "--out", str(out), "--no-progress"])
    _, rows = _rows(out)
    n = lc.QUICK.plan.setup.train_len
    plain = {
        (r["task"], r["seed"]): r["accuracy"]
        for r in rows
        if r["method"] == "none" and r["stage"] == "zero_shot" and int(r["eval_len"]) == n
    }
    # dynamic NTK changes nothing up to the original length
    for r in rows:
        if r["method"] == "dynamic_ntk" and r["stage"] == "zero_shot" and int(r["eval_len"]) == n:
            assert r["accuracy"] == plain[r["task"], r["seed"]]


def test_study_refuses_what_it_cannot_run(tmp_path):
    with pytest.raises(ValueError, match="is not one of chapter 9's"):
        lc.Study(tasks=("copy_lag7",))
    with pytest.raises(ValueError, match="must be >= 1"):
        lc.Study(seeds=0)
    with pytest.raises(ValueError, match="entropy_batch must be >= 1"):
        lc.Study(entropy_batch=0)
    for steps in ((), (0, 5), (50, 5), (5, 5)):
        with pytest.raises(ValueError, match=r"finetune_steps must be increasing and >= 1"):
            lc.Study(finetune_steps=steps)
    with pytest.raises(ValueError, match="include finetune_factor"):
        lc.Study(factors=(2.0,), finetune_factor=4.0)
    with pytest.raises(ValueError, match="jobs must be >= 1"):
        lc.run(lc.QUICK, tmp_path / "x.csv", tmp_path / "r.csv", jobs=0)
    rates = tmp_path / "rates.csv"
    lg.run(dataclasses.replace(lg.QUICK, arms=("none",)), rates, progress=False)
    with pytest.raises(ValueError, match="no learning-rate grid for RoPE"):
        lc.run(lc.QUICK, tmp_path / "x.csv", rates, progress=False)


def test_committed_results_have_the_structure_the_full_run_writes():
    assert lc.FULL.plan == lg.FULL and lc.FULL.seeds >= 5
    assert lc.FULL.eval_lens == (32, 64, 128, 256)
    _check(ROOT / "data" / "long_context.csv", lc.FULL)
