"""Tokens on a grid: which encoding finds the token above at sizes it never saw?

The task ``above``: a grid of H x W tokens, each drawn uniformly from :data:`VOCAB`
symbols, read in raster order (index r * W + c) by a causal model; the target at
(r, c) for r >= 1 is the token at (r - 1, c), and row 0 has no target. In raster order
"above" is the token W places back, so the offset to find depends on the width.

Five arms (:data:`ARMS`), the same model otherwise (:class:`GridModel`, built on
chapter 9's :class:`~posenc.experiments.model.CausalLanguageModel`):

- ``"rope_1d"``: RoPE at the raster index r * W + c;
- ``"rope_axial"``: axial RoPE over (row, col): the first half of every head's features
  turned by the row, the second half by the column (:func:`_axial`);
- ``"sincos_2d"``: :func:`posenc.multidim.sincos_2d` added to the input embeddings,
  no rotation;
- ``"rope_1d_rows"``: RoPE over the raster order of a longer sequence with a row-break
  symbol (:data:`ROW_BREAK`, never a target) after every row, as Fuyu's newline token,
  LLaVA-NeXT's ``image_newline`` and Pixtral's ``[IMG_BREAK]`` mark the end of a row of
  patches; the position is the index in that sequence, r * (W + 1) + c
  (:func:`row_break_sequence`), so the token above is W + 1 places back;
- ``"sincos_2d_interp"``: the 2-D table with diffusers' interpolation,
  ``sincos_2d(H, W, d_model, base_size=train_size)``: every grid is squeezed onto the
  training grid's range (p = i * 8 / n along an axis of n cells), so on a 16 x 16 grid
  neighbours sit half a step apart.

Targets, accuracies and the cells file are about grid cells only, in every arm: the
row-break arm's model is scored at its grid cells' places in the longer sequence, on the
first :data:`VOCAB` logits (the row break is never predicted).

Every model trains on 8 x 8 grids for the same number of steps with the same optimiser
and is then scored on fixed held-out grids of 8 x 8, 12 x 12 and 16 x 16 (token accuracy
over the scored targets, and over the cells inside the training grid alone). Two more
measurements show what a model does rather than how often it is right:

- ``copies_8_back`` (:data:`FIELDS`, see :func:`evaluate`): how often the prediction is
  the token ``train_size`` (8) raster places back, the offset that *is* "above" on the
  training grids, over the targets where that token differs from the token above (for
  ``rope_1d_rows`` the training offset is 9 places back in its longer sequence);
- the per-cell accuracy at the largest size (:data:`CELL_FIELDS`, :func:`cell_rows`):
  for every cell (row, col) with a target, the fraction of held-out grids scored right.

Run it from the repository's root::

    python -m posenc.experiments.grid --jobs 2
    # writes data/grid_generalization.csv and data/grid_generalization_cells.csv

With one training width a 1-D encoding can learn "8 back" for "above". ``--mixed``
(:data:`MIXED`, :data:`MIXED_ARMS`) trains instead on square grids whose side is drawn per
batch from 6 .. 10 (``Setup.train_sizes``) and writes ``data/grid_mixed_sizes.csv`` and
``data/grid_mixed_sizes_cells.csv``, the same columns; 8 stays the reference size.

One unit is an (arm, seed); the runner appends each unit's rows to both files as it
finishes, skips the units a file holds and refuses a file of another setup (the setup id
is on every row), as chapter 9's runners do. :func:`summary` reads the rows back (NumPy
only).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import csv
import dataclasses
import functools
import hashlib
import json
import math
import multiprocessing
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from tqdm import tqdm

from posenc._validation import choice, integer
from posenc.experiments import length_generalization as lg
from posenc.experiments.analysis import bootstrap_interval, per_seed
from posenc.experiments.model import CausalLanguageModel
from posenc.multidim import grid_positions, sincos_2d
from posenc.rotary import RotaryEmbedding

__all__ = [
    "ARMS",
    "CELL_FIELDS",
    "FIELDS",
    "FULL",
    "MIXED",
    "MIXED_ARMS",
    "QUICK",
    "ROW_BREAK",
    "TASK",
    "VOCAB",
    "GridModel",
    "Setup",
    "cell_rows",
    "cells_path",
    "done_cell_units",
    "done_units",
    "evaluate",
    "held_out_batch",
    "main",
    "make_batch",
    "row_break_sequence",
    "run",
    "summary",
    "train",
    "training_batches",
    "unit",
    "unit_rows",
]

TASK = "above"
VOCAB = 16
"""Grid tokens are 0 .. VOCAB - 1; there is no start token."""

ROW_BREAK = VOCAB
"""The row-break symbol of the ``rope_1d_rows`` arm, after every row; never a target."""

ARMS = ("rope_1d", "rope_axial", "sincos_2d", "rope_1d_rows", "sincos_2d_interp")

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
    "copies_8_back",
)
"""The columns of ``data/grid_generalization.csv``: one row per (arm, seed, size)."""

CELL_FIELDS = (*FIELDS[: FIELDS.index("size") + 1], "row", "col", "accuracy")
"""The columns of ``data/grid_generalization_cells.csv``: one row per (arm, seed, cell) at
the largest evaluation size, for every cell with a target (rows 1 .. size - 1)."""


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
    train_sizes: tuple[int, ...] = ()
    """Empty: every training grid is train_size x train_size. Otherwise every training
    batch is a square grid whose side is drawn from these (train_size among them) by the
    seeded data generator (:func:`training_batches`)."""

    def __post_init__(self):
        for name in ("train_size", "d_model", "n_heads", "n_layers", "batch_size", "steps"):
            integer(name, getattr(self, name), minimum=1)
        integer("warmup", self.warmup, minimum=0)
        integer("eval_batch", self.eval_batch, minimum=1)
        if self.train_size < 2:
            raise ValueError(
                f"train_size must be >= 2 (row 0 has no target), got {self.train_size}"
            )
        if not isinstance(self.train_sizes, tuple):
            raise TypeError(f"train_sizes must be a tuple of ints, got {self.train_sizes!r}")
        for side in self.train_sizes:
            if isinstance(side, bool) or not isinstance(side, int) or side < 2:
                raise ValueError(
                    f"train_sizes must be ints >= 2 (row 0 has no target), got {side!r} in "
                    f"train_sizes={self.train_sizes}"
                )
        if self.train_sizes and self.train_size not in self.train_sizes:
            raise ValueError(
                f"train_size={self.train_size} must be one of train_sizes={self.train_sizes}"
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
        fields = dataclasses.asdict(self)
        if not self.train_sizes:  # the single-size setups keep the ids their data carry
            del fields["train_sizes"]
        described = json.dumps({"study": TASK, **fields}, sort_keys=True)
        return hashlib.sha256(described.encode()).hexdigest()[:12]


FULL = Setup()
"""The run the book commits (``data/grid_generalization.csv``), seeds 0 .. 4."""

QUICK = Setup(
    train_size=3, eval_sizes=(3, 4), d_model=16, n_heads=2, n_layers=1, steps=4, warmup=0,
    batch_size=4, eval_batch=8,
)  # fmt: skip
"""A smoke run through the same code path, a second long (the tests use it)."""

MIXED = Setup(train_sizes=(6, 7, 8, 9, 10))
"""FULL with training grids of 6 x 6 to 10 x 10, a side drawn per batch, so no single
raster offset is "above" in training (``data/grid_mixed_sizes.csv``, seeds 0 .. 4).
train_size 8 stays the reference: the "inside" cells, ``copies_8_back`` and the
interpolated arm's base_size."""

