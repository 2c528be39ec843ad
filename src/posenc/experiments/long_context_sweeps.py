"""Dose-response sweeps on chapter 10's stretched RoPE models, and a wider head.

:mod:`posenc.experiments.long_context` compares the published methods. These sweeps
take the same models (chapter 9's RoPE models, retrained as that study retrains them,
5 seeds per task) and turn one knob at a time, zero-shot unless said:

- ``methods``: every method at every factor, as that study does, with accuracy read
  per window of positions, (N, 2N], (2N, 4N] and (4N, 8N], instead of past N at once;
- ``pair``: one pair (0, the fastest, or 1) turning at θ_i / κ, every other pair as
  in the base: plain RoPE ("none"), or YaRN's frequencies at factor 8 without its
  temperature ("yarn_plain": pair 0 kept, pair 1 slowed by 1.78, pairs 2 .. 7 by 8,
  on chapter 9's head), where Llama 3 at factor 8 differs in pair 1 alone;
- ``temperature``: plain RoPE and the frequencies of PI, Llama 3 and YaRN at factor 8,
  with the query-key logits multiplied by each of ``logit_multipliers``;
- ``log_n``: the same four, with the logits multiplied by ln n / ln N for inputs of n
  tokens (log-n scaling; 1 at the training length);
- ``ladder``: fine-tuning at ``ladder_factor`` · N for a few steps, with each
  method's frequencies at that factor ("yarn_plain": YaRN without its temperature).

For a copy model every row also reads the copy head (the head with the most attention
at the lag with the model's own frequencies): the distance it puts the most attention
on, among 1 .. 16, and that attention.

:data:`WIDE` runs the same sweeps on models with one head width four times chapter 9's
(64 features, 32 pairs; two heads of a 128-wide model), whose learning rates come
from their own grid (``data/long_context_wide_rates.csv``, grid seed 1000);
:data:`ONE_HEAD` on models of chapter 9's width with one such head per layer.

Run it from the repository's root::

    python -m posenc.experiments.long_context_sweeps --jobs 2         # data/long_context_sweeps.csv
    python -m posenc.experiments.long_context_sweeps --wide --jobs 2  # data/long_context_wide.csv
    python -m posenc.experiments.long_context_sweeps --one-head --jobs 2  # ..._one_head.csv
    python -m posenc.experiments.long_context_sweeps --quick          # a smoke run

It appends one (task, seed) at a time, skips those already in the file, and refuses a
file of another setup.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import hashlib
import json
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from posenc.experiments import length_generalization as lg
from posenc.experiments import long_context as lc
from posenc.experiments import resumable
from posenc.long_context import METHODS, scaled_frequencies

__all__ = [
    "FIELDS",
    "FULL",
    "KINDS",
    "ONE_HEAD",
    "QUICK",
    "WIDE",
    "Sweeps",
    "main",
    "run",
    "sweep_rows",
]

KINDS = ("methods", "pair", "temperature", "log_n", "ladder")
TEMPERATURE_METHODS = ("none", "linear", "llama3", "yarn")
PEAK_DISTANCES = tuple(range(1, 17))

FIELDS = (
    "setup",
    "task",
    "seed",
    "sweep",
    "method",
    "factor",
    "pair",
    "slowdown",
    "logit_multiplier",
    "finetune_steps",
    "eval_len",
    "accuracy",
    "accuracy_n_2n",
    "accuracy_2n_4n",
    "accuracy_4n_8n",
    "peak_distance",
    "peak_attention",
)


@dataclasses.dataclass(frozen=True)
class Sweeps:
    """The models (``study``'s) and the knobs turned on them."""

    study: lc.Study = lc.FULL
    slowdowns: tuple[float, ...] = (1.0, 1.05, 1.1, 1.15, 1.2, 1.3, 1.5, 2.0, 3.3, 4.0, 8.0)
    pairs: tuple[int, ...] = (0, 1)
    factor: float = 8.0
    logit_multipliers: tuple[float, ...] = (1.0, 1.21, 1.46, 1.8, 2.2, 3.0)
    ladder_factor: float = 4.0
    ladder_steps: tuple[int, ...] = (1, 2, 5, 10, 20)

    def __post_init__(self):
        head = self.study.plan.setup.d_model // self.study.plan.setup.n_heads
        if not self.pairs or min(self.pairs) < 0 or max(self.pairs) >= head // 2:
            raise ValueError(f"pairs must lie in 0 .. {head // 2 - 1}, got {self.pairs}")
        for name in ("slowdowns", "logit_multipliers"):
            values = getattr(self, name)
            if not values or min(values) <= 0 or 1.0 not in values:
                raise ValueError(f"{name} must be positive and include 1, got {values}")
        if self.factor < 1 or self.ladder_factor < 1:
            raise ValueError("factor and ladder_factor must be >= 1")
        if self.ladder_factor not in self.study.factors:
            # the ladder fine-tunes as the study does, at one of the study's factors
            raise ValueError(
                f"ladder_factor must be one of the study's factors {self.study.factors}, "
                f"got {self.ladder_factor}"
            )
        steps = self.ladder_steps
        if not steps or min(steps) < 1 or list(steps) != sorted(set(steps)):
            raise ValueError(f"ladder_steps must be increasing and >= 1, got {steps}")

    @property
    def id(self) -> str:
        fields = dataclasses.asdict(self)
        fields["study"] = self.study.id
        return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:12]


