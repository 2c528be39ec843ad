"""What the site shows of chapters 1-8 stays a text to read, with the checks serving it.

Chapters 1-5 teach one formula and its implementations, chapters 6-8 one thread from
the rotation property to RoPE; each group's visible code and visible asserts have a
budget (pure verification runs in cells hidden on the site). Chapter 2 shows the table
as a picture in its first half; chapter 8 writes RoPE both ways real code does.
"""

from __future__ import annotations

import re

import nbformat
import pytest
import yaml
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output
from tools import chapter_metrics

from conftest import NOTEBOOKS, ROOT

FIRST_FIVE = NOTEBOOKS[:5]
SIX_TO_EIGHT = NOTEBOOKS[5:8]
# (chapters, their stems, visible code lines at most, visible asserts at most)
BUDGETS = {
    "1-5": (FIRST_FIVE, ["01", "02", "03", "04", "05"], 530, 90),
    "6-8": (SIX_TO_EIGHT, ["06", "07", "08"], 830, 140),
}


# Main-path chapters already held to the targets (the others follow as they are
# rewritten): at most 30 visible cells, 2,200 words, 30 minutes; at least 3 figures.
MAIN_PATH = [
    "01",
    "02",
    "03",
    "04",
    "05",
    "06",
    "07",
    "08",
    "09",
    "10",
    "11",
    "12",
    "23",
    "24",
    "25",
    "26",
]


@pytest.mark.parametrize("stem", MAIN_PATH)
def test_main_path_chapter_keeps_to_the_targets(stem):
    (path,) = [p for p in NOTEBOOKS if p.stem.startswith(stem + "_")]
    m = chapter_metrics.measure(nbformat.read(path, as_version=4))
    assert m.visible_cells <= 30, f"{m.visible_cells} visible cells"
    assert m.words <= 2200, f"{m.words} words of prose"
    assert m.figures >= 3, f"{m.figures} figures"
    assert m.minutes is not None and m.minutes <= 30, f"time to learn: {m.minutes}"


# A {doc} link to a notebook, with or without a title: {doc}`15_x` or {doc}`text <15_x>`
DOC_LINK = re.compile(r"\{doc\}`(?:[^`<]*<)?(?:\.\./notebooks/)?(\d\d_\w+)>?`")
TOC = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))


def _toc_parts(prefix):
    """The notebooks of every toc part whose caption starts with prefix."""
    parts = [p for p in TOC["parts"] if p["caption"].startswith(prefix)]
    assert parts, f"no toc part captioned {prefix!r}"
    return [ROOT / f"{c['file']}.ipynb" for p in parts for c in p["chapters"]]


def doc_links(path) -> set[str]:
    """The notebooks a notebook's prose links to with {doc}."""
    notebook = nbformat.read(path, as_version=4)
    prose = "\n".join(c.source for c in notebook.cells if c.cell_type == "markdown")
    return set(DOC_LINK.findall(prose))


# "Deep dives" and "Deep dives: beyond the line"
DEEP_DIVES = _toc_parts("Deep dives")


@pytest.mark.parametrize("dive", DEEP_DIVES, ids=lambda p: p.stem)
def test_each_deep_dive_and_the_chapter_it_continues_link_to_each_other(dive):
    deep = {p.stem for p in DEEP_DIVES}
    chapters = doc_links(dive) - deep - {dive.stem}
    continued = [
        stem
        for stem in sorted(chapters)
        if dive.stem in doc_links(ROOT / "notebooks" / f"{stem}.ipynb")
    ]
    assert continued, f"{dive.stem} and no main-path chapter it links to link to each other"


def test_doc_links_are_found_with_and_without_a_title(tmp_path):
    notebook = new_notebook(
        cells=[new_markdown_cell("See {doc}`15_error_model` and {doc}`chapter 1 <01_problem>`.")]
    )
    path = tmp_path / "99_links.ipynb"
    nbformat.write(notebook, path)
    assert doc_links(path) == {"15_error_model", "01_problem"}
    notebook.cells[0].source = "No links here, only `15_error_model`."
    nbformat.write(notebook, path)
    assert doc_links(path) == set()


