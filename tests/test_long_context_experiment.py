"""posenc.experiments.long_context: the stretched RoPE models, the script, the data."""

from __future__ import annotations

import csv
import dataclasses
import itertools
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("tqdm")

from conftest import ROOT, read_csv, training_frequencies  # noqa: E402
from posenc.experiments import length_generalization as lg  # noqa: E402
from posenc.experiments import long_context as lc  # noqa: E402
from posenc.long_context import METHODS, yarn_temperature  # noqa: E402


def _kind(method: str) -> str:
    """The attention scale a method's own rows carry: YaRN's temperature or none."""
    return "yarn" if method == "yarn" else "plain"


def _check(path, study):
    fields, rows = read_csv(path)
    assert fields == lc.FIELDS
    assert {r["setup"] for r in rows} == {study.id}
    expected = []
    for task, seed in itertools.product(study.tasks, range(study.seeds)):
        zero_shot = [("none", 1.0, "plain"), ("dynamic_ntk", 1.0, "plain")]
        for factor in study.factors:
            zero_shot += [(m, factor, _kind(m)) for m in METHODS if m != "none"]
            zero_shot += [("yarn", factor, "plain")]
            zero_shot += [(m, factor, "yarn") for m in lc.TEMPERED]
        for (method, factor, kind), n in itertools.product(zero_shot, study.eval_lens):
            expected.append((task, seed, method, factor, kind, "zero_shot", 0, n))
        for method in METHODS:
            factor = 1.0 if method == "none" else study.finetune_factor
            for n, steps in itertools.product(study.eval_lens, study.finetune_steps):
                expected.append((task, seed, method, factor, _kind(method), "fine_tuned", steps, n))
    got = []
    for r in rows:
        method, factor, scale = r["method"], float(r["factor"]), float(r["attention_scale"])
        if scale == 1.0:
            kind = "plain"
        else:
            assert math.isclose(scale, yarn_temperature(factor), abs_tol=1e-6), r
            kind = "yarn"
        key = (r["task"], int(r["seed"]), method, factor, kind, r["stage"])
        got.append((*key, int(r["finetune_steps"]), int(r["eval_len"])))
    assert sorted(got) == sorted(expected)
    train_len = study.plan.setup.train_len
    for r in rows:
        assert 0.0 <= float(r["accuracy"]) <= 1.0 and float(r["loss"]) >= 0.0
        beyond = r["accuracy_beyond_train_len"]
        assert (beyond == "") == (int(r["eval_len"]) == train_len)
        measures = [r[field] for field in lc.FIELDS[-3:]]
        task = lg.parse_task(r["task"])
        fits = task.kind == "copy" and round(task.lag * float(r["factor"])) < int(r["eval_len"])
        assert all(0.0 <= float(m) <= 1.0 for m in measures) if fits else set(measures) == {""}
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
    _, rows = read_csv(out)
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
    # Chapter 10's models are trained as chapter 9's first study trained them; the
    # learning rates come from that study's grid for RoPE, kept beside the results.
    assert lc.FULL.plan.setup == lg.Setup() and lc.FULL.seeds >= 5
    with (ROOT / "data" / "long_context_rates.csv").open(newline="") as handle:
        grid = list(csv.DictReader(handle))
    assert {(r["arm"], r["setup"]) for r in grid} == {("rope", lg.Setup().id)}
    rates = lg.chosen_learning_rates(grid, lc.FULL.plan.setup)
    assert {task for task, _ in rates} >= set(lc.FULL.tasks)
    assert lc.FULL.eval_lens == (32, 64, 128, 256)
    _check(ROOT / "data" / "long_context.csv", lc.FULL)


@pytest.mark.parametrize("method", ["linear", "llama3", "dynamic_ntk"])
def test_fine_tuning_trains_with_the_method_s_frequencies_at_every_step(monkeypatch, method):
    """Each training step runs with the method's own frequencies and scale, also after an
    evaluation in between (an evaluation that reset the model to plain RoPE once made
    every step after the first evaluation train plain RoPE)."""
    study = dataclasses.replace(lc.QUICK, finetune_steps=(1, 2, 4))
    task, setup = lg.parse_task("copy_lag3"), study.plan.setup
    model, _, _ = lg.train(task, lg.ARMS["rope"], 0, 3e-3, setup)
    expected = lc._options(
        study, method, study.finetune_factor, int(study.finetune_factor * setup.train_len)
    )
    in_force = training_frequencies(monkeypatch)
    head = lc._copy_head(model, task, study)
    for steps, tuned in lc._finetuned(model, study, task, method, 0, 3e-3):
        lc._evaluate(
            tuned,
            study,
            task,
            method,
            study.finetune_factor,
            0,
            stage="fine_tuned",
            copy_head=head,
            steps=steps,
        )
    assert len(in_force) == max(study.finetune_steps)
    for frequencies, scale in in_force:
        assert np.array_equal(frequencies, expected[0]) and scale == expected[1]


def test_lag_measures_read_the_copy_head_at_the_lag_and_at_lag_times_s():
    study = lc.QUICK
    task, setup = lg.parse_task("copy_lag3"), study.plan.setup
    model, _, _ = lg.train(task, lg.ARMS["rope"], 0, 3e-3, setup)
    head = lc._copy_head(model, task, study)
    tokens, _ = lg.held_out_batch(task, setup.train_len, study.entropy_batch)
    mass = model.attention_at_distance(tokens, [3], first_query=4)[..., 0]
    assert mass[head] == mass.max()  # the head with the most attention 3 back
    same = lc._lag_measures(model, task, setup.train_len, 1.0, head, study)
    assert same["attention_at_lag"] == same["attention_at_scaled_lag"]
    stretched = lc._lag_measures(model, task, setup.train_len, 2.0, head, study)
    assert stretched["attention_at_lag"] != stretched["attention_at_scaled_lag"]
    assert lc._lag_measures(model, task, 5, 2.0, head, study)["attention_at_lag"] == ""
    recall = lg.parse_task("recall")
    assert lc._copy_head(model, recall, study) is None
    assert set(lc._lag_measures(model, recall, 32, 2.0, None, study).values()) == {""}


def test_attention_at_distance_is_the_mean_weight_on_the_key_d_back():
    from posenc.experiments.model import CausalLanguageModel

    torch.manual_seed(0)
    model = CausalLanguageModel(20, 16, 2, 2, encoding="rope").eval()
    tokens = torch.randint(0, 20, (3, 12))
    weights = torch.stack(model.attention_weights(tokens))  # (layers, batch, heads, q, k)
    got = model.attention_at_distance(tokens, [0, 2, 5], first_query=6)
    for j, d in enumerate((0, 2, 5)):
        by_hand = torch.stack([weights[..., t, t - d] for t in range(6, 12)]).mean(dim=(0, 2))
        assert torch.allclose(got[..., j], by_hand)
    with pytest.raises(ValueError, match="at most first_query"):
        model.attention_at_distance(tokens, [7], first_query=6)
    with pytest.raises(ValueError, match="must be < the length"):
        model.attention_at_distance(tokens, [1], first_query=12)