FULL = Sweeps()
WIDE_PLAN = lg.Plan(
    lg.Setup(d_model=128, n_heads=2, max_steps=1500, grid_seed=1000),
    tasks=("copy_lag3", "recall"),
    arms=("rope",),
    main_seeds=1,
    other_seeds=1,
)
"""The wider head's models: chapter 10's setup with two heads of 64 features, at most
1,500 steps; its grid (seed 1000) chooses the learning rates (its one counted seed per
task is not used)."""
WIDE = Sweeps(
    study=lc.Study(plan=WIDE_PLAN, factors=(8.0,), finetune_factor=8.0, eval_batch=64),
    ladder_factor=8.0,
    ladder_steps=(5, 20),
)
"""The same sweeps on the wider head, smaller where it costs: the methods at factor 8
only, 64 inputs per length, fine-tuning at 8N (its one factor) for 5 and 20 steps."""
ONE_HEAD_PLAN = lg.Plan(
    lg.Setup(d_model=64, n_heads=1, max_steps=1500, grid_seed=1000, learning_rates=(1e-3, 3e-3)),
    tasks=("copy_lag3", "recall"),
    arms=("rope",),
    main_seeds=1,
    other_seeds=1,
)
"""The wide head at chapter 9's model width: one head of 64 features per layer in a
64-wide model (chapter 9's has four of 16), its own grid of two learning rates."""
ONE_HEAD = dataclasses.replace(WIDE, study=dataclasses.replace(WIDE.study, plan=ONE_HEAD_PLAN))
"""The wide sweeps on :data:`ONE_HEAD_PLAN`'s models: only the head's width and count
differ from chapter 9's model."""
QUICK = Sweeps(
    study=lc.QUICK,
    slowdowns=(1.0, 2.0),
    pairs=(0,),
    factor=2.0,
    logit_multipliers=(1.0, 2.0),
    ladder_factor=2.0,
    ladder_steps=(1, 2),
)


def slowed(base: np.ndarray, plain: np.ndarray, pair: int, slowdown: float) -> np.ndarray:
    """The frequencies ``base`` with pair ``pair``'s set to plain[pair] / slowdown."""
    out = np.array(base, dtype=np.float64)
    out[pair] = plain[pair] / slowdown
    return out


def windows(per_position: dict[int, float], train_len: int, length: int) -> dict:
    """Mean per-position accuracy over positions (N, 2N], (2N, 4N] and (4N, 8N] that
    the input reaches (blank where it does not, or nothing there is scored)."""
    out = {}
    for name, (low, high) in zip(FIELDS[12:15], ((1, 2), (2, 4), (4, 8)), strict=True):
        values = [a for t, a in per_position.items() if low * train_len < t <= high * train_len]
        out[name] = (
            round(float(np.mean(values)), 4) if values and length >= high * train_len else ""
        )
    return out


def _peak(model, task, length, head, setup) -> dict:
    """The distance among PEAK_DISTANCES where the copy head puts the most attention,
    and that attention (blank for recall)."""
    if head is None:
        return {"peak_distance": "", "peak_attention": ""}
    tokens, _ = lg.held_out_batch(task, length, 64)
    last = max(PEAK_DISTANCES)
    mass = model.attention_at_distance(tokens, PEAK_DISTANCES, first_query=last)[head]
    k = int(mass.argmax())
    return {"peak_distance": PEAK_DISTANCES[k], "peak_attention": round(mass[k].item(), 4)}