MIXED_ARMS = ("rope_1d", "rope_1d_rows", "rope_axial")
"""The arms the mixed-size run trains: whether a row break or axial positions let a model
find "above" when the width changes from batch to batch."""

QUICK_MIXED = dataclasses.replace(QUICK, train_sizes=(2, 3, 4))
"""QUICK with mixed training sides (``--mixed --quick``)."""


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


def row_break_sequence(tokens: torch.Tensor, targets: torch.Tensor, width: int):
    """The ``rope_1d_rows`` arm's sequence of a batch of raster-order grids.

    ``tokens`` and ``targets`` (batch, height * width) as :func:`make_batch` gives them.
    Returns (tokens, targets, positions, cells): the grids with :data:`ROW_BREAK` after
    every row, (batch, height * (width + 1)); their targets, the grid targets at the
    grid tokens and -1 (unscored) at every row break, so the target of a grid token is
    the token width + 1 places back; the positions, 0 .. height * (width + 1) - 1; and
    the index in the sequence of every grid cell in raster order, r * (width + 1) + c.
    """
    batch, length = tokens.shape
    width = integer("width", width, minimum=1)
    if length % width or targets.shape != tokens.shape:
        raise ValueError(
            f"tokens and targets must have the same shape (batch, height * {width}), got "
            f"{tuple(tokens.shape)} and {tuple(targets.shape)}"
        )
    height = length // width
    cells = torch.arange(length) + torch.arange(length) // width
    sequence = torch.full((batch, height * (width + 1)), ROW_BREAK, dtype=tokens.dtype)
    sequence[:, cells] = tokens
    scored = torch.full_like(sequence, -1)
    scored[:, cells] = targets
    return sequence, scored, torch.arange(height * (width + 1)), cells


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
    """Adds sincos_2d(height, width, d_model, base_size=base_size) to the embeddings of a
    raster-order grid; :class:`GridModel` sets ``grid`` to (height, width) before every
    forward pass."""

    def __init__(self, d_model: int, base_size: int | None = None):
        super().__init__()
        self.d_model, self.base_size, self.grid = d_model, base_size, None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        height, width = self.grid
        table = sincos_2d(height, width, self.d_model, base_size=self.base_size)
        return x + torch.from_numpy(table).to(x.dtype)


