"""posenc.experiments.length_generalization: the task, the metrics, the script, the data."""

from __future__ import annotations

import csv
import dataclasses
import itertools
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("tqdm")

from conftest import ROOT  # noqa: E402
from posenc.experiments import length_generalization as lg  # noqa: E402
from posenc.experiments.model import ENCODINGS  # noqa: E402

DATA = ROOT / "data"


def _read(path):
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        return reader.fieldnames, list(reader)


class _Oracle(torch.nn.Module):
    """Answers the delayed copy correctly at positions < right_until, wrongly after."""

    def __init__(self, lag, vocab_size, right_until):
        super().__init__()
        self.lag, self.vocab_size, self.right_until = lag, vocab_size, right_until

    def forward(self, tokens):
        answer = torch.roll(tokens, self.lag, dims=1)
        wrong = (answer + 1) % self.vocab_size
        positions = torch.arange(tokens.shape[1])
        answer = torch.where(positions < self.right_until, answer, wrong)
        return torch.nn.functional.one_hot(answer, self.vocab_size).float() * 20


def test_evaluate_scores_the_token_lag_positions_back():
    config = lg.QUICK
    loss, accuracy, beyond, per_position = lg.evaluate(
        _Oracle(config.lag, config.vocab_size, 10**6), 64, config
    )
    assert accuracy == 1.0 and beyond == 1.0 and loss < 1e-6
    assert len(per_position) == 64
    assert all(a != a for a in per_position[: config.lag])  # NaN: no target yet
    assert per_position[config.lag :] == [1.0] * (64 - config.lag)


def test_evaluate_separates_the_positions_past_the_training_length():
    config = lg.QUICK  # train_len 16, lag 3
    # Right at positions 3..16, wrong from 17 on: one of the 16 positions past train_len.
    oracle = _Oracle(config.lag, config.vocab_size, right_until=config.train_len + 1)
    _, accuracy, beyond, per_position = lg.evaluate(oracle, 32, config)
    assert beyond == 1 / 16
    assert accuracy == pytest.approx((17 - 3) / (32 - 3))
    assert per_position[16] == 1.0 and per_position[17] == 0.0
    _, _, at_train_len, _ = lg.evaluate(oracle, 16, config)
    assert at_train_len != at_train_len  # NaN: no position past train_len


def test_held_out_data_depend_only_on_the_length():
    config = lg.QUICK
    a, b = lg.held_out_batch(16, config), lg.held_out_batch(16, config)
    assert torch.equal(a, b) and a.dtype == torch.int64
    assert a.shape == (config.eval_batch, 16) and 0 <= a.min() and a.max() < config.vocab_size
    assert not torch.equal(lg.held_out_batch(32, config)[:, :16], a)
    training = lg.make_batch(torch.Generator().manual_seed(0), config.eval_batch, 16, 16)
    assert not torch.equal(training, a)


def test_training_is_reproducible_from_the_seed():
    config = dataclasses.replace(lg.QUICK, steps=3)
    a, b, c = lg.train("t5", 0, config), lg.train("t5", 0, config), lg.train("t5", 1, config)
    for name, x in a.state_dict().items():
        assert torch.equal(x, b.state_dict()[name]), name
    assert not torch.equal(a.head.weight, c.head.weight)


def test_training_learns_the_task_a_little_even_in_a_short_run():
    config = dataclasses.replace(lg.QUICK, steps=150)
    model = lg.train("rope", 0, config)
    _, accuracy, _, _ = lg.evaluate(model, config.train_len, config)
    assert accuracy > 2 / config.vocab_size  # chance is 1 / vocab_size


def test_config_refuses_impossible_settings():
    with pytest.raises(ValueError, match="lag must lie in"):
        dataclasses.replace(lg.FULL, lag=0)
    with pytest.raises(ValueError, match="eval_lens must be >= train_len"):
        dataclasses.replace(lg.FULL, eval_lens=(16, 64))
    with pytest.raises(ValueError, match="unknown encodings"):
        dataclasses.replace(lg.FULL, encodings=("cope",))


@pytest.mark.slow
def test_quick_run_of_the_script(tmp_path):
    out = tmp_path / "quick.csv"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "posenc.experiments.length_generalization",
            "--quick",
            "--out",
            str(out),
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "models trained and evaluated" in done.stdout
    _check_results(out, lg.QUICK)


def _check_results(path, config):
    fields, rows = _read(path)
    assert tuple(fields) == lg.RESULT_FIELDS
    keys = [(r["encoding"], int(r["seed"]), int(r["eval_len"])) for r in rows]
    assert keys == list(itertools.product(config.encodings, config.seeds, config.eval_lens))
    for row in rows:
        assert int(row["train_len"]) == config.train_len
        assert 0.0 <= float(row["accuracy"]) <= 1.0
        assert float(row["loss"]) >= 0.0
        if int(row["eval_len"]) == config.train_len:
            assert row["accuracy_beyond_train_len"] == ""
        else:
            assert 0.0 <= float(row["accuracy_beyond_train_len"]) <= 1.0
    fields, positions = _read(path.with_name(path.stem + "_positions.csv"))
    assert tuple(fields) == lg.POSITION_FIELDS
    longest = max(config.eval_lens)
    expected = itertools.product(config.encodings, config.seeds, range(config.lag, longest))
    assert [(r["encoding"], int(r["seed"]), int(r["position"])) for r in positions] == list(
        expected
    )
    assert {int(r["eval_len"]) for r in positions} == {longest}


def test_committed_results_have_the_structure_the_full_run_writes():
    assert lg.FULL.encodings == ENCODINGS
    assert len(lg.FULL.seeds) >= 3
    assert max(lg.FULL.eval_lens) >= 4 * lg.FULL.train_len
    _check_results(DATA / "length_generalization.csv", lg.FULL)
