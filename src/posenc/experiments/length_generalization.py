"""Train short, test long: does a positional method extrapolate? (chapter 9)

The task is a delayed copy: a sequence of random tokens, and at every position t the
model must output the token it saw ``lag`` positions earlier. Content says nothing
about the answer; only position does, and only *relative* position: the rule is the
same at position 5 and at position 500.

Each encoding in :data:`posenc.experiments.model.ENCODINGS` trains a small causal
model on sequences of ``train_len`` tokens (a causal model trained at length N is
trained on every prefix length up to N at once) and is then evaluated, on the same
held-out sequences for every model, at lengths from ``train_len`` to four times it.

Run it from the repository's root::

    python -m posenc.experiments.length_generalization           # the full run
    python -m posenc.experiments.length_generalization --quick   # a smoke run

The full run writes ``data/length_generalization.csv`` (one row per encoding, seed
and evaluation length) and ``data/length_generalization_positions.csv`` (accuracy at
every position of the longest evaluation). Seeds are fixed; on one machine a re-run
reproduces the files.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import torch
import torch.nn.functional as F
from tqdm import tqdm

from posenc.experiments.model import ENCODINGS, CausalLanguageModel

__all__ = [
    "FULL",
    "HELD_OUT_SEED",
    "POSITION_FIELDS",
    "QUICK",
    "RESULT_FIELDS",
    "Config",
    "evaluate",
    "held_out_batch",
    "main",
    "make_batch",
    "run",
    "train",
]

RESULT_FIELDS = (
    "encoding",
    "seed",
    "train_len",
    "eval_len",
    "accuracy",
    "accuracy_beyond_train_len",
    "loss",
)
POSITION_FIELDS = ("encoding", "seed", "train_len", "eval_len", "position", "accuracy")


@dataclasses.dataclass(frozen=True)
class Config:
    """Everything that determines a run; the CSV records the parts that vary per row."""

    train_len: int = 32
    eval_lens: tuple[int, ...] = (32, 48, 64, 96, 128)
    lag: int = 3
    vocab_size: int = 16
    d_model: int = 64
    n_heads: int = 4
    n_layers: int = 2
    steps: int = 1500
    batch_size: int = 32
    learning_rate: float = 3e-3
    weight_decay: float = 0.0
    eval_batch: int = 256
    seeds: tuple[int, ...] = (0, 1, 2)
    encodings: tuple[str, ...] = ENCODINGS

    def __post_init__(self):
        if not 0 < self.lag < self.train_len:
            raise ValueError(f"lag must lie in (0, train_len={self.train_len}), got {self.lag}")
        if min(self.eval_lens) < self.train_len:
            raise ValueError(f"eval_lens must be >= train_len, got {self.eval_lens}")
        unknown = set(self.encodings) - set(ENCODINGS)
        if unknown:
            raise ValueError(f"unknown encodings {sorted(unknown)}; choose from {ENCODINGS}")


FULL = Config()
"""The run whose results the book commits and chapter 9 plots."""

QUICK = dataclasses.replace(
    FULL, train_len=16, eval_lens=(16, 32, 64), steps=30, eval_batch=16, seeds=(0,)
)
"""A smoke run through the same code path, seconds long (the tests use it)."""


def make_batch(generator: torch.Generator, batch: int, length: int, vocab_size: int):
    """Random tokens (batch, length), int64, drawn from ``generator``."""
    return torch.randint(0, vocab_size, (batch, length), generator=generator)


HELD_OUT_SEED = 1_000_000
"""The held-out sequences of length L are drawn from a generator seeded HELD_OUT_SEED + L."""


def held_out_batch(eval_len: int, config: Config = FULL) -> torch.Tensor:
    """The ``config.eval_batch`` held-out sequences of ``eval_len`` every model is scored on.

    They depend only on the length (and the vocabulary), never on the model or its seed;
    training batches come from generators seeded with the training seed (0, 1, 2 ...),
    far below HELD_OUT_SEED.
    """
    generator = torch.Generator().manual_seed(HELD_OUT_SEED + eval_len)
    return make_batch(generator, config.eval_batch, eval_len, config.vocab_size)


def _scored(model: CausalLanguageModel, tokens: torch.Tensor, lag: int):
    """Per-token loss and correctness at positions lag .. length - 1."""
    logits = model(tokens)[:, lag:]
    targets = tokens[:, :-lag]
    loss = F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")
    return loss, logits.argmax(dim=-1) == targets


def train(encoding: str, seed: int, config: Config = FULL) -> CausalLanguageModel:
    """Train one model from seed ``seed`` (initialisation and data) and return it."""
    torch.manual_seed(seed)
    model = CausalLanguageModel(
        config.vocab_size,
        config.d_model,
        config.n_heads,
        config.n_layers,
        encoding=encoding,
        max_len=max(config.eval_lens),
    )
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=config.learning_rate, weight_decay=config.weight_decay
    )
    data = torch.Generator().manual_seed(seed)
    model.train()
    for _ in range(config.steps):
        tokens = make_batch(data, config.batch_size, config.train_len, config.vocab_size)
        loss, _ = _scored(model, tokens, config.lag)
        optimizer.zero_grad()
        loss.mean().backward()
        optimizer.step()
    return model.eval()


def evaluate(model: CausalLanguageModel, eval_len: int, config: Config = FULL):
    """Mean loss, accuracy and per-position accuracy on held-out sequences of ``eval_len``.

    The held-out tokens depend only on ``eval_len``: every model sees the same ones.
    Returns (loss, accuracy, accuracy at positions >= train_len or NaN, per-position
    accuracy as a list indexed by position, NaN for the first ``lag`` positions).
    """
    tokens = held_out_batch(eval_len, config)
    with torch.no_grad():
        loss, correct = _scored(model, tokens, config.lag)
    correct = correct.float()
    beyond = correct[:, config.train_len - config.lag :]
    per_position = [math.nan] * config.lag + correct.mean(dim=0).tolist()
    return (
        loss.mean().item(),
        correct.mean().item(),
        beyond.mean().item() if beyond.numel() else math.nan,
        per_position,
    )


def run(config: Config = FULL, *, progress: bool = True):
    """Train and evaluate every (encoding, seed); return (result rows, position rows)."""
    results, positions = [], []
    runs = [(e, s) for e in config.encodings for s in config.seeds]
    bar = tqdm(runs, desc="length generalization", unit="model", disable=not progress)
    for encoding, seed in bar:
        bar.set_postfix_str(f"{encoding}, seed {seed}")
        model = train(encoding, seed, config)
        for eval_len in config.eval_lens:
            loss, accuracy, beyond, per_position = evaluate(model, eval_len, config)
            common = {"encoding": encoding, "seed": seed, "train_len": config.train_len}
            results.append(
                {
                    **common,
                    "eval_len": eval_len,
                    "accuracy": round(accuracy, 4),
                    "accuracy_beyond_train_len": "" if math.isnan(beyond) else round(beyond, 4),
                    "loss": round(loss, 4),
                }
            )
            if eval_len == max(config.eval_lens):
                positions.extend(
                    {**common, "eval_len": eval_len, "position": p, "accuracy": round(a, 4)}
                    for p, a in enumerate(per_position)
                    if not math.isnan(a)
                )
    return results, positions


def write_csv(rows: Sequence[dict], fields: Sequence[str], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m posenc.experiments.length_generalization",
        description="Train small causal models at one length and evaluate them at longer ones.",
    )
    parser.add_argument("--quick", action="store_true", help="a seconds-long smoke run")
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="results CSV (default data/length_generalization.csv, or "
        "data/length_generalization_quick.csv with --quick)",
    )
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    args = parser.parse_args(argv)
    config = QUICK if args.quick else FULL
    name = "length_generalization_quick" if args.quick else "length_generalization"
    out = args.out if args.out is not None else Path("data") / f"{name}.csv"
    start = time.perf_counter()
    results, positions = run(config, progress=not args.no_progress)
    write_csv(results, RESULT_FIELDS, out)
    write_csv(positions, POSITION_FIELDS, out.with_name(out.stem + "_positions.csv"))
    seconds = time.perf_counter() - start
    runs = len(config.encodings) * len(config.seeds)
    print(f"{runs} models trained and evaluated in {seconds:.0f} s; results in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