class GridModel(nn.Module):
    """``model(tokens, (height, width))`` -> logits (batch, height * width, VOCAB).

    A :class:`CausalLanguageModel` whose position enters as ``arm`` says: RoPE in every
    layer at the raster index (``rope_1d``), at (row, col) (``rope_axial``) or at the
    index in the sequence with a row break after every row (``rope_1d_rows``), or a 2-D
    sincos table added to the input (``sincos_2d``; ``sincos_2d_interp`` with the
    positions squeezed onto the training grid's range; no RoPE). ``rope_1d_rows``
    embeds one more symbol, :data:`ROW_BREAK`, and returns the logits of the grid cells
    only, over the :data:`VOCAB` grid symbols, so every arm's output is scored alike.
    """

    def __init__(self, arm: str, setup: Setup):
        super().__init__()
        self.arm = choice("arm", arm, ARMS)
        tables = arm in ("sincos_2d", "sincos_2d_interp")
        self.lm = CausalLanguageModel(
            VOCAB + 1 if arm == "rope_1d_rows" else VOCAB,
            setup.d_model,
            setup.n_heads,
            setup.n_layers,
            encoding="none" if tables else "rope",
        )
        if arm == "rope_axial":
            for block in self.lm.blocks:
                block.attention.rotary = _AxialRotary()
        if arm == "sincos_2d":
            self.lm.position = _GridTable(setup.d_model)
        if arm == "sincos_2d_interp":
            self.lm.position = _GridTable(setup.d_model, base_size=setup.train_size)

    def positions(self, height: int, width: int) -> torch.Tensor | None:
        """What the RoPE layers get: raster indices (seq,), (row, col) pairs (seq, 2), or
        for ``rope_1d_rows`` the indices of the longer sequence (height * (width + 1),)."""
        if self.arm == "rope_1d":
            return torch.arange(height * width)
        if self.arm == "rope_axial":
            return torch.from_numpy(grid_positions(height, width))
        if self.arm == "rope_1d_rows":
            return torch.arange(height * (width + 1))
        return None

    def forward(self, tokens: torch.Tensor, grid: tuple[int, int]) -> torch.Tensor:
        height, width = grid
        if tokens.dim() != 2 or tokens.shape[1] != height * width:
            raise ValueError(
                f"tokens must have shape (batch, {height * width}) for a {height} x {width} "
                f"grid, got {tuple(tokens.shape)}"
            )
        if self.arm in ("sincos_2d", "sincos_2d_interp"):
            self.lm.position.grid = (height, width)
        if self.arm == "rope_1d_rows":
            sequence, _, _, cells = row_break_sequence(tokens, torch.zeros_like(tokens), width)
            logits = self.lm(sequence, self.positions(height, width))
            return logits[:, cells, :VOCAB]
        return self.lm(tokens, self.positions(height, width))


