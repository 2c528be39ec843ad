"""Resumable studies: one unit of work per (task, seed), its rows appended to one CSV.

The long-context study (:mod:`posenc.experiments.long_context`) and its sweeps
(:mod:`posenc.experiments.long_context_sweeps`) train one RoPE model per (task, seed)
and write all of that model's rows at once. A run reads the learning rates chosen for
RoPE, skips the units the file holds already, refuses a file of another setup or with
an incomplete unit, and works on several units at once in separate processes.
"""

from __future__ import annotations

import concurrent.futures
import csv
import multiprocessing
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from tqdm import tqdm

from posenc.experiments import length_generalization as lg

__all__ = ["done_units", "missing_units", "rope_rates", "run_units"]

Unit = tuple[str, int]


def rope_rates(rates_from: Path, setup: lg.Setup, tasks: Sequence[str]) -> dict:
    """The learning rates that chapter 9's grid in ``rates_from`` chose for RoPE, keyed
    (task, "rope"); every task of ``tasks`` must have one."""
    with rates_from.open(newline="") as handle:
        rates = lg.chosen_learning_rates(list(csv.DictReader(handle)), setup)
    missing = [t for t in tasks if (t, "rope") not in rates]
    if missing:
        raise ValueError(f"{rates_from} has no learning-rate grid for RoPE on {missing}")
    return rates


def done_units(out: Path, fields: Sequence[str], setup_id: str, rows_per_unit: int) -> set:
    """The (task, seed) units that ``out`` holds, each with all its rows. A file with
    other columns, another setup's rows or an incomplete unit is refused."""
    done: dict[Unit, int] = {}
    if not out.exists():
        return set()
    with out.open(newline="") as handle:
        reader = csv.DictReader(handle)
        if tuple(reader.fieldnames or ()) != tuple(fields):
            raise ValueError(f"{out} has columns {reader.fieldnames}, not {list(fields)}")
        for row in reader:
            if row["setup"] != setup_id:
                raise ValueError(
                    f"{out} holds results of another setup ({row['setup']}; this one is "
                    f"{setup_id}): move it away or pass another --out"
                )
            key = (row["task"], int(row["seed"]))
            done[key] = done.get(key, 0) + 1
    if any(n != rows_per_unit for n in done.values()):
        raise ValueError(f"{out} has an incomplete (task, seed): rewrite it")
    return set(done)


def missing_units(out: Path, fields, setup_id: str, rows_per_unit: int, tasks, seeds: int):
    """The (task, seed) units of ``tasks`` x seeds 0 .. seeds - 1 that ``out`` lacks."""
    done = done_units(out, fields, setup_id, rows_per_unit)
    return [(t, s) for t in tasks for s in range(seeds) if (t, s) not in done]


def run_units(
    out: Path,
    fields: Sequence[str],
    units: Sequence[Unit],
    work: Callable[[str, int], list[dict]],
    *,
    jobs: int = 1,
    progress: bool = True,
    desc: str = "units",
) -> int:
    """Append ``work(task, seed)``'s rows to ``out`` for every unit, as each finishes;
    return how many. With ``jobs`` > 1 the units run in that many processes, so
    ``work`` must pickle (a module-level function, or a ``functools.partial`` of one)."""
    if jobs < 1:
        raise ValueError(f"jobs must be >= 1, got {jobs}")
    out.parent.mkdir(parents=True, exist_ok=True)
    bar = tqdm(total=len(units), desc=desc, unit="model", disable=not progress)

    def record(rows):
        new = not out.exists()
        with out.open("a", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(fields), lineterminator="\n")
            if new:
                writer.writeheader()
            writer.writerows(rows)
        bar.update(1)

    if jobs == 1:
        threads = torch.get_num_threads()
        try:
            for task, seed in units:
                record(work(task, seed))
        finally:
            torch.set_num_threads(threads)
    else:
        context = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(jobs, mp_context=context) as pool:
            futures = [pool.submit(work, task, seed) for task, seed in units]
            for future in concurrent.futures.as_completed(futures):
                record(future.result())
    bar.close()
    return len(units)
