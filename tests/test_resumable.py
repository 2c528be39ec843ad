"""A resumable study appends whole units, skips what its file holds, refuses the rest."""

from __future__ import annotations

import functools

import pytest

pytest.importorskip("torch")
pytest.importorskip("tqdm")

from posenc.experiments import resumable

FIELDS = ("setup", "task", "seed", "value")


def _rows(setup, task, seed, count=2):
    return [{"setup": setup, "task": task, "seed": seed, "value": k} for k in range(count)]


def test_units_are_appended_whole_and_read_back(tmp_path):
    out = tmp_path / "study.csv"
    work = functools.partial(_rows, "abc")
    assert resumable.run_units(out, FIELDS, [("copy", 0), ("copy", 1)], work, progress=False) == 2
    assert resumable.done_units(out, FIELDS, "abc", 2) == {("copy", 0), ("copy", 1)}
    assert resumable.run_units(out, FIELDS, [("recall", 0)], work, progress=False) == 1
    assert len(out.read_text().splitlines()) == 1 + 3 * 2  # one header
    assert resumable.done_units(tmp_path / "none.csv", FIELDS, "abc", 2) == set()


def test_a_file_of_another_setup_or_with_a_broken_unit_is_refused(tmp_path):
    out = tmp_path / "study.csv"
    resumable.run_units(out, FIELDS, [("copy", 0)], functools.partial(_rows, "abc"), progress=False)
    with pytest.raises(ValueError, match=r"another setup .abc; this one is xyz"):
        resumable.done_units(out, FIELDS, "xyz", 2)
    with pytest.raises(ValueError, match="incomplete"):
        resumable.done_units(out, FIELDS, "abc", 3)
    with pytest.raises(ValueError, match="has columns"):
        resumable.done_units(out, FIELDS[:3], "abc", 2)
    with pytest.raises(ValueError, match="jobs must be >= 1"):
        resumable.run_units(out, FIELDS, [], _rows, jobs=0)
