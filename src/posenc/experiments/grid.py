"""Tokens on a grid: which encoding finds the token above at sizes it never saw?

The task ``above``: a grid of H x W tokens, each drawn uniformly from :data:`VOCAB`
symbols, read in raster order (index r * W + c) by a causal model; the target at
(r, c) for r >= 1 is the token at (r - 1, c), and row 0 has no target. In raster order
"above" is the token W places back, so the offset to find depends on the width.

Three arms (:data:`ARMS`), the same model otherwise (:class:`GridModel`, built on
chapter 9's :class:`~posenc.experiments.model.CausalLanguageModel`):

- ``"rope_1d"``: RoPE at the raster index r * W + c;
- ``"rope_axial"``: axial RoPE over (row, col): the first half of every head's features
  turned by the row, the second half by the column (:func:`_axial`);
- ``"sincos_2d"``: :func:`posenc.multidim.sincos_2d` added to the input embeddings,
  no rotation.

Every model trains on 8 x 8 grids for the same number of steps with the same optimiser
and is then scored on fixed held-out grids of 8 x 8, 12 x 12 and 16 x 16 (token accuracy
over the scored targets, and over the cells inside the training grid alone). Run it from
the repository's root::

    python -m posenc.experiments.grid --jobs 2   # writes data/grid_generalization.csv

One unit is an (arm, seed); the runner appends each unit's rows as it finishes, skips
the units the file holds and refuses a file of another setup (the setup id is on every
row), as chapter 9's runners do. :func:`summary` reads the rows back (NumPy only).
"""

from __future__ import annotations

import argparse
import csv
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
from torch import nn

from posenc._validation import choice, integer
from posenc.experiments import length_generalization as lg
from posenc.experiments import resumable
from posenc.experiments.analysis import bootstrap_interval, per_seed
from posenc.experiments.model import CausalLanguageModel
from posenc.multidim import grid_positions, sincos_2d
from posenc.rotary import RotaryEmbedding

__all__ = [
    "ARMS",
    "FIELDS",
    "FULL",
    "QUICK",
    "TASK",
    "VOCAB",
    "GridModel",
    "Setup",
    "evaluate",
    "held_out_batch",
    "main",
    "make_batch",
    "run",
    "summary",
    "train",
    "unit_rows",
]

TASK = "above"
VOCAB = 16
"""Grid tokens are 0 .. VOCAB - 1; there is no start token."""

ARMS = ("rope_1d", "rope_axial", "sincos_2d")

FIELDS = (
    "setup",
    "task",
    "arm",
    "seed",
    "steps",
    "train_size",
    "size",
    "accuracy",
    "accuracy_inside",
    "loss",
)


@dataclasses.dataclass(frozen=True)
class Setup:
    """Everything that decides a unit's outcome; :attr:`id` is stored on every row."""

    train_size: int = 8
    eval_sizes: tuple[int, ...] = (8, 12, 16)
    d_model: int = 64
    n_heads: int = 4
    n_layers: int = 2
    batch_size: int = 32
    steps: int = 600
    learning_rate: float = 3e-3
    warmup: int = 100
    eval_batch: int = 128

    def __post_init__(self):
        for name in ("train_size", "d_model", "n_heads", "n_layers", "batch_size", "steps"):
            integer(name, getattr(self, name), minimum=1)
        integer("warmup", self.warmup, minimum=0)
        integer("eval_batch", self.eval_batch, minimum=1)
        if self.train_size < 2:
            raise ValueError(
                f"train_size must be >= 2 (row 0 has no target), got {self.train_size}"
            )
        if not self.eval_sizes or self.eval_sizes[0] != self.train_size:
            raise ValueError(
                f"eval_sizes must start at train_size={self.train_size}, got {self.eval_sizes}"
            )
        head = self.d_model // self.n_heads
        if self.d_model % self.n_heads or head % 4:
            raise ValueError(
                f"d_model / n_heads must be a multiple of 4 (two axes of RoPE pairs), got "
                f"d_model={self.d_model}, n_heads={self.n_heads}"
            )
        if not (math.isfinite(self.learning_rate) and self.learning_rate > 0):
            raise ValueError(f"learning_rate must be finite and > 0, got {self.learning_rate}")

    @property
    def id(self) -> str:
        described = json.dumps({"study": TASK, **dataclasses.asdict(self)}, sort_keys=True)
        return hashlib.sha256(described.encode()).hexdigest()[:12]


FULL = Setup()
"""The run the book commits (``data/grid_generalization.csv``), seeds 0 .. 4."""

QUICK = Setup(
    train_size=3, eval_sizes=(3, 4), d_model=16, n_heads=2, n_layers=1, steps=4, warmup=0,
    batch_size=4, eval_batch=8,
)  # fmt: skip
"""A smoke run through the same code path, a second long (the tests use it)."""


# -- data -------------------------------------------------------------------------------