# -- training and evaluation ------------------------------------------------------------


def training_batches(setup: Setup, seed: int):
    """The ``steps`` training batches of ``seed``: (side, tokens, targets) per batch, from
    one generator seeded ``seed``. The side is train_size, or with ``train_sizes`` set a
    value drawn uniformly from them by that generator before each batch, so the sequence
    of sides is fixed by the seed."""
    data = torch.Generator().manual_seed(seed)
    sizes = setup.train_sizes
    for _ in range(setup.steps):
        side = setup.train_size
        if sizes:
            side = sizes[int(torch.randint(len(sizes), (1,), generator=data))]
        yield (side, *make_batch(data, setup.batch_size, side, side))


def train(arm: str, seed: int, setup: Setup) -> GridModel:
    """A model of ``arm`` trained on train_size grids (or grids of the ``train_sizes``):
    AdamW at ``learning_rate`` after a linear warm-up, ``steps`` batches drawn from a
    generator seeded ``seed`` (:func:`training_batches`)."""
    torch.manual_seed(seed)
    model = GridModel(arm, setup)
    optimizer = torch.optim.AdamW(model.parameters(), lr=setup.learning_rate, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min(1.0, (step + 1) / (setup.warmup + 1))
    )
    model.train()
    for side, tokens, targets in training_batches(setup, seed):
        loss, _, scored = lg._correct(model, tokens, targets, (side, side))
        optimizer.zero_grad()
        (loss.sum() / scored.sum()).backward()
        optimizer.step()
        schedule.step()
    return model.eval()


def _scores(model, size: int, setup: Setup) -> tuple[dict, torch.Tensor]:
    """:func:`evaluate`'s row values, and the accuracy of every cell of the size x size
    grid over the held-out grids, (size, size), NaN on row 0 (no target)."""
    tokens, targets = held_out_batch(size, setup.eval_batch)
    with torch.no_grad():
        logits = model(tokens, (size, size))
    scored = targets >= 0
    loss = F.cross_entropy(logits.transpose(1, 2), targets.clamp(min=0), reduction="none") * scored
    predicted = logits.argmax(dim=-1)
    correct = (predicted == targets) & scored
    cells = torch.from_numpy(grid_positions(size, size))
    inside = scored & (cells < setup.train_size).all(dim=1)
    earlier = _training_offset(tokens, size, getattr(model, "arm", None), setup)
    apart = scored & (earlier >= 0) & (earlier != targets)
    n_apart = apart.sum().item()
    copied = ((predicted == earlier) & apart).sum().item()
    # math.nan itself (not a rounded copy) where undefined, so equal rows compare equal
    copies = round(copied / n_apart, 4) if n_apart else math.nan
    row = {
        "accuracy": round(correct.sum().item() / scored.sum().item(), 4),
        "accuracy_inside": round((correct & inside).sum().item() / inside.sum().item(), 4),
        "loss": round(loss.sum().item() / scored.sum().item(), 4),
        "copies_8_back": copies,
    }
    per_cell = correct.sum(dim=0).double() / setup.eval_batch
    per_cell[~scored[0]] = math.nan
    return row, per_cell.reshape(size, size)


def _training_offset(tokens: torch.Tensor, size: int, arm: str | None, setup: Setup):
    """Per grid cell, the token at the offset that is "above" on the training grids: the
    token train_size raster places back, or for ``rope_1d_rows`` train_size + 1 places
    back in its sequence with row breaks; -1 where there is none or it is a row break. On
    a train_size-wide grid it is the token above, elsewhere it is another cell."""
    if arm == "rope_1d_rows":
        sequence, _, _, cells = row_break_sequence(tokens, torch.zeros_like(tokens), size)
        back = setup.train_size + 1
    else:
        sequence, cells, back = tokens, torch.arange(tokens.shape[1]), setup.train_size
    earlier = torch.full_like(sequence, -1)
    earlier[:, back:] = sequence[:, :-back]
    earlier[earlier == ROW_BREAK] = -1
    return earlier[:, cells]


