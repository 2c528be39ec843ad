"""The first code cell of every chapter: install ``posenc`` where it is missing.

A chapter opened alone, in Colab or in any Jupyter without the book's environment,
has no ``posenc``. Its first code cell installs the book's package from the
repository named in ``_config.yml`` (``repository.url``) and does nothing at all where
``posenc`` already imports (a local venv, Binder, the book's own build). The cell is
tagged ``remove-cell``: the site does not show it, the downloaded notebook keeps it.

If the install fails, the error a reader sees names the package and the address
pip tried, with pip's own last lines.

``python -m tools.install_cell notebooks/*.ipynb`` writes or refreshes the cell in
each notebook (run ``make execute`` afterwards); ``--check`` writes nothing and exits
1 if a notebook's cell is missing or names another address. ``make test`` checks it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import nbformat
import yaml

ROOT = Path(__file__).resolve().parent.parent
CELL_ID = "install-posenc"
TAG = "remove-cell"

TEMPLATE = """\
# Install the book's library where it is missing (Colab); silent where it is.
import importlib

try:
    importlib.import_module("posenc")
except ModuleNotFoundError:
    import subprocess
    import sys

    SOURCE = "git+{url}"
    pip = [sys.executable, "-m", "pip", "install", "--quiet", SOURCE]
    done = subprocess.run(pip, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ModuleNotFoundError(
            f"posenc is not installed; installing it from {{SOURCE}} failed:"
            f"\\n{{done.stderr[-1500:]}}"
        ) from None
    importlib.invalidate_caches()
    importlib.import_module("posenc")"""


def repository_url(config: Path = ROOT / "_config.yml") -> str:
    """The book's repository address, from its one place in ``_config.yml``."""
    return yaml.safe_load(config.read_text(encoding="utf-8"))["repository"]["url"]


def cell_source(url: str) -> str:
    return TEMPLATE.format(url=url)


def first_code_cell(nb):
    return next((cell for cell in nb.cells if cell.cell_type == "code"), None)


def problems(nb, url: str) -> list[str]:
    """What is wrong with a notebook's install cell ([] if it is right)."""
    cell = first_code_cell(nb)
    if cell is None or cell.get("id") != CELL_ID:
        return ["the first code cell is not the install cell"]
    found = []
    if cell.source != cell_source(url):
        found.append(
            f"the install cell does not install from {url} as tools/install_cell.py writes it"
        )
    if TAG not in cell.metadata.get("tags", []):
        found.append(f"the install cell is not tagged {TAG}")
    if cell.get("outputs"):
        found.append("the install cell printed something where posenc imports")
    return found


def write(nb, url: str) -> None:
    """Put the install cell, for ``url``, before the notebook's first code cell."""
    cell = next((c for c in nb.cells if c.get("id") == CELL_ID), None)
    if cell is None:
        cell = nbformat.v4.new_code_cell(id=CELL_ID)
        first = first_code_cell(nb)
        nb.cells.insert(nb.cells.index(first) if first is not None else len(nb.cells), cell)
    cell.source = cell_source(url)
    cell.metadata["tags"] = [TAG]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if stale")
    args = parser.parse_args(argv)
    url = repository_url()
    stale = 0
    for path in args.notebooks:
        nb = nbformat.read(path, as_version=4)
        found = problems(nb, url)
        if args.check:
            for line in found:
                print(f"{path}: {line}")
            stale += bool(found)
        elif found:
            write(nb, url)
            nbformat.write(nb, path)
            print(f"updated    {path}")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
