"""posenc.experiments.long_context_sweeps: one knob at a time on the stretched models."""

from __future__ import annotations

import collections
import csv
import dataclasses
import functools
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("tqdm")

from conftest import ROOT, read_csv, training_frequencies  # noqa: E402
from posenc.experiments import length_generalization as lg  # noqa: E402
from posenc.experiments import long_context as lc  # noqa: E402
from posenc.experiments import long_context_sweeps as sw  # noqa: E402
from posenc.long_context import METHODS, scaled_frequencies  # noqa: E402


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweeps") / "sw.csv"
    assert sw.main(["--quick", "--out", str(out), "--no-progress"]) == 0
    return out


def _check(path, sweeps):
    """Every (task, seed) has the rows of every sweep, and each row reads sensibly."""
    fields, rows = read_csv(path)
    assert fields == sw.FIELDS
    assert {r["setup"] for r in rows} == {sweeps.id}
    study = sweeps.study
    units = collections.Counter((r["task"], int(r["seed"])) for r in rows)
    assert set(units) == {(t, s) for t in study.tasks for s in range(study.seeds)}
    assert set(units.values()) == {sw.rows_per_unit(sweeps)}
    kinds = collections.Counter(r["sweep"] for r in rows)
    assert set(kinds) == set(sw.KINDS)
    n = study.plan.setup.train_len
    for r in rows:
        length = int(r["eval_len"])
        assert 0.0 <= float(r["accuracy"]) <= 1.0
        task = lg.parse_task(r["task"])
        for field, high in zip(sw.FIELDS[12:15], (2, 4, 8), strict=True):
            reached = length >= high * n and (task.kind == "copy" or high * n == length)
            assert (r[field] != "") == reached, (field, r)
        assert (r["peak_distance"] == "") == (task.kind != "copy")
        if task.kind == "copy":
            assert int(r["peak_distance"]) in sw.PEAK_DISTANCES
            assert 0.0 <= float(r["peak_attention"]) <= 1.0


def test_quick_run_has_every_sweep_resumes_and_refuses_another_setup(quick, tmp_path):
    _check(quick, sw.QUICK)
    out = tmp_path / "sw.csv"
    out.write_bytes(quick.read_bytes())
    rates = tmp_path / "rates.csv"
    lg.run(dataclasses.replace(lg.QUICK, arms=("rope",)), rates, progress=False)
    assert sw.run(sw.QUICK, out, rates, progress=False) == 0
    assert out.read_bytes() == quick.read_bytes()
    other = dataclasses.replace(sw.QUICK, slowdowns=(1.0, 3.0))
    with pytest.raises(ValueError, match=f"another setup .{sw.QUICK.id}; this one is {other.id}"):
        sw.run(other, out, rates, progress=False)
    lines = quick.read_text().splitlines()
    out.write_text("\n".join(lines[:-1]) + "\n")
    with pytest.raises(ValueError, match="incomplete"):
        sw.run(sw.QUICK, out, rates, progress=False)


def _neutral_rows_agree(rows, train_len) -> int:
    """κ = 1, a logit multiplier of 1 and log-n at N change nothing: such rows agree with
    the ``methods`` rows of the same model at the same length. Returns how many."""
    by = {}
    for r in rows:
        if r["sweep"] == "methods":
            by[r["task"], r["seed"], r["method"], float(r["factor"]), r["eval_len"]] = r["accuracy"]
    checked = 0
    for r in rows:
        key = (r["task"], r["seed"], r["method"], float(r["factor"]), r["eval_len"])
        neutral = (
            (r["sweep"] == "pair" and r["method"] == "none" and float(r["slowdown"]) == 1.0)
            or (r["sweep"] == "temperature" and float(r["logit_multiplier"]) == 1.0)
            or (r["sweep"] == "log_n" and int(r["eval_len"]) == train_len)
        )
        if neutral:
            assert r["accuracy"] == by[key], r
            checked += 1
    return checked


def test_knobs_at_their_neutral_value_give_plain_rope_and_the_method_itself(quick):
    _, rows = read_csv(quick)
    checked = _neutral_rows_agree(rows, sw.QUICK.study.plan.setup.train_len)
    assert checked >= 3 * len(sw.QUICK.study.tasks)


def test_slowed_sets_one_pair_from_plain_rope_and_keeps_the_base_s_others():
    plain, _ = scaled_frequencies(16)
    out = sw.slowed(plain, plain, 1, 4.0)
    assert out[1] == plain[1] / 4.0
    assert np.array_equal(np.delete(out, 1), np.delete(plain, 1))
    assert np.array_equal(plain, scaled_frequencies(16)[0])  # the input is not changed
    yarn, _ = scaled_frequencies(16, method="yarn", factor=8.0, original_length=32)
    out = sw.slowed(yarn, plain, 0, 1.25)
    assert out[0] == plain[0] / 1.25 and np.array_equal(out[1:], yarn[1:])
    # on chapter 9's head, Llama 3 at 8 is YaRN at 8 with pair 1 slowed by 3.3
    llama3, _ = scaled_frequencies(16, method="llama3", factor=8.0, original_length=32)
    kappa = plain[1] / llama3[1]
    assert round(kappa, 1) == 3.3 and np.allclose(sw.slowed(yarn, plain, 1, kappa), llama3)


