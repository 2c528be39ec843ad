"""Shared paths for the test suite."""

from __future__ import annotations

import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

from hypothesis import settings

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))

# The maintenance scripts in tools/ are importable from the tests.
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def read_csv(path: Path) -> tuple[tuple[str, ...], list[dict]]:
    """A CSV file's column names and its rows."""
    import csv

    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        return tuple(reader.fieldnames or ()), list(reader)


def training_frequencies(monkeypatch) -> list:
    """A list that receives the RoPE frequencies and scale in force at every training
    step of ``posenc.experiments.length_generalization`` from now on."""
    from posenc.experiments import length_generalization as lg

    in_force, correct = [], lg._correct

    def recording(model, *args, **kwargs):
        if model.training:
            in_force.append(model.rope_frequencies())
        return correct(model, *args, **kwargs)

    monkeypatch.setattr(lg, "_correct", recording)
    return in_force


def run_benchmark_quick(script: str, out: Path) -> subprocess.CompletedProcess:
    """Run ``benchmarks/<script> --quick --out <out>``; exit 1 (a goal missed) is fine."""
    done = subprocess.run(
        [sys.executable, f"benchmarks/{script}", "--quick", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode in (0, 1), done.stderr  # 1: a timing goal missed, not an error
    return done


def network_can_be_cut() -> bool:
    """Whether a command can run in a network namespace of its own (`unshare -n`)."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return False
    probe = subprocess.run(["unshare", "-n", "true"], capture_output=True, check=False)
    return probe.returncode == 0


class Elements(HTMLParser):
    """Collects an HTML text's start tags (name, attributes) and its <script> elements."""

    def __init__(self, text: str = ""):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.scripts: list[tuple[dict, str]] = []
        self._script: tuple[dict, list[str]] | None = None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag == "script":
            self._script = (dict(attrs), [])

    def handle_data(self, data):
        if self._script is not None:
            self._script[1].append(data)

    def handle_endtag(self, tag):
        if tag == "script" and self._script is not None:
            self.scripts.append((self._script[0], "".join(self._script[1])))
            self._script = None

    def with_class(self, name: str) -> list[dict]:
        """The attributes of every element that has the class ``name``."""
        return [a for _, a in self.tags if name in (a.get("class") or "").split()]


# Property-based tests explore the same examples on every run, so a CI result
# can be reproduced, and they write no example database into the clone.
settings.register_profile("book", derandomize=True, deadline=None, database=None)
settings.load_profile("book")
