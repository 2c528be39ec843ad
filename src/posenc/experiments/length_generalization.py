"""Train short, test long: does a positional method extrapolate? (chapter 9)

Four task families, each a causal next-step task on sequences that start with the
same fixed start token (id 0, position 0) for every arm:

- ``copy_lag3`` / ``copy_lagK``: random symbols; at position t the answer is the
  symbol at t - K. Only relative position tells the answer: local for K = 3, far for
  K = 16.
- ``recall``: eight key-value facts scattered among filler symbols, then eight
  queries (a key seen earlier); the answer to a query is its key's value. Content
  finds the answer; position only has to stay out of the way as the facts move away.
- ``passkey``: a three-digit number after a marker, hidden at a random place in a
  repeated filler "sentence"; at the end a query token asks for it, digit by digit
  (the probe of Mohtashami and Jaggi 2023, used by the position-interpolation paper).

Seven arms (:data:`ARMS`): no encoding (NoPE), sinusoidal, learned, RoPE, ALiBi, T5
buckets, and randomized RoPE as Ruoss et al. (2023) train it: RoPE at sorted random
positions drawn from a range (2,048) far larger than any test length, in training and
at test, with every training batch of a length drawn uniformly up to the training
length.

For every (task, arm) the learning rate is chosen on a small grid with a seed of its
own (``grid_seed``, never one of the counted seeds): the fewest steps to reach the
target accuracy at the training length, else the highest accuracy. Every counted run
then trains for the same budget of ``max_steps`` steps, and is evaluated twice, at
lengths up to four times the training length, on held-out sequences that depend only
on the task and the length: as it was at the first check whose held-out accuracy at
the training length reached ``target_accuracy`` (regime ``target``; the budget's end
if none did), and at the end of the budget (regime ``budget``).

Run it from the repository's root::

    python -m posenc.experiments.length_generalization --jobs 2   # the full run
    python -m posenc.experiments.length_generalization --quick    # a smoke run

It appends to ``data/length_generalization.csv`` (one row per task, arm, seed,
learning rate, regime and evaluation length) and ``data/length_generalization_positions.csv``
(accuracy at every scored position of the longest evaluation), and skips the runs
already there: an interrupted run resumes. Every row carries the id of the setup
that produced it; a file written under another setup is refused, never mixed.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import copy
import csv
import dataclasses
import hashlib
import json
import math
import multiprocessing
import re
import sys
import time
import zlib
from collections.abc import Iterable, Sequence
from pathlib import Path

import torch
import torch.nn.functional as F
from tqdm import tqdm

from posenc.experiments.model import CausalLanguageModel

__all__ = [
    "ARMS",
    "FULL",
    "POSITION_FIELDS",
    "QUICK",
    "RESULT_FIELDS",
    "TASKS",
    "Arm",
    "Plan",
    "Setup",
    "Task",
    "chosen_learning_rates",
    "evaluate",
    "held_out_batch",
    "main",
    "make_batch",
    "parse_task",
    "run",
    "train",
    "train_to_budget",
]

BOS = 0
"""The start token every sequence of every task begins with, at position 0."""

SYMBOLS = 16
"""Copy tasks draw symbols 1 .. SYMBOLS."""

RECALL_KEYS, RECALL_VALUES, RECALL_FILLERS, RECALL_FACTS = 16, 8, 8, 8

PASSKEY_DIGITS, PASSKEY_FILLERS = 3, 4
"""A passkey is three digits (0-9); the filler is a "sentence" of four tokens, repeated."""
PASSKEY_FIRST_DIGIT = 1
PASSKEY_FIRST_FILLER = PASSKEY_FIRST_DIGIT + 10
PASSKEY_MARKER = PASSKEY_FIRST_FILLER + PASSKEY_FILLERS
PASSKEY_QUERY = PASSKEY_MARKER + 1


@dataclasses.dataclass(frozen=True)
class Task:
    """A task family: ``copy`` with a lag, ``recall`` or ``passkey``."""

    name: str
    kind: str
    lag: int = 0

    @property
    def vocab_size(self) -> int:
        if self.kind == "copy":
            return 1 + SYMBOLS
        if self.kind == "passkey":
            return PASSKEY_QUERY + 1
        # start, key-value fact tokens, query tokens, fillers, answer (value) tokens
        return 1 + RECALL_KEYS * RECALL_VALUES + RECALL_KEYS + RECALL_FILLERS + RECALL_VALUES

    @property
    def min_length(self) -> int:
        """The shortest sequence (after the start token) the task can be posed at."""
        if self.kind == "copy":
            return self.lag + 1
        if self.kind == "passkey":
            # the marker and the digits, then the query and two digits, and a second
            # place for the marker
            return 2 * PASSKEY_DIGITS + 2
        return 2 * RECALL_FACTS + 1

    def check_length(self, length: int) -> None:
        """Refuse a training length the task cannot be posed at."""
        if self.kind == "passkey" and length < self.min_length:
            raise ValueError(
                f"task passkey needs a training length of at least {self.min_length}, got {length}"
            )
        if self.kind == "copy" and not self.lag < length:
            raise ValueError(
                f"task {self.name}: the lag ({self.lag}) must be shorter than the training "
                f"length ({length})"
            )
        if self.kind == "recall" and length < 2 * RECALL_FACTS + 1:
            raise ValueError(
                f"task recall needs a training length of at least {2 * RECALL_FACTS + 1} "
                f"({RECALL_FACTS} facts, {RECALL_FACTS} queries, a filler), got {length}"
            )


def parse_task(name: str) -> Task:
    """``"recall"``, ``"passkey"`` or ``"copy_lag<K>"`` (K >= 1) -> :class:`Task`.

    Anything else raises.
    """
    if name in ("recall", "passkey"):
        return Task(name, name)
    match = re.fullmatch(r"copy_lag([1-9][0-9]*)", name)
    if match is None:
        raise ValueError(
            f"unknown task {name!r}; choose 'copy_lag<K>' (K >= 1), 'recall' or 'passkey'"
        )
    return Task(name, "copy", int(match.group(1)))


TASKS = ("copy_lag3", "copy_lag16", "recall", "passkey")
"""The full run's tasks; the first is the main one (most seeds)."""


