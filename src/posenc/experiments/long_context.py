"""Stretching chapter 9's RoPE models to longer inputs with scaled frequencies.

For each task and seed, the RoPE model of :mod:`posenc.experiments.length_generalization`
is trained again as chapter 9's first study trained it (:class:`~posenc.experiments.
length_generalization.Setup`'s defaults: stop at 0.99, at most 3,000 steps; its RoPE
runs, the learning-rate grid with seed 0 among them, are kept in
``data/long_context_rates.csv``),
then evaluated at N, 2N, 4N and 8N:

- **zero-shot**, with every method of :func:`posenc.long_context.scaled_frequencies`
  at every factor in ``factors`` (original length N); YaRN once more without its
  attention temperature (``attention_scale`` 1), and plain RoPE, PI and Llama 3 once
  more *with* it (0.1 ln s + 1), so that the temperature's share is measured apart
  from the frequencies'; and dynamic NTK at factor 1, which stretches by the input's
  own ratio to N;
- **fine-tuned**: a copy of the model trained more steps at ``finetune_factor`` · N
  tokens with the method's frequencies at that factor, evaluated the same way after
  each number of steps in ``finetune_steps`` ("none" is plain RoPE fine-tuned at the
  longer length).

Every row also holds the mean entropy of the attention (nats, over layers, heads,
``entropy_batch`` held-out sequences and the last N queries of each).

Run it from the repository's root::

    python -m posenc.experiments.long_context --jobs 2   # writes data/long_context.csv
    python -m posenc.experiments.long_context --quick    # a smoke run

It appends one (task, seed) at a time and skips those already in the file; every row
carries the setup id, and a file of another setup is refused.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import functools
import hashlib
import json
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import torch

from posenc.experiments import length_generalization as lg
from posenc.experiments import resumable
from posenc.long_context import METHODS, scaled_frequencies, yarn_temperature

__all__ = ["FIELDS", "FULL", "QUICK", "Study", "main", "run", "study_rows"]

FIELDS = (
    "setup",
    "task",
    "seed",
    "method",
    "factor",
    "attention_scale",
    "stage",
    "finetune_steps",
    "eval_len",
    "accuracy",
    "accuracy_beyond_train_len",
    "loss",
    "entropy",
    "accuracy_at_scaled_lag",
    "attention_at_lag",
    "attention_at_scaled_lag",
)


PLAN = lg.Plan(lg.Setup())
"""Chapter 9's first study: RoPE models trained until 0.99, at most 3,000 steps."""


@dataclasses.dataclass(frozen=True)
class Study:
    """What determines the rows: chapter 9's plan, and how its RoPE models are stretched."""

    plan: lg.Plan = PLAN
    tasks: tuple[str, ...] = ("copy_lag3", "recall")
    seeds: int = 5
    eval_factors: tuple[int, ...] = (1, 2, 4, 8)
    factors: tuple[float, ...] = (2.0, 4.0, 8.0)
    finetune_factor: float = 4.0
    finetune_steps: tuple[int, ...] = (50, 200, 500)
    eval_batch: int = 256
    entropy_batch: int = 64

    def __post_init__(self):
        for task in self.tasks:
            if task not in self.plan.tasks:
                raise ValueError(f"task {task!r} is not one of chapter 9's {self.plan.tasks}")
        if self.seeds < 1 or self.eval_batch < 1 or self.entropy_batch < 1:
            raise ValueError("seeds, eval_batch and entropy_batch must be >= 1")
        steps = self.finetune_steps
        if not steps or min(steps) < 1 or list(steps) != sorted(set(steps)):
            raise ValueError(f"finetune_steps must be increasing and >= 1, got {steps}")
        if min(self.factors) < 1 or self.finetune_factor not in self.factors:
            raise ValueError("factors must be >= 1 and include finetune_factor")

    @property
    def id(self) -> str:
        fields = dataclasses.asdict(self)
        fields["plan"] = self.plan.setup.id
        return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:12]

    @property
    def eval_lens(self) -> tuple[int, ...]:
        return tuple(k * self.plan.setup.train_len for k in self.eval_factors)


FULL = Study()
QUICK = Study(
    lg.QUICK,
    seeds=1,
    eval_factors=(1, 2),
    factors=(2.0,),
    finetune_factor=2.0,
    finetune_steps=(1, 2),
    eval_batch=8,
    entropy_batch=4,
)


# Methods evaluated zero-shot once more with YaRN's attention temperature 0.1 ln s + 1
# and their own frequencies: what the temperature alone buys ("none" at factor s is
# plain RoPE with the temperature of factor s).
TEMPERED = ("none", "linear", "llama3")