def test_windows_average_the_positions_of_each_window_the_input_reaches():
    per_position = {t: (1.0 if t <= 8 else 0.5 if t <= 16 else 0.0) for t in range(4, 33)}
    got = sw.windows(per_position, train_len=4, length=32)
    assert got == {"accuracy_n_2n": 1.0, "accuracy_2n_4n": 0.5, "accuracy_4n_8n": 0.0}
    assert sw.windows(per_position, train_len=4, length=16)["accuracy_4n_8n"] == ""
    assert sw.windows({16: 1.0}, train_len=4, length=16)["accuracy_n_2n"] == ""


def test_logit_multipliers_multiply_the_query_key_scores():
    """The scale set on the model multiplies cos and sin, so the logits by its square:
    the temperature sweep's multiplier τ is set as √τ."""
    from posenc.experiments.model import CausalLanguageModel

    torch.manual_seed(0)
    model = CausalLanguageModel(20, 16, 2, 1, encoding="rope").eval()
    tokens = torch.randint(0, 20, (2, 9))
    plain, _ = scaled_frequencies(8)

    def scores(frequencies_at):
        model.set_rope_frequencies(*frequencies_at(9))
        weights = model.attention_weights(tokens)[0]
        return torch.log(weights[..., -1, :])  # the last query sees every key

    base = scores(lambda length: (plain, 1.0))
    tau = 1.8
    hot = scores(functools.partial(sw._multiplied, lambda length: (plain, 1.0), lambda n: tau))
    centred = [s - s.mean(dim=-1, keepdim=True) for s in (base, hot)]
    assert torch.allclose(centred[1], tau * centred[0], atol=1e-5)


def test_ladder_without_temperature_trains_and_evaluates_at_scale_one(monkeypatch):
    """Every fine-tuning step trains YaRN's frequencies without its temperature, also
    after the sweep's own evaluations in between (they set other frequencies, then
    must put these back)."""
    study = dataclasses.replace(lc.QUICK, finetune_steps=(1, 2, 4))
    task, setup = lg.parse_task("copy_lag3"), study.plan.setup
    model, _, _ = lg.train(task, lg.ARMS["rope"], 0, 3e-3, setup)
    in_force = training_frequencies(monkeypatch)
    score = sw._Scorer(dataclasses.replace(sw.QUICK, study=study), task, 0, None)
    plain = score.method("none", 1.0)  # evaluations as the sweep runs them
    for _, tuned in lc._finetuned(model, study, task, "yarn", 0, 3e-3, temperature="none"):
        score.rows(tuned, plain, [setup.train_len])
    frequencies, scale = scaled_frequencies(
        8, method="yarn", factor=study.finetune_factor, original_length=setup.train_len
    )
    assert scale > 1.0 and len(in_force) == 4
    for got, got_scale in in_force:
        assert np.array_equal(got, frequencies) and got_scale == 1.0


def test_sweeps_refuse_what_they_cannot_run():
    with pytest.raises(ValueError, match=r"pairs must lie in 0 \.\. 7"):
        sw.Sweeps(pairs=(8,))
    with pytest.raises(ValueError, match="slowdowns must be positive and include 1"):
        sw.Sweeps(slowdowns=(2.0,))
    with pytest.raises(ValueError, match="logit_multipliers must be positive"):
        sw.Sweeps(logit_multipliers=(0.0, 1.0))
    with pytest.raises(ValueError, match="ladder_steps must be increasing"):
        sw.Sweeps(ladder_steps=(5, 1))
    # the wide run once asked its ladder for factor 4 of a study that has only 8
    with pytest.raises(ValueError, match="ladder_factor must be one of the study's"):
        sw.Sweeps(study=sw.WIDE.study, ladder_factor=4.0)


@pytest.mark.parametrize(
    "name, sweeps",
    [
        ("long_context_sweeps", sw.FULL),
        ("long_context_wide", sw.WIDE),
        ("long_context_one_head", sw.ONE_HEAD),
    ],
)
def test_committed_sweeps_have_the_structure_the_full_run_writes(name, sweeps):
    _check(ROOT / "data" / f"{name}.csv", sweeps)
    assert sweeps.study.eval_lens == (32, 64, 128, 256) and sweeps.study.seeds >= 5
    width = sweeps.study.plan.setup.d_model // sweeps.study.plan.setup.n_heads
    assert width == (16 if sweeps is sw.FULL else 64)
    if sweeps is not sw.FULL:
        with (ROOT / "data" / f"{name}_rates.csv").open(newline="") as handle:
            grid = list(csv.DictReader(handle))
        setup = sweeps.study.plan.setup
        assert setup.grid_seed not in range(sweeps.study.seeds)
        assert {t for t, _ in lg.chosen_learning_rates(grid, setup)} >= set(sweeps.study.tasks)
    # the ladder holds every method and YaRN without its temperature
    _, rows = read_csv(ROOT / "data" / f"{name}.csv")
    ladder = {r["method"] for r in rows if r["sweep"] == "ladder"}
    assert ladder == {*METHODS, "yarn_plain"}
    assert all(math.isfinite(float(r["accuracy"])) for r in rows)
    assert _neutral_rows_agree(rows, sweeps.study.plan.setup.train_len) > 0