def _fixed(frequencies, scale, length):
    return frequencies, scale


def _multiplied(frequencies_at, multiplier_at, length):
    """A method's frequencies at ``length``, the logits multiplied by multiplier_at(length)
    (cos and sin by its square root)."""
    return frequencies_at(length)[0], math.sqrt(multiplier_at(length))


class _Scorer:
    """Rows of one model under given frequencies and scale, at every evaluation length."""

    def __init__(self, sweeps: Sweeps, task, seed: int, head):
        self.sweeps, self.task, self.seed, self.head = sweeps, task, seed, head
        study = sweeps.study
        self.setup = dataclasses.replace(study.plan.setup, eval_batch=study.eval_batch)
        self.width = self.setup.d_model // self.setup.n_heads

    def rows(self, model, frequencies_at, lengths=None, **key) -> list[dict]:
        """``frequencies_at(length)`` gives (frequencies, attention scale)."""
        in_force = model.rope_frequencies()
        rows = []
        for length in lengths or self.sweeps.study.eval_lens:
            model.set_rope_frequencies(*frequencies_at(length))
            _, accuracy, _, per_position = lg.evaluate(
                model, self.task, lg.ARMS["rope"], self.setup, length
            )
            rows.append(
                {
                    "setup": self.sweeps.id,
                    "task": self.task.name,
                    "seed": self.seed,
                    "sweep": "",
                    "method": "none",
                    "factor": 1.0,
                    "pair": "",
                    "slowdown": "",
                    "logit_multiplier": 1.0,
                    "finetune_steps": 0,
                    **key,
                    "eval_len": length,
                    "accuracy": round(accuracy, 4),
                    **windows(per_position, self.setup.train_len, length),
                    **_peak(model, self.task, length, self.head, self.setup),
                }
            )
        model.set_rope_frequencies(*in_force)
        return rows

    def method(self, method, factor, temperature="own"):
        return lambda length: lc._options(self.sweeps.study, method, factor, length, temperature)


def sweep_rows(sweeps: Sweeps, task_name: str, seed: int, learning_rate: float) -> list[dict]:
    """Every row of one (task, seed)."""
    torch.set_num_threads(1)
    study = sweeps.study
    task, setup = lg.parse_task(task_name), study.plan.setup
    model, _, _ = lg.train(task, lg.ARMS["rope"], seed, learning_rate, setup)
    score = _Scorer(sweeps, task, seed, lc._copy_head(model, task, study))
    plain, _ = scaled_frequencies(score.width)
    ends = (setup.train_len, max(study.eval_lens))
    rows = []
    # methods: as the study's zero-shot rows, read per window
    arms = [("none", 1.0, "own"), ("dynamic_ntk", 1.0, "own")]
    arms += [(m, f, "own") for f in study.factors for m in METHODS if m != "none"]
    arms += [("yarn", f, "none") for f in study.factors]
    for method, factor, temperature in arms:
        name = "yarn_plain" if temperature == "none" else method
        at = score.method(method, factor, temperature)
        rows += score.rows(model, at, sweep="methods", method=name, factor=factor)
    # pair: one pair at θ_i / κ in a base, at N and at the longest length
    yarn_8 = score.method("yarn", sweeps.factor, "none")(setup.train_len)[0]
    bases = {"none": (plain, 1.0), "yarn_plain": (yarn_8, sweeps.factor)}
    for name, (base, factor) in bases.items():
        for pair in sweeps.pairs:
            for kappa in sweeps.slowdowns:
                at = functools.partial(_fixed, slowed(base, plain, pair, kappa), 1.0)
                key = {"method": name, "factor": factor, "pair": pair, "slowdown": kappa}
                rows += score.rows(model, at, ends, sweep="pair", **key)
    # temperature and log-n: frequencies of a method, logits multiplied
    for method in TEMPERATURE_METHODS:
        factor = 1.0 if method == "none" else sweeps.factor
        name = "yarn_plain" if method == "yarn" else method
        frequencies = score.method(method, factor, "none")
        for tau in sweeps.logit_multipliers:
            at = functools.partial(_multiplied, frequencies, lambda length, t=tau: t)
            key = {"method": name, "factor": factor, "logit_multiplier": tau}
            rows += score.rows(model, at, ends, sweep="temperature", **key)

        def log_n(length):
            return math.log(length) / math.log(setup.train_len)

        log_n = functools.partial(_multiplied, frequencies, log_n)
        rows += score.rows(
            model, log_n, sweep="log_n", method=name, factor=factor, logit_multiplier=""
        )
    # ladder: a few fine-tuning steps at ladder_factor · N
    tuning = dataclasses.replace(
        study, finetune_factor=sweeps.ladder_factor, finetune_steps=sweeps.ladder_steps
    )
    ladder = [(m, "own") for m in METHODS] + [("yarn", "none")]
    for method, temperature in ladder:
        factor = 1.0 if method == "none" else sweeps.ladder_factor
        name = "yarn_plain" if temperature == "none" else method
        tuned = lc._finetuned(model, tuning, task, method, seed, learning_rate, temperature)
        for steps, tuned_model in tuned:
            at = score.method(method, factor, temperature)
            key = {"method": name, "factor": factor, "finetune_steps": steps}
            rows += score.rows(tuned_model, at, sweep="ladder", **key)
    return rows