def evaluate(model: GridModel, size: int, setup: Setup) -> dict:
    """Loss, accuracy and ``copies_8_back`` on the held-out size x size grids, and the
    accuracy on the cells that lie inside the training grid (row and column < train_size).

    ``copies_8_back`` is the fraction of the targets the model predicts as the token
    ``train_size`` raster places back (8 for :data:`FULL`: the training width), counted
    over the scored targets (rows 1 .. size - 1) at raster index i >= train_size whose
    token at i - train_size differs from the target, the token above at i - size. Those
    are the targets where copying "train_size back" and copying "above" can be told
    apart; on a train_size-wide grid the two offsets are the same cell, there are no
    such targets and the value is NaN (written ``nan``). A model that learned the
    training width scores 1 and is right only where the two tokens happen to agree.

    For ``rope_1d_rows`` the training offset is train_size + 1 (9) places back in its
    sequence with row breaks (:func:`row_break_sequence`), the token above on the
    training grids; the targets counted are those whose token 9 places back is a grid
    token (not a row break) that differs from the token above.
    """
    return _scores(model, size, setup)[0]


def cell_rows(key: dict, per_cell: torch.Tensor) -> list[dict]:
    """One row per cell (row, col) with a target (row >= 1) of a (size, size) accuracy map,
    in raster order, each carrying ``key``'s columns."""
    size = per_cell.shape[0]
    return [
        {**key, "size": size, "row": r, "col": c, "accuracy": round(per_cell[r, c].item(), 4)}
        for r in range(1, size)
        for c in range(size)
    ]


def unit(setup: Setup, arm: str, seed: int) -> tuple[list[dict], list[dict]]:
    """Train one (arm, seed); return its rows (:data:`FIELDS`, one per evaluation size)
    and its cell rows (:data:`CELL_FIELDS`, the largest evaluation size). One forward
    pass per size gives both."""
    torch.set_num_threads(1)
    model = train(arm, seed, setup)
    key = {"setup": setup.id, "task": TASK, "arm": arm, "seed": seed, "steps": setup.steps}
    key["train_size"] = setup.train_size
    rows, cells = [], []
    for size in setup.eval_sizes:
        values, per_cell = _scores(model, size, setup)
        rows.append({**key, "size": size, **values})
        if size == setup.eval_sizes[-1]:
            cells = cell_rows(key, per_cell)
    return rows, cells


def unit_rows(setup: Setup, arm: str, seed: int) -> list[dict]:
    """Train one (arm, seed) and return its rows, one per evaluation size."""
    return unit(setup, arm, seed)[0]


# -- the runner -------------------------------------------------------------------------


def cells_path(out: Path) -> Path:
    """Where the cell rows of a run writing ``out`` go: ``<stem>_cells.csv`` beside it."""
    return out.with_name(f"{out.stem}_cells.csv")


def _count_units(path: Path, fields, setup: Setup, per_unit: int, what: str) -> set:
    counts: dict[tuple[str, int], int] = {}
    for row in lg._read(path, fields, setup):
        key = (row["arm"], int(row["seed"]))
        counts[key] = counts.get(key, 0) + 1
    broken = sorted(u for u, n in counts.items() if n != per_unit)
    if broken:
        raise ValueError(f"{path} has units without all {what}: {broken}")
    return set(counts)


def done_units(out: Path, setup: Setup) -> set[tuple[str, int]]:
    """The (arm, seed) units ``out`` holds whole; a file of other columns, of another setup
    or with a unit missing a size is refused."""
    return _count_units(out, FIELDS, setup, len(setup.eval_sizes), f"sizes {setup.eval_sizes}")