@dataclasses.dataclass(frozen=True)
class Arm:
    """One positional method: the model's encoding, whether positions are randomized, and
    whether each training batch has a random length (1 .. N, as far as the task allows)."""

    name: str
    encoding: str
    randomized: bool = False
    variable_length: bool = False


ARMS = {
    arm.name: arm
    for arm in (
        Arm("none", "none"),
        Arm("sinusoidal", "sinusoidal"),
        Arm("learned", "learned"),
        Arm("rope", "rope"),
        Arm("alibi", "alibi"),
        Arm("t5", "t5"),
        Arm("randomized_rope", "rope", randomized=True, variable_length=True),
    )
}
"""Every arm by name. A new arm (scaled RoPE frequencies, say) is one more entry."""


@dataclasses.dataclass(frozen=True)
class Setup:
    """Everything that determines one run's outcome; its id is stored on every row.

    The defaults are the setup chapter 10's models were trained under (each run stops at
    the target, at most 3,000 steps, learning rates chosen with seed 0); chapter 9's
    full run (:data:`FULL`) changes three of them.
    """

    train_len: int = 32
    eval_lens: tuple[int, ...] = (32, 48, 64, 96, 128)
    d_model: int = 64
    n_heads: int = 4
    n_layers: int = 2
    batch_size: int = 32
    max_steps: int = 3000
    check_every: int = 100
    target_accuracy: float = 0.99
    learning_rates: tuple[float, ...] = (1e-3, 3e-3, 1e-2)
    grid_seed: int = 0
    valid_batch: int = 256
    eval_batch: int = 512
    position_range: int = 256

    def __post_init__(self):
        for name in (
            "train_len",
            "d_model",
            "n_heads",
            "n_layers",
            "batch_size",
            "max_steps",
            "check_every",
            "valid_batch",
            "eval_batch",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.max_steps % self.check_every:
            raise ValueError(
                f"max_steps ({self.max_steps}) must be a multiple of check_every "
                f"({self.check_every})"
            )
        if not 0 < self.target_accuracy <= 1:
            raise ValueError(f"target_accuracy must lie in (0, 1], got {self.target_accuracy}")
        if not self.learning_rates or min(self.learning_rates) <= 0:
            raise ValueError(f"learning_rates must be positive, got {self.learning_rates}")
        if not self.eval_lens:
            raise ValueError("eval_lens must hold at least the training length")
        if min(self.eval_lens) != self.train_len:
            raise ValueError(
                f"eval_lens must start at train_len={self.train_len}, got {self.eval_lens}"
            )
        if self.position_range <= max(self.eval_lens):
            raise ValueError(
                f"position_range ({self.position_range}) must exceed the longest evaluation "
                f"length ({max(self.eval_lens)})"
            )

    @property
    def id(self) -> str:
        text = json.dumps(dataclasses.asdict(self), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:12]


@dataclasses.dataclass(frozen=True)
class Plan:
    """Which runs to make: tasks (the first is the main one), arms and seeds."""

    setup: Setup = Setup()
    tasks: tuple[str, ...] = TASKS
    arms: tuple[str, ...] = tuple(ARMS)
    main_seeds: int = 10
    other_seeds: int = 5

    def __post_init__(self):
        for name in self.tasks:
            parse_task(name).check_length(self.setup.train_len)
        for name in ("tasks", "arms"):
            values = getattr(self, name)
            repeated = sorted({v for v in values if values.count(v) > 1})
            if repeated:
                raise ValueError(f"{name} must not repeat, got {repeated} more than once")
        unknown = [a for a in self.arms if a not in ARMS]
        if unknown:
            raise ValueError(f"unknown arms {unknown}; choose from {tuple(ARMS)}")
        for name in ("main_seeds", "other_seeds"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not self.tasks or not self.arms:
            raise ValueError("a plan needs at least one task and one arm")

    def seeds(self, task: str) -> range:
        return range(self.main_seeds if task == self.tasks[0] else self.other_seeds)


FULL = Plan(Setup(max_steps=2000, grid_seed=1000, position_range=2048))
"""The run whose results the book commits and chapter 9 reads: every arm trains for the
same 2,000 steps, the learning rates are chosen with seed 1000 (seeds 0 .. 9 are the
counted ones), and randomized positions come from 1 .. 2,047 as in Ruoss et al."""

QUICK = Plan(
    Setup(
        train_len=17,
        eval_lens=(17, 34),
        d_model=16,
        n_heads=2,
        n_layers=1,
        max_steps=20,
        check_every=10,
        learning_rates=(3e-3, 1e-2),
        grid_seed=100,
        valid_batch=16,
        eval_batch=16,
        position_range=64,
    ),
    main_seeds=2,
    other_seeds=1,
)
"""A smoke run through the same code path, seconds long (the tests use it)."""


# -- data ------------------------------------------------------------------------------


def make_batch(task: Task, generator: torch.Generator, batch: int, length: int):
    """(tokens, targets), both (batch, length + 1) int64; target -1 where nothing is scored.

    tokens[:, 0] is the start token; the task's ``length`` tokens follow. The model's
    output at position t is scored against targets[:, t].
    """
    targets = torch.full((batch, length + 1), -1, dtype=torch.int64)
    if task.kind == "copy":
        body = torch.randint(1, 1 + SYMBOLS, (batch, length), generator=generator)
        tokens = torch.cat([torch.full((batch, 1), BOS), body], dim=1)
        targets[:, 1 + task.lag :] = tokens[:, 1 : -task.lag]
        return tokens, targets
    if task.kind == "passkey":
        return _passkey_batch(generator, batch, length)
    facts, first_query = RECALL_FACTS, 1 + RECALL_KEYS * RECALL_VALUES
    first_filler = first_query + RECALL_KEYS
    first_answer = first_filler + RECALL_FILLERS
    context = length - facts  # fact and filler slots, then the queries
    tokens = torch.randint(first_filler, first_answer, (batch, length + 1), generator=generator)
    tokens[:, 0] = BOS
    for row in range(batch):
        keys = torch.randperm(RECALL_KEYS, generator=generator)[:facts]
        values = torch.randint(0, RECALL_VALUES, (facts,), generator=generator)
        slots = 1 + torch.randperm(context, generator=generator)[:facts].sort().values
        tokens[row, slots] = 1 + keys * RECALL_VALUES + values
        asked = torch.randint(0, facts, (facts,), generator=generator)
        tokens[row, context + 1 :] = first_query + keys[asked]
        targets[row, context + 1 :] = first_answer + values[asked]
    return tokens, targets


def _passkey_batch(generator: torch.Generator, batch: int, length: int):
    """Filler, a marker and three digits somewhere, then the query and the digits.

    Positions 1 .. length hold the filler sentence (its four tokens in turn); the
    marker sits at a uniform place p in 1 .. length - 6, the digits at p + 1 .. p + 3;
    the last three positions hold the query and the first two digits, and the three
    digits are their targets.
    """
    n = PASSKEY_DIGITS
    filler = PASSKEY_FIRST_FILLER + torch.arange(length) % PASSKEY_FILLERS
    tokens = torch.cat([torch.tensor([BOS]), filler]).repeat(batch, 1)
    targets = torch.full((batch, length + 1), -1, dtype=torch.int64)
    digits = torch.randint(0, 10, (batch, n), generator=generator) + PASSKEY_FIRST_DIGIT
    marker = torch.randint(1, length - 2 * n + 1, (batch,), generator=generator)
    rows = torch.arange(batch)
    tokens[rows, marker] = PASSKEY_MARKER
    for i in range(n):
        tokens[rows, marker + 1 + i] = digits[:, i]
    tokens[:, length - n + 1] = PASSKEY_QUERY
    tokens[:, length - n + 2 :] = digits[:, : n - 1]
    targets[:, length - n + 1 :] = digits
    return tokens, targets


def _seed(kind: int, task: Task, length: int) -> int:
    return 1_000_000 * kind + 1000 * (zlib.crc32(task.name.encode()) % 1000) + length


def held_out_batch(task: Task, length: int, batch: int, *, validation: bool = False):
    """The held-out (tokens, targets) of ``length`` every model of ``task`` is scored on.

    They depend only on the task, the length and the batch size; the validation set
    (which decides when training stops) is drawn from other generators than the test
    set, and both from other generators than training (seeded 0, 1, 2 ...).
    """
    generator = torch.Generator().manual_seed(_seed(2 if validation else 1, task, length))
    return make_batch(task, generator, batch, length)


def sample_positions(generator: torch.Generator, batch: int, length: int, position_range: int):
    """(batch, length + 1) positions: 0 for the start token, then sorted random ones.

    The ``length`` positions are drawn without replacement from 1 .. position_range - 1
    and sorted, as randomized positional encodings do (Ruoss et al. 2023).
    """
    rows = [
        torch.randperm(position_range - 1, generator=generator)[:length].sort().values + 1
        for _ in range(batch)
    ]
    return torch.cat([torch.zeros(batch, 1, dtype=torch.int64), torch.stack(rows)], dim=1)


# -- training and evaluation -----------------------------------------------------------


def _model(task: Task, arm: Arm, setup: Setup) -> CausalLanguageModel:
    return CausalLanguageModel(
        task.vocab_size,
        setup.d_model,
        setup.n_heads,
        setup.n_layers,
        encoding=arm.encoding,
        max_len=max(setup.eval_lens) + 1,
    )


def _correct(model, tokens, targets, positions=None):
    """Per-position loss and correctness (batch, length + 1); False/0 where unscored."""
    logits = model(tokens, positions) if positions is not None else model(tokens)
    scored = targets >= 0
    loss = F.cross_entropy(logits.transpose(1, 2), targets.clamp(min=0), reduction="none") * scored
    return loss, (logits.argmax(dim=-1) == targets) & scored, scored


def _positions(arm: Arm, setup: Setup, generator: torch.Generator, batch: int, length: int):
    if not arm.randomized:
        return None
    return sample_positions(generator, batch, length, setup.position_range)


def evaluate(model, task: Task, arm: Arm, setup: Setup, length: int, *, validation=False):
    """Loss, accuracy, accuracy past the training length, per-position accuracy.

    Accuracy is over scored positions; "past the training length" means positions
    t > setup.train_len (NaN when there are none). Per-position accuracy is a dict
    {position: accuracy} over the scored positions. Randomized arms are evaluated at
    random positions too, from a generator that depends only on the length.
    """
    batch = setup.valid_batch if validation else setup.eval_batch
    tokens, targets = held_out_batch(task, length, batch, validation=validation)
    generator = torch.Generator().manual_seed(_seed(3, task, length))
    positions = _positions(arm, setup, generator, batch, length)
    with torch.no_grad():
        loss, correct, scored = _correct(model, tokens, targets, positions)
    beyond = scored[:, setup.train_len + 1 :]
    counts = scored.sum(dim=0)
    per_position = {
        t: correct[:, t].sum().item() / counts[t].item() for t in range(length + 1) if counts[t] > 0
    }
    n_beyond = beyond.sum().item()
    return (
        loss.sum().item() / scored.sum().item(),
        correct.sum().item() / scored.sum().item(),
        correct[:, setup.train_len + 1 :].sum().item() / n_beyond if n_beyond else math.nan,
        per_position,
    )


def _training(task: Task, arm: Arm, seed: int, learning_rate: float, setup: Setup):
    """Yield (model in eval mode, steps so far, validation accuracy) after every check."""
    torch.manual_seed(seed)
    model = _model(task, arm, setup)
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, weight_decay=0.0)
    data = torch.Generator().manual_seed(seed)
    steps = 0
    while steps < setup.max_steps:
        model.train()
        for _ in range(setup.check_every):
            length = setup.train_len
            if arm.variable_length:
                length = int(torch.randint(task.min_length, length + 1, (1,), generator=data))
            tokens, targets = make_batch(task, data, setup.batch_size, length)
            positions = _positions(arm, setup, data, setup.batch_size, length)
            loss, _, scored = _correct(model, tokens, targets, positions)
            optimizer.zero_grad()
            (loss.sum() / scored.sum()).backward()
            optimizer.step()
        steps += setup.check_every
        model.eval()
        yield model, steps, evaluate(model, task, arm, setup, setup.train_len, validation=True)[1]


def train(task: Task, arm: Arm, seed: int, learning_rate: float, setup: Setup):
    """Train until the validation accuracy at train_len reaches the target, or max_steps.

    Returns (model, steps taken, final validation accuracy).
    """
    for result in _training(task, arm, seed, learning_rate, setup):
        if result[2] >= setup.target_accuracy:
            break
    return result


def train_to_budget(task: Task, arm: Arm, seed: int, learning_rate: float, setup: Setup):
    """Train for exactly max_steps steps, keeping a copy of the model at the target.

    Returns ``{"target": (model, steps, accuracy), "budget": (model, steps, accuracy)}``:
    the model at the first check whose validation accuracy reached the target (the
    final one if none did), and the model after the whole budget.
    """
    at_target = None
    for model, steps, accuracy in _training(task, arm, seed, learning_rate, setup):
        if at_target is None and accuracy >= setup.target_accuracy:
            at_target = copy.deepcopy(model), steps, accuracy
    budget = model, steps, accuracy
    return {"target": at_target or budget, "budget": budget}


RESULT_FIELDS = (
    "setup",
    "task",
    "arm",
    "seed",
    "learning_rate",
    "regime",
    "steps",
    "valid_accuracy",
    "converged",
    "train_len",
    "eval_len",
    "accuracy",
    "accuracy_beyond_train_len",
    "loss",
)
POSITION_FIELDS = (
    "setup",
    "task",
    "arm",
    "seed",
    "learning_rate",
    "regime",
    "eval_len",
    "position",
    "accuracy",
)


def one_run(task_name: str, arm_name: str, seed: int, learning_rate: float, setup: Setup):
    """Train and evaluate one (task, arm, seed, learning rate) in both regimes:
    (result rows, position rows)."""
    torch.set_num_threads(1)
    task, arm = parse_task(task_name), ARMS[arm_name]
    results, positions = [], []
    for regime, run_result in train_to_budget(task, arm, seed, learning_rate, setup).items():
        rows = _evaluated(task, arm, setup, *run_result)
        key = {
            "setup": setup.id,
            "task": task_name,
            "arm": arm_name,
            "seed": seed,
            "learning_rate": learning_rate,
            "regime": regime,
        }
        results += [{**key, **row} for row in rows[0]]
        positions += [{**key, **row} for row in rows[1]]
    return results, positions


def _evaluated(task: Task, arm: Arm, setup: Setup, model, steps: int, valid: float):
    """Result rows and position rows of one trained model, without their key."""
    results, positions = [], []
    for length in setup.eval_lens:
        loss, accuracy, beyond, per_position = evaluate(model, task, arm, setup, length)
        results.append(
            {
                "steps": steps,
                "valid_accuracy": round(valid, 4),
                "converged": int(valid >= setup.target_accuracy),
                "train_len": setup.train_len,
                "eval_len": length,
                "accuracy": round(accuracy, 4),
                "accuracy_beyond_train_len": "" if math.isnan(beyond) else round(beyond, 4),
                "loss": round(loss, 4),
            }
        )
        if length == max(setup.eval_lens):
            positions.extend(
                {"eval_len": length, "position": t, "accuracy": round(a, 4)}
                for t, a in per_position.items()
            )
    return results, positions


# -- the learning-rate choice ----------------------------------------------------------


def chosen_learning_rates(rows: Iterable[dict], setup: Setup) -> dict[tuple[str, str], float]:
    """{(task, arm): learning rate} from the grid runs (seed ``setup.grid_seed``) in ``rows``.

    The rate that reached the target in the fewest steps; if none did, the one with the
    highest validation accuracy; ties go to the smaller rate. Whether a run reached the
    target is its ``converged`` column, decided on the unrounded accuracy (the stored
    ``valid_accuracy`` is rounded to four decimals). Only rows of ``setup`` (where they
    name one) and of the ``target`` regime (where they name one) are read; only (task,
    arm) pairs whose whole grid is present get a rate.
    """
    grid: dict[tuple[str, str], dict[float, tuple[int, float]]] = {}
    for row in rows:
        if int(row["seed"]) != setup.grid_seed:
            continue
        if row.get("setup", setup.id) != setup.id or row.get("regime", "target") != "target":
            continue
        lr = float(row["learning_rate"])
        if lr in setup.learning_rates:
            grid.setdefault((row["task"], row["arm"]), {})[lr] = (
                int(row["steps"]),
                float(row["valid_accuracy"]),
                bool(int(row["converged"])),
            )
    chosen = {}
    for key, runs in grid.items():
        if len(runs) < len(setup.learning_rates):
            continue

        def rank(lr, runs=runs):
            steps, accuracy, converged = runs[lr]
            return (not converged, steps if converged else -accuracy, lr)

        chosen[key] = min(runs, key=rank)
    return chosen


# -- files -----------------------------------------------------------------------------


def _read(path: Path, fields: Sequence[str], setup: Setup) -> list[dict]:
    if not path.exists():
        return []
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        if tuple(reader.fieldnames or ()) != tuple(fields):
            raise ValueError(
                f"{path} has columns {reader.fieldnames}, not {list(fields)}: it was not "
                "written by this runner; move it away or pass another --out"
            )
        rows = list(reader)
    other = sorted({r["setup"] for r in rows} - {setup.id})
    if other:
        raise ValueError(
            f"{path} holds results of another setup ({', '.join(other)}; this one is "
            f"{setup.id}): resuming would mix configurations. Move it away or pass "
            "another --out"
        )
    return rows


def _append(path: Path, fields: Sequence[str], rows: Sequence[dict]) -> None:
    new = not path.exists()
    with path.open("a", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields, lineterminator="\n")
        if new:
            writer.writeheader()
        writer.writerows(rows)


def _key(row: dict) -> tuple[str, str, int, float]:
    """A run's key; its rows are one per regime and evaluation length."""
    return row["task"], row["arm"], int(row["seed"]), float(row["learning_rate"])


REGIMES = ("target", "budget")


def run(plan: Plan, out: Path, *, jobs: int = 1, progress: bool = True) -> int:
    """Make every run of ``plan`` that ``out`` lacks, appending as each finishes.

    Returns the number of runs made. The grid runs of a (task, arm) come first; its
    other seeds start once its learning rate is chosen.
    """
    if jobs < 1:
        raise ValueError(f"jobs must be >= 1, got {jobs}")
    setup = plan.setup
    counted = range(max(plan.main_seeds, plan.other_seeds))
    if setup.grid_seed in counted:
        raise ValueError(
            f"the grid seed ({setup.grid_seed}) must not be one of the counted seeds "
            f"0 .. {counted[-1]}: its run chose the learning rate"
        )
    positions_out = out.with_name(out.stem + "_positions.csv")
    results = _read(out, RESULT_FIELDS, setup)
    counts: dict[tuple, int] = {}
    for row in results:
        counts[_key(row)] = counts.get(_key(row), 0) + 1
    done = {key for key, n in counts.items() if n == len(REGIMES) * len(setup.eval_lens)}
    if len(done) != len(counts):
        raise ValueError(f"{out} has a run with a missing evaluation length: rewrite it")
    # Position rows are written before result rows: drop those of unfinished runs.
    kept = [r for r in _read(positions_out, POSITION_FIELDS, setup) if _key(r) in done]
    if positions_out.exists():
        positions_out.unlink()
    if kept:
        _append(positions_out, POSITION_FIELDS, kept)
    out.parent.mkdir(parents=True, exist_ok=True)

    pairs = [(task, arm) for task in plan.tasks for arm in plan.arms]
    total = sum(len(setup.learning_rates) + len(plan.seeds(task)) for task, _ in pairs)
    chosen = chosen_learning_rates(results, setup)

    def grid_runs(task, arm):
        return [(task, arm, setup.grid_seed, lr) for lr in setup.learning_rates]

    def main_runs(task, arm):
        return [(task, arm, seed, chosen[task, arm]) for seed in plan.seeds(task)]

    queue = [r for t, a in pairs for r in grid_runs(t, a) if r not in done]
    queue += [r for t, a in pairs if (t, a) in chosen for r in main_runs(t, a) if r not in done]
    made = 0
    planned = set()
    for t, a in pairs:
        planned.update(grid_runs(t, a))
        if (t, a) in chosen:
            planned.update(main_runs(t, a))
    bar = tqdm(
        total=total,
        initial=len(planned & done),
        desc="length generalization",
        unit="run",
        disable=not progress,
    )

    def record(run_key, rows):
        nonlocal made
        result_rows, position_rows = rows
        _append(positions_out, POSITION_FIELDS, position_rows)
        _append(out, RESULT_FIELDS, result_rows)
        results.extend(result_rows)
        done.add(run_key)
        made += 1
        bar.update(1)
        task, arm = run_key[:2]
        new = []
        if (task, arm) not in chosen:
            rates = chosen_learning_rates(results, setup)
            if (task, arm) in rates:
                chosen[task, arm] = rates[task, arm]
                new = [r for r in main_runs(task, arm) if r not in done]
        return new

    # At most `jobs` runs in flight, the earliest task first: the main task's seeds
    # finish before the other tasks' grids start, so a cut-short run is still useful.
    order = {pair: i for i, pair in enumerate(pairs)}
    queue.sort(key=lambda r: (order[r[:2]], r[2], r[3]))
    if jobs == 1:
        threads = torch.get_num_threads()
        try:
            while queue:
                key = queue.pop(0)
                queue += record(key, one_run(*key, setup))
                queue.sort(key=lambda r: (order[r[:2]], r[2], r[3]))
        finally:
            torch.set_num_threads(threads)
    else:
        context = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(jobs, mp_context=context) as pool:
            pending = {}
            while queue or pending:
                while queue and len(pending) < jobs:
                    key = queue.pop(0)
                    pending[pool.submit(one_run, *key, setup)] = key
                finished, _ = concurrent.futures.wait(
                    pending, return_when=concurrent.futures.FIRST_COMPLETED
                )
                for future in finished:
                    key = pending.pop(future)
                    queue += record(key, future.result())
                queue.sort(key=lambda r: (order[r[:2]], r[2], r[3]))
    bar.close()
    return made


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m posenc.experiments.length_generalization",
        description="Train small causal models at one length and evaluate them at longer "
        "ones; resumes where the output files stop.",
    )
    parser.add_argument("--quick", action="store_true", help="a seconds-long smoke run")
    parser.add_argument("--jobs", type=int, default=1, help="runs in parallel (one core each)")
    parser.add_argument("--tasks", nargs="+", default=None, help=f"default: {' '.join(TASKS)}")
    parser.add_argument("--arms", nargs="+", default=None, help=f"default: {' '.join(ARMS)}")
    parser.add_argument("--seeds", type=int, default=None, help="seeds for the main (first) task")
    parser.add_argument("--other-seeds", type=int, default=None, help="seeds for the others")
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="results CSV (default data/length_generalization.csv, or "
        "data/length_generalization_quick.csv with --quick); positions go beside it",
    )
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    args = parser.parse_args(argv)
    plan = QUICK if args.quick else FULL
    changes = {
        "tasks": tuple(args.tasks) if args.tasks else None,
        "arms": tuple(args.arms) if args.arms else None,
        "main_seeds": args.seeds,
        "other_seeds": args.other_seeds,
    }
    try:
        plan = dataclasses.replace(plan, **{k: v for k, v in changes.items() if v is not None})
        name = "length_generalization_quick" if args.quick else "length_generalization"
        out = args.out if args.out is not None else Path("data") / f"{name}.csv"
        start = time.perf_counter()
        made = run(plan, out, jobs=args.jobs, progress=not args.no_progress)
    except ValueError as error:
        parser.error(str(error))
    seconds = time.perf_counter() - start
    print(f"{made} runs made in {seconds:.0f} s (setup {plan.setup.id}); results in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