def make_batch(generator: torch.Generator, batch: int, height: int, width: int):
    """(tokens, targets), both (batch, height * width) int64 in raster order; the target of
    cell (r, c) is the token of (r - 1, c), and -1 (unscored) on row 0."""
    tokens = torch.randint(0, VOCAB, (batch, height * width), generator=generator)
    targets = torch.full_like(tokens, -1)
    targets[:, width:] = tokens[:, :-width]
    return tokens, targets


def held_out_batch(size: int, batch: int):
    """The fixed size x size grids every model is scored on: they depend on the size and
    the batch only, from generators no training run uses (those are seeded 0, 1, ...)."""
    generator = torch.Generator().manual_seed(7_000_000 + 1000 * size + batch)
    return make_batch(generator, batch, size, size)


# -- the model --------------------------------------------------------------------------


@functools.lru_cache(maxsize=8)
def _rope(width: int) -> RotaryEmbedding:
    return RotaryEmbedding(width, pairing="interleaved")


def _axial(q: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    """Axial RoPE of q (..., seq, head_dim): the first head_dim / 2 features turned by
    ``rows``, the rest by ``cols``, each half a RoPE of its own width (interleaved pairs,
    as the model's 1-D RoPE). The same map as ``RotaryEmbedding(head_dim,
    axes_dims=(head_dim // 2, head_dim // 2))`` with positions (seq, 2)."""
    half = q.shape[-1] // 2
    return torch.cat((_rope(half)(q[..., :half], rows), _rope(half)(q[..., half:], cols)), -1)


class _AxialRotary(nn.Module):
    """Stands in for a block's RotaryEmbedding: positions (seq, 2) of (row, col)."""

    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        return _axial(x, positions[:, 0], positions[:, 1])


class _GridTable(nn.Module):
    """Adds sincos_2d(height, width, d_model) to the embeddings of a raster-order grid;
    :class:`GridModel` sets ``grid`` to (height, width) before every forward pass."""

    def __init__(self, d_model: int):
        super().__init__()
        self.d_model, self.grid = d_model, None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        height, width = self.grid
        table = sincos_2d(height, width, self.d_model)
        return x + torch.from_numpy(table).to(x.dtype)


class GridModel(nn.Module):
    """``model(tokens, (height, width))`` -> logits (batch, height * width, VOCAB).

    A :class:`CausalLanguageModel` whose position enters as ``arm`` says: RoPE in every
    layer at the raster index (``rope_1d``) or at (row, col) (``rope_axial``), or a 2-D
    sincos table added to the input (``sincos_2d``, no RoPE).
    """

    def __init__(self, arm: str, setup: Setup):
        super().__init__()
        self.arm = choice("arm", arm, ARMS)
        self.lm = CausalLanguageModel(
            VOCAB,
            setup.d_model,
            setup.n_heads,
            setup.n_layers,
            encoding="none" if arm == "sincos_2d" else "rope",
        )
        if arm == "rope_axial":
            for block in self.lm.blocks:
                block.attention.rotary = _AxialRotary()
        if arm == "sincos_2d":
            self.lm.position = _GridTable(setup.d_model)

    def positions(self, height: int, width: int) -> torch.Tensor | None:
        """What the RoPE layers get: raster indices (seq,), or (row, col) pairs (seq, 2)."""
        if self.arm == "rope_1d":
            return torch.arange(height * width)
        if self.arm == "rope_axial":
            return torch.from_numpy(grid_positions(height, width))
        return None

    def forward(self, tokens: torch.Tensor, grid: tuple[int, int]) -> torch.Tensor:
        height, width = grid
        if tokens.dim() != 2 or tokens.shape[1] != height * width:
            raise ValueError(
                f"tokens must have shape (batch, {height * width}) for a {height} x {width} "
                f"grid, got {tuple(tokens.shape)}"
            )
        if self.arm == "sincos_2d":
            self.lm.position.grid = (height, width)
        return self.lm(tokens, self.positions(height, width))


# -- training and evaluation ------------------------------------------------------------


def train(arm: str, seed: int, setup: Setup) -> GridModel:
    """A model of ``arm`` trained on train_size grids: AdamW at ``learning_rate`` after a
    linear warm-up, ``steps`` batches drawn from a generator seeded ``seed``."""
    torch.manual_seed(seed)
    model = GridModel(arm, setup)
    optimizer = torch.optim.AdamW(model.parameters(), lr=setup.learning_rate, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min(1.0, (step + 1) / (setup.warmup + 1))
    )
    data = torch.Generator().manual_seed(seed)
    grid = (setup.train_size, setup.train_size)
    model.train()
    for _ in range(setup.steps):
        tokens, targets = make_batch(data, setup.batch_size, *grid)
        loss, _, scored = lg._correct(model, tokens, targets, grid)
        optimizer.zero_grad()
        (loss.sum() / scored.sum()).backward()
        optimizer.step()
        schedule.step()
    return model.eval()


def evaluate(model: GridModel, size: int, setup: Setup) -> dict:
    """Loss and accuracy on the held-out size x size grids, and the accuracy on the cells
    that lie inside the training grid (row and column < train_size)."""
    tokens, targets = held_out_batch(size, setup.eval_batch)
    with torch.no_grad():
        loss, correct, scored = lg._correct(model, tokens, targets, (size, size))
    cells = torch.from_numpy(grid_positions(size, size))
    inside = scored & (cells < setup.train_size).all(dim=1)
    return {
        "accuracy": round(correct.sum().item() / scored.sum().item(), 4),
        "accuracy_inside": round((correct & inside).sum().item() / inside.sum().item(), 4),
        "loss": round(loss.sum().item() / scored.sum().item(), 4),
    }


def unit_rows(setup: Setup, arm: str, seed: int) -> list[dict]:
    """Train one (arm, seed) and return its rows, one per evaluation size."""
    torch.set_num_threads(1)
    model = train(arm, seed, setup)
    key = {"setup": setup.id, "task": TASK, "arm": arm, "seed": seed, "steps": setup.steps}
    return [
        {**key, "train_size": setup.train_size, "size": size, **evaluate(model, size, setup)}
        for size in setup.eval_sizes
    ]


# -- the runner -------------------------------------------------------------------------


def done_units(out: Path, setup: Setup) -> set[tuple[str, int]]:
    """The (arm, seed) units ``out`` holds whole; a file of other columns, of another setup
    or with a unit missing a size is refused."""
    per_unit: dict[tuple[str, int], int] = {}
    for row in lg._read(out, FIELDS, setup):
        unit = (row["arm"], int(row["seed"]))
        per_unit[unit] = per_unit.get(unit, 0) + 1
    broken = sorted(u for u, n in per_unit.items() if n != len(setup.eval_sizes))
    if broken:
        raise ValueError(f"{out} has units without all sizes {setup.eval_sizes}: {broken}")
    return set(per_unit)


def run(
    setup: Setup,
    out: Path,
    *,
    arms: Sequence[str] = ARMS,
    seeds: int = 5,
    jobs: int = 1,
    progress: bool = True,
) -> int:
    """Make every (arm, seed) unit, seeds 0 .. seeds - 1, that ``out`` lacks; return how
    many were made."""
    for arm in arms:
        choice("arm", arm, ARMS)
    integer("seeds", seeds, minimum=1)
    done = done_units(out, setup)
    units = [(arm, seed) for arm in arms for seed in range(seeds) if (arm, seed) not in done]
    work = functools.partial(unit_rows, setup)
    return resumable.run_units(out, FIELDS, units, work, jobs=jobs, progress=progress, desc="grid")


def summary(rows, *, level: float = 0.95) -> list[dict]:
    """Per (arm, size), in the order the rows first name them: the mean accuracy over the
    seeds and its percentile-bootstrap interval (:func:`~posenc.experiments.analysis.
    bootstrap_interval`). Every (arm, size) must have one row per seed 0 .. n - 1, n the
    number of seeds in ``rows``."""
    rows = list(rows)
    if not rows:
        raise ValueError("summary needs at least one row")
    seeds = len({int(row["seed"]) for row in rows})
    keys = list(dict.fromkeys((row["arm"], int(row["size"])) for row in rows))
    table = []
    for arm, size in keys:
        values = per_seed(rows, "accuracy", seeds=seeds, arm=arm, size=size)
        mean, low, high = bootstrap_interval(values, level=level)
        table.append(
            {"arm": arm, "size": size, "seeds": seeds, "mean": mean, "low": low, "high": high}
        )
    return table


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m posenc.experiments.grid",
        description="Train at 8 x 8, test at 8, 12 and 16 on the task 'above'; resumable.",
    )
    parser.add_argument("--jobs", type=int, default=1, help="units in parallel (one core each)")
    parser.add_argument("--seeds", type=int, default=5, help="seeds 0 .. N - 1 (default 5)")
    parser.add_argument("--arms", nargs="+", default=list(ARMS), help=" ".join(ARMS))
    parser.add_argument("--quick", action="store_true", help="a seconds-long smoke run")
    parser.add_argument(
        "--out", type=Path, default=None, help="default data/grid_generalization.csv"
    )
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    args = parser.parse_args(argv)
    setup = QUICK if args.quick else FULL
    name = "grid_generalization_quick" if args.quick else "grid_generalization"
    out = args.out if args.out is not None else Path("data") / f"{name}.csv"
    start = time.perf_counter()
    try:
        made = run(
            setup, out, arms=args.arms, seeds=args.seeds, jobs=args.jobs,
            progress=not args.no_progress,
        )  # fmt: skip
    except ValueError as error:
        parser.error(str(error))
    seconds = time.perf_counter() - start
    print(f"{made} units made in {seconds:.0f} s (setup {setup.id}); results in {out}")
    with out.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    for line in summary(rows):
        print(
            f"{line['arm']:>10} {line['size']:>3}x{line['size']:<3} "
            f"{line['mean']:.3f} [{line['low']:.3f}, {line['high']:.3f}]"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