def _metrics(paths):
    return [chapter_metrics.measure(nbformat.read(p, as_version=4)) for p in paths]


@pytest.mark.parametrize("group", BUDGETS)
def test_each_group_of_chapters_keeps_to_its_code_and_assert_budget(group):
    paths, stems, max_lines, max_asserts = BUDGETS[group]
    assert [p.stem.split("_", 1)[0] for p in paths] == stems
    metrics = _metrics(paths)
    lines = sum(m.visible_code_lines for m in metrics)
    asserts = sum(m.visible_asserts for m in metrics)
    assert lines <= max_lines, f"{lines} visible code lines in chapters {group}"
    assert asserts <= max_asserts, f"{asserts} visible asserts in chapters {group}"


def _visible_code(path) -> str:
    notebook = nbformat.read(path, as_version=4)
    return "\n".join(
        c.source
        for c in notebook.cells
        if c.cell_type == "code" and not chapter_metrics.is_hidden(c)
    )


def test_chapter_eight_writes_rope_in_complex_and_rotate_half_form_with_partial_rotary():
    code = _visible_code(SIX_TO_EIGHT[2])
    assert "1j" in code, "chapter 8 shows no complex form of RoPE (q * e^{i m theta})"
    assert "def rotate_half" in code, "chapter 8 shows no rotate_half form"
    # Partial rotary is depth: chapter 8's deep dive shows it.
    (dive,) = [p for p in NOTEBOOKS if p.stem.startswith("20_")]
    assert dive.stem in doc_links(SIX_TO_EIGHT[2]), "chapter 8 does not link 20"
    assert "rotary_dim" in _visible_code(dive), "chapter 8's deep dive shows no partial rotary"


def test_chapter_two_shows_the_table_in_its_first_half():
    (chapter_two,) = _metrics(FIRST_FIVE[1:2])
    assert chapter_two.figures >= 1, "chapter 2 has no figure"
    assert chapter_two.first_figure_at < 0.5, "chapter 2's first figure is in its second half"


def _chapter():
    figure = new_output("display_data", {"image/png": "iVBORw0KGgo=", "text/plain": "<Figure>"})
    cells = [
        new_markdown_cell("# Title\n\nTwo words, `code` and $x^2$.\n\n$$\ny = 1\n$$"),
        new_code_cell("import os", id="install-posenc", metadata={"tags": ["remove-cell"]}),
        new_code_cell("x = 1\n\nassert x == 1\nassert x > 0"),
        new_code_cell("assert True", metadata={"tags": ["hide-input"]}),
        new_code_cell("plot()", outputs=[figure]),
    ]
    return new_notebook(cells=cells)


def test_measure_counts_what_the_site_shows():
    m = chapter_metrics.measure(_chapter())
    # The install cell counts nowhere; the hidden cell's assert is not visible.
    assert (m.visible_code_lines, m.visible_asserts) == (4, 2)
    assert (m.hidden_cells, m.code_cells, m.figures) == (1, 3, 1)
    # the markdown cell and the two visible code cells; no stated time
    assert (m.visible_cells, m.minutes) == (3, None)
    assert m.first_figure_at == pytest.approx(4 / 5)
    # "Title", "Two", "words", "and" plus one word each for `code` and $x^2$.
    assert m.words == 6


def test_a_chapter_without_figures_has_no_first_figure():
    nb = _chapter()
    nb.cells[-1].outputs = []
    assert chapter_metrics.measure(nb).first_figure_at is None


def test_the_report_lists_every_chapter_and_the_total(capsys):
    assert chapter_metrics.main([str(p) for p in FIRST_FIVE]) == 0
    out = capsys.readouterr().out
    assert all(p.stem in out for p in FIRST_FIVE) and "total" in out


def test_measure_reads_the_stated_time_to_learn():
    notebook = _chapter()
    notebook.cells[0].source += "\n\n- **Time to learn**: 25 minutes."
    assert chapter_metrics.measure(notebook).minutes == 25