def _options(study: Study, method: str, factor: float, length: int, temperature="own"):
    """The frequencies and attention scale of ``method`` at ``factor`` for inputs of
    ``length``. ``temperature``: "own" (YaRN's for YaRN, none for the rest), "none", or
    "yarn" (YaRN's for any method)."""
    setup = study.plan.setup
    head = setup.d_model // setup.n_heads
    kwargs = {"method": method, "factor": factor}
    if method in ("dynamic_ntk", "yarn", "llama3"):
        kwargs["original_length"] = setup.train_len
    if method == "dynamic_ntk":
        kwargs["seq_len"] = length
    frequencies, scale = scaled_frequencies(head, **kwargs)
    if temperature == "none":
        scale = 1.0
    elif temperature == "yarn":
        scale = yarn_temperature(factor)
    return frequencies, scale


def _entropy(model, task, length, study):
    """Mean attention entropy over layers, heads, sequences and the last N queries."""
    tokens, _ = lg.held_out_batch(task, length, study.entropy_batch)
    entropy = model.attention_entropy(tokens)  # (layers, batch, heads, length + 1)
    return entropy[..., -study.plan.setup.train_len :].mean().item()


def _copy_head(model, task, study) -> tuple[int, int] | None:
    """The (layer, head) that puts the most attention on the token ``lag`` back, with
    the model's own frequencies at N: the head that copies (None for recall)."""
    if task.kind != "copy":
        return None
    tokens, _ = lg.held_out_batch(task, study.plan.setup.train_len, study.entropy_batch)
    mass = model.attention_at_distance(tokens, [task.lag], first_query=1 + task.lag)[..., 0]
    layer, head = divmod(int(mass.argmax()), mass.shape[1])
    return layer, head


def _lag_measures(model, task, length, factor, copy_head, study) -> dict:
    """What a copy model does with stretched positions: its accuracy against the token
    lag·s back (PI relabels position m as m/s, so a head that found the token ``lag``
    back finds the one lag·s back), and how much attention the copy head puts at the
    two distances. Blank for recall, or where lag·s does not fit in the input."""
    blank = dict.fromkeys(FIELDS[-3:], "")
    scaled = round(task.lag * factor) if task.kind == "copy" else None
    if scaled is None or scaled + 1 > length:
        return blank
    first = 1 + max(task.lag, scaled)  # both keys are tokens of the input, not the start
    tokens, _ = lg.held_out_batch(task, length, study.eval_batch)
    with torch.no_grad():
        predicted = model(tokens).argmax(dim=-1)[:, first:]
    accuracy = (predicted == tokens[:, first - scaled : tokens.shape[1] - scaled]).float().mean()
    layer, head = copy_head
    few = tokens[: study.entropy_batch]
    mass = model.attention_at_distance(few, [task.lag, scaled], first_query=first)[layer, head]
    return {
        "accuracy_at_scaled_lag": round(accuracy.item(), 4),
        "attention_at_lag": round(mass[0].item(), 4),
        "attention_at_scaled_lag": round(mass[1].item(), 4),
    }


def _evaluate(
    model, study, task, method, factor, seed, *, stage, copy_head, steps=0, temperature="own"
):
    """Rows of the model evaluated with the method's frequencies at every length; the
    frequencies in force before are in force again after (a model being fine-tuned
    goes on training with its own)."""
    setup = dataclasses.replace(study.plan.setup, eval_batch=study.eval_batch)
    arm = lg.ARMS["rope"]
    in_force = model.rope_frequencies()
    rows = []
    for length in study.eval_lens:
        frequencies, scale = _options(study, method, factor, length, temperature)
        model.set_rope_frequencies(frequencies, scale)
        loss, accuracy, beyond, _ = lg.evaluate(model, task, arm, setup, length)
        rows.append(
            {
                "setup": study.id,
                "task": task.name,
                "seed": seed,
                "method": method,
                "factor": factor,
                "attention_scale": round(scale, 6),
                "stage": stage,
                "finetune_steps": steps,
                "eval_len": length,
                "accuracy": round(accuracy, 4),
                "accuracy_beyond_train_len": "" if math.isnan(beyond) else round(beyond, 4),
                "loss": round(loss, 4),
                "entropy": round(_entropy(model, task, length, study), 4),
                **_lag_measures(model, task, length, factor, copy_head, study),
            }
        )
    model.set_rope_frequencies(*in_force)
    return rows