def rows_per_unit(sweeps: Sweeps) -> int:
    """How many rows one (task, seed) gives."""
    study = sweeps.study
    every, ends = len(study.eval_lens), 2
    methods = (2 + len(study.factors) * len(METHODS)) * every
    pair = 2 * len(sweeps.pairs) * len(sweeps.slowdowns) * ends
    temperature = len(TEMPERATURE_METHODS) * (len(sweeps.logit_multipliers) * ends + every)
    ladder = (len(METHODS) + 1) * len(sweeps.ladder_steps) * every
    return methods + pair + temperature + ladder


def _unit(sweeps: Sweeps, rates: dict, task: str, seed: int) -> list[dict]:
    return sweep_rows(sweeps, task, seed, rates[task, "rope"])


def run(sweeps: Sweeps, out: Path, rates_from: Path, *, jobs: int = 1, progress: bool = True):
    """Make every (task, seed) of ``sweeps`` that ``out`` lacks; return how many."""
    if jobs < 1:
        raise ValueError(f"jobs must be >= 1, got {jobs}")
    tasks, seeds, setup = sweeps.study.tasks, sweeps.study.seeds, sweeps.study.plan.setup
    rates = resumable.rope_rates(rates_from, setup, tasks)
    units = resumable.missing_units(out, FIELDS, sweeps.id, rows_per_unit(sweeps), tasks, seeds)
    work = functools.partial(_unit, sweeps, rates)
    return resumable.run_units(
        out, FIELDS, units, work, jobs=jobs, progress=progress, desc="sweeps"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m posenc.experiments.long_context_sweeps",
        description="One knob at a time on chapter 10's stretched RoPE models; resumable.",
    )
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--quick", action="store_true", help="a seconds-long smoke run")
    which.add_argument("--wide", action="store_true", help="models with 64-wide heads")
    which.add_argument(
        "--one-head", action="store_true", help="one 64-wide head in a 64-wide model"
    )
    parser.add_argument("--jobs", type=int, default=1, help="models in parallel")
    parser.add_argument("--out", type=Path, default=None, help="where the rows go")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    args = parser.parse_args(argv)
    name = "long_context_sweeps_quick" if args.quick else "long_context_sweeps"
    sweeps = QUICK if args.quick else FULL
    if args.wide:
        name, sweeps = "long_context_wide", WIDE
    if args.one_head:
        name, sweeps = "long_context_one_head", ONE_HEAD
    out = args.out or Path("data") / f"{name}.csv"
    start = time.perf_counter()
    try:
        if args.quick or args.wide or args.one_head:
            rates_from = out.with_name(out.stem + "_rates.csv")
            plan = dataclasses.replace(lg.QUICK, arms=("rope",))
            plan = WIDE_PLAN if args.wide else ONE_HEAD_PLAN if args.one_head else plan
            lg.run(plan, rates_from, jobs=args.jobs, progress=not args.no_progress)
        else:
            rates_from = Path("data") / "long_context_rates.csv"
        made = run(sweeps, out, rates_from, jobs=args.jobs, progress=not args.no_progress)
    except ValueError as error:
        parser.error(str(error))
    seconds = time.perf_counter() - start
    print(f"{made} models swept in {seconds:.0f} s (setup {sweeps.id}); results in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