def done_cell_units(cells: Path, setup: Setup) -> set[tuple[str, int]]:
    """The (arm, seed) units the cells file holds whole (every cell with a target at the
    largest size); refused as :func:`done_units` refuses."""
    size = setup.eval_sizes[-1]
    return _count_units(cells, CELL_FIELDS, setup, (size - 1) * size, f"{size} x {size} cells")


def run(
    setup: Setup,
    out: Path,
    *,
    arms: Sequence[str] = ARMS,
    seeds: int = 5,
    jobs: int = 1,
    progress: bool = True,
    cells: Path | None = None,
) -> int:
    """Make every (arm, seed) unit, seeds 0 .. seeds - 1, that ``out`` or the cells file
    (``cells``, by default :func:`cells_path` of ``out``) lacks, and append its rows to
    the file(s) lacking it as it finishes; return how many units were made. A unit is
    deterministic given its seed, so a unit one file already holds is not written there
    twice."""
    for arm in arms:
        choice("arm", arm, ARMS)
    integer("seeds", seeds, minimum=1)
    integer("jobs", jobs, minimum=1)
    cells = cells_path(out) if cells is None else cells
    done = done_units(out, setup)
    done_cells = done_cell_units(cells, setup)
    units = [
        (arm, seed)
        for arm in arms
        for seed in range(seeds)
        if (arm, seed) not in done or (arm, seed) not in done_cells
    ]
    out.parent.mkdir(parents=True, exist_ok=True)
    cells.parent.mkdir(parents=True, exist_ok=True)
    bar = tqdm(total=len(units), desc="grid", unit="model", disable=not progress)

    def record(key, result):
        rows, cell_rows_ = result
        if key not in done_cells:
            lg._append(cells, list(CELL_FIELDS), cell_rows_)
        if key not in done:
            lg._append(out, list(FIELDS), rows)
        bar.update(1)

    work = functools.partial(unit, setup)
    if jobs == 1:
        threads = torch.get_num_threads()
        try:
            for key in units:
                record(key, work(*key))
        finally:
            torch.set_num_threads(threads)
    else:
        context = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(jobs, mp_context=context) as pool:
            futures = {pool.submit(work, *key): key for key in units}
            for future in concurrent.futures.as_completed(futures):
                record(futures[future], future.result())
    bar.close()
    return len(units)


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
    parser.add_argument(
        "--arms", nargs="+", default=None,
        help=f"default {' '.join(ARMS)}; with --mixed {' '.join(MIXED_ARMS)}",
    )  # fmt: skip
    parser.add_argument("--quick", action="store_true", help="a seconds-long smoke run")
    parser.add_argument(
        "--mixed", action="store_true",
        help="train on grids of 6 x 6 .. 10 x 10 (MIXED) into data/grid_mixed_sizes.csv",
    )  # fmt: skip
    parser.add_argument(
        "--out", type=Path, default=None,
        help="default data/grid_generalization.csv (grid_mixed_sizes.csv with --mixed); the "
        "cells go to <stem>_cells.csv beside it",
    )  # fmt: skip
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    args = parser.parse_args(argv)
    if args.mixed:
        setup, name, arms = (QUICK_MIXED if args.quick else MIXED), "grid_mixed_sizes", MIXED_ARMS
    else:
        setup, name, arms = (QUICK if args.quick else FULL), "grid_generalization", ARMS
    name += "_quick" if args.quick else ""
    arms = list(arms) if args.arms is None else args.arms
    out = args.out if args.out is not None else Path("data") / f"{name}.csv"
    start = time.perf_counter()
    try:
        made = run(
            setup, out, arms=arms, seeds=args.seeds, jobs=args.jobs,
            progress=not args.no_progress,
        )  # fmt: skip
    except ValueError as error:
        parser.error(str(error))
    seconds = time.perf_counter() - start
    print(
        f"{made} units made in {seconds:.0f} s (setup {setup.id}); results in {out} and "
        f"{cells_path(out)}"
    )
    with out.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    for line in summary(rows):
        print(
            f"{line['arm']:>16} {line['size']:>3}x{line['size']:<3} "
            f"{line['mean']:.3f} [{line['low']:.3f}, {line['high']:.3f}]"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
