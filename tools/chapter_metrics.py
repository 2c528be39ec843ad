"""What a reader of the site sees of each chapter: code, asserts, figures, words.

    python -m tools.chapter_metrics notebooks/0[1-5]_*.ipynb

A code cell is *hidden* when the site removes or collapses its input (the tags
``remove-input``, ``remove-cell``, ``hide-input``, ``hide-cell``); it still runs under
nbval. The first cell that installs ``posenc`` is infrastructure and counted in
neither group. Words are those of the markdown cells, without code, math or markup.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from pathlib import Path

import nbformat

HIDDEN_TAGS = {"remove-input", "remove-cell", "hide-input", "hide-cell"}
INSTALL_CELL_ID = "install-posenc"
ASSERT = re.compile(r"^\s*assert\b", re.M)
FENCE = re.compile(r"^(```|:::).*?$", re.M)
MATH_BLOCK = re.compile(r"\$\$.*?\$\$", re.S)
INLINE = re.compile(r"\$[^$\n]+\$|`[^`\n]*`|\{[a-z]+\}`[^`]*`")
WORD = re.compile(r"[A-Za-z][A-Za-z'\u2019-]*")


def is_hidden(cell) -> bool:
    return bool(HIDDEN_TAGS & set(cell.metadata.get("tags", [])))


def teaching_cells(nb):
    """The code cells of a chapter, without the install cell."""
    return [c for c in nb.cells if c.cell_type == "code" and c.get("id") != INSTALL_CELL_ID]


def has_figure(cell) -> bool:
    return any("image/png" in o.get("data", {}) for o in cell.get("outputs", []))


def count_words(markdown: str) -> int:
    text = MATH_BLOCK.sub(" ", markdown)
    text = INLINE.sub(" word ", text)  # a symbol or a name reads as one word
    text = FENCE.sub(" ", text)
    return len(WORD.findall(text))


@dataclass(frozen=True)
class Metrics:
    visible_code_lines: int
    visible_asserts: int
    hidden_cells: int
    code_cells: int
    figures: int
    words: int
    first_figure_at: float | None  # where the first figure stands, 0 = top, 1 = end
    visible_cells: int = 0  # markdown cells and code cells whose input the site shows
    minutes: int | None = None  # the stated "Time to learn"

    @property
    def hidden_share(self) -> float:
        return self.hidden_cells / self.code_cells if self.code_cells else 0.0


def measure(nb) -> Metrics:
    cells = teaching_cells(nb)
    visible = [c for c in cells if not is_hidden(c)]
    lines = [line for c in visible for line in c.source.splitlines() if line.strip()]
    figure_positions = [i for i, c in enumerate(nb.cells) if has_figure(c)]
    return Metrics(
        visible_code_lines=len(lines),
        visible_asserts=sum(len(ASSERT.findall(c.source)) for c in visible),
        hidden_cells=len(cells) - len(visible),
        code_cells=len(cells),
        figures=len(figure_positions),
        words=sum(count_words(c.source) for c in nb.cells if c.cell_type == "markdown"),
        first_figure_at=(figure_positions[0] / len(nb.cells) if figure_positions else None),
        visible_cells=len(visible) + sum(c.cell_type == "markdown" for c in nb.cells),
        minutes=_minutes(nb),
    )


TIME = re.compile(r"\*\*Time to (?:learn|read)\*\*:\s*(\d+)\s*minutes")


def _minutes(nb) -> int | None:
    for cell in nb.cells:
        if cell.cell_type == "markdown" and (found := TIME.search(cell.source)):
            return int(found.group(1))
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    args = parser.parse_args(argv)
    header = "chapter                     code lines  asserts  hidden  figures  words"
    print(header)
    totals = [0, 0, 0, 0]
    for path in args.notebooks:
        m = measure(nbformat.read(path, as_version=4))
        print(
            f"{path.stem:<28}{m.visible_code_lines:>10}{m.visible_asserts:>9}"
            f"{m.hidden_cells:>5}/{m.code_cells:<3}{m.figures:>8}{m.words:>7}"
        )
        for k, value in enumerate((m.visible_code_lines, m.visible_asserts, m.figures, m.words)):
            totals[k] += value
    lines, asserts, figures, words = totals
    print(f"{'total':<28}{lines:>10}{asserts:>9}{'':>9}{figures:>8}{words:>7}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