def _finetuned(model, study, task, method, seed, learning_rate, temperature="own"):
    """A copy of ``model`` trained at finetune_factor · N; yields (steps, model) at each
    number of steps in ``study.finetune_steps``. ``temperature`` as in :func:`_options`."""
    setup = study.plan.setup
    length = int(study.finetune_factor * setup.train_len)
    model = copy.deepcopy(model)
    options = _options(study, method, study.finetune_factor, length, temperature)
    model.set_rope_frequencies(*options)
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, weight_decay=0.0)
    data = torch.Generator().manual_seed(10_000 + seed)
    for steps in range(1, max(study.finetune_steps) + 1):
        model.train()
        tokens, targets = lg.make_batch(task, data, setup.batch_size, length)
        loss, _, scored = lg._correct(model, tokens, targets)
        optimizer.zero_grad()
        (loss.sum() / scored.sum()).backward()
        optimizer.step()
        if steps in study.finetune_steps:
            model.eval()
            yield steps, model


def study_rows(study: Study, task_name: str, seed: int, learning_rate: float) -> list[dict]:
    """Every row of one (task, seed): the trained model, zero-shot and fine-tuned."""
    torch.set_num_threads(1)
    task, setup = lg.parse_task(task_name), study.plan.setup
    model, _, _ = lg.train(task, lg.ARMS["rope"], seed, learning_rate, setup)
    head = _copy_head(model, task, study)

    def evaluate(model, method, factor, **kwargs):
        return _evaluate(model, study, task, method, factor, seed, copy_head=head, **kwargs)

    rows = []
    for method in METHODS:
        for factor in (1.0,) if method == "none" else study.factors:
            rows += evaluate(model, method, factor, stage="zero_shot")
    for factor in study.factors:
        rows += evaluate(model, "yarn", factor, stage="zero_shot", temperature="none")
        for method in TEMPERED:
            rows += evaluate(model, method, factor, stage="zero_shot", temperature="yarn")
    # Dynamic NTK at factor 1 stretches by the input's own ratio to N: matched to it.
    rows += evaluate(model, "dynamic_ntk", 1.0, stage="zero_shot")
    for method in METHODS:
        factor = 1.0 if method == "none" else study.finetune_factor
        for steps, tuned in _finetuned(model, study, task, method, seed, learning_rate):
            rows += evaluate(tuned, method, factor, stage="fine_tuned", steps=steps)
    return rows


def _rows_per_unit(study: Study) -> int:
    # "none" once; every method at every factor; YaRN without its temperature and the
    # TEMPERED methods with it at every factor; dynamic NTK at factor 1
    zero_shot = 1 + (len(METHODS) + len(TEMPERED)) * len(study.factors) + 1
    fine_tuned = len(METHODS) * len(study.finetune_steps)
    return (zero_shot + fine_tuned) * len(study.eval_lens)


def _unit(study: Study, rates: dict, task: str, seed: int) -> list[dict]:
    return study_rows(study, task, seed, rates[task, "rope"])


def run(study: Study, out: Path, rates_from: Path, *, jobs: int = 1, progress: bool = True):
    """Make every (task, seed) of ``study`` that ``out`` lacks; return how many."""
    if jobs < 1:
        raise ValueError(f"jobs must be >= 1, got {jobs}")
    tasks, seeds, setup = study.tasks, study.seeds, study.plan.setup
    rates = resumable.rope_rates(rates_from, setup, tasks)
    units = resumable.missing_units(out, FIELDS, study.id, _rows_per_unit(study), tasks, seeds)
    work = functools.partial(_unit, study, rates)
    return resumable.run_units(
        out, FIELDS, units, work, jobs=jobs, progress=progress, desc="long context"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m posenc.experiments.long_context",
        description="Stretch chapter 9's RoPE models with scaled frequencies; resumable.",
    )
    parser.add_argument("--quick", action="store_true", help="a seconds-long smoke run")
    parser.add_argument("--jobs", type=int, default=1, help="models in parallel")
    parser.add_argument("--out", type=Path, default=None, help="default data/long_context.csv")
    parser.add_argument(
        "--rates-from",
        type=Path,
        default=None,
        help="chapter 9's results, for the learning rates (default "
        "data/long_context_rates.csv; with --quick, a quick run is made first)",
    )
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    args = parser.parse_args(argv)
    study = QUICK if args.quick else FULL
    out = args.out or Path("data") / (
        "long_context_quick.csv" if args.quick else "long_context.csv"
    )
    rates_from = args.rates_from
    start = time.perf_counter()
    try:
        if rates_from is None and args.quick:
            rates_from = out.with_name(out.stem + "_rates.csv")
            lg.run(dataclasses.replace(lg.QUICK, arms=("rope",)), rates_from, progress=False)
        rates_from = rates_from or Path("data") / "long_context_rates.csv"
        made = run(study, out, rates_from, jobs=args.jobs, progress=not args.no_progress)
    except ValueError as error:
        parser.error(str(error))
    seconds = time.perf_counter() - start
    print(f"{made} models stretched in {seconds:.0f} s (setup {study.id}); results in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
