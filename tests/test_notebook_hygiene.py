"""Every chapter notebook is stored executed, clean and listed in the table of contents.

The second half feeds the same rules small broken notebooks, so each rule is seen
failing on the defect it exists for.
"""

from __future__ import annotations

import copy

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output
from tools import notebook_checks
from tools.toc import toc_entries

from conftest import NOTEBOOKS, ROOT


def test_there_are_chapters():
    assert NOTEBOOKS, "no notebooks found in notebooks/"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_hygiene(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    assert notebook_checks.findings(nb) == []


def test_every_notebook_is_in_the_toc_and_every_toc_entry_exists():
    listed = toc_entries()
    assert len(listed) == len(set(listed)), "an entry appears twice in _toc.yml"
    for entry in listed:
        candidates = [ROOT / f"{entry}{suffix}" for suffix in (".md", ".ipynb")]
        assert any(c.exists() for c in candidates), f"_toc.yml lists {entry}, which is missing"
    for path in NOTEBOOKS:
        entry = path.relative_to(ROOT).with_suffix("").as_posix()
        assert entry in listed, f"{path.name} is not listed in _toc.yml"
    stray = [p for p in (ROOT / "notebooks").glob("*.ipynb") if p not in NOTEBOOKS]
    assert stray == [], f"notebooks must be named NN_topic.ipynb: {stray}"


# ---- the rules can fail ---------------------------------------------------------------


def good_notebook():
    nb = new_notebook()
    nb.metadata = {
        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
        "language_info": {"name": "python"},
    }
    nb.cells = [
        new_markdown_cell("# A chapter", id="title"),
        new_code_cell("x = 1", id="one", execution_count=1),
        new_code_cell(
            "x + 1",
            id="two",
            execution_count=2,
            outputs=[new_output("execute_result", {"text/plain": "2"}, execution_count=2)],
        ),
    ]
    return nb


def test_the_good_notebook_passes():
    assert notebook_checks.findings(good_notebook()) == []


def broken(edit):
    nb = copy.deepcopy(good_notebook())
    edit(nb)
    return notebook_checks.findings(nb)


def _unexecuted(nb):
    nb.cells[2].execution_count = None


def _out_of_order(nb):
    nb.cells[1].execution_count = 3


def _error_output(nb):
    nb.cells[1].outputs = [new_output("error", ename="ValueError", evalue="bad", traceback=[])]


def _tagged_but_silent(nb):
    nb.cells[1].metadata["tags"] = ["raises-exception"]


def _output(text):
    def edit(nb):
        nb.cells[1].outputs = [new_output("stream", name="stdout", text=text)]

    return edit


def _stderr(nb):
    nb.cells[1].outputs = [new_output("stream", name="stderr", text="UserWarning: careful")]


def _ignored_claim(nb):
    nb.cells[1].source = "assert x == 1"
    nb.cells[1].metadata["tags"] = ["nbval-ignore-output"]


def _marker_in_the_code(nb):
    nb.cells[1].source = "# NBVAL_IGNORE_OUTPUT\nx = 1"


def _marker_nbval_does_not_read(nb):
    nb.cells[1].source = "# NBVAL_IGNORE_OUTPUT (a timing)\nx = 1"


def _pinned_digits(nb):
    nb.cells[1].source = 'gap = 5.7e-14\nassert f"{gap:.1e}" == "5.7e-14"'


def _pinned_digits_in_a_tuple(nb):
    nb.cells[1].source = 'assert (f"{a:.1e}", f"{b:.1e}") == ("7.7e-11", "1.1e-10")'


def _figure_without_caption(nb):
    nb.cells[1].outputs = [new_output("display_data", {"image/png": "iVBORw0KGgo="})]


def _plain_maths_in_a_caption(nb):
    nb.cells[1].outputs = [new_output("display_data", {"image/png": "iVBORw0KGgo="})]
    nb.cells[1].metadata["mystnb"] = {
        "figure": {"caption": "What M_10 does; $M_{10}$ is fine", "name": "fig-x"},
        "image": {"alt": "a picture"},
    }


def _unnamed_source(text):
    def edit(nb):
        nb.cells.append(new_markdown_cell(text, id="mistake"))

    edit.__name__ = "unnamed_source"
    return edit


def _mostly_hidden(nb):
    nb.cells[1].metadata["tags"] = ["hide-input"]
    nb.cells[2].metadata["tags"] = ["remove-input"]


def _reads_a_removed_name(nb):
    nb.cells[1].metadata["tags"] = ["remove-cell"]  # defines x; cell 2 reads it


def _no_title(nb):
    nb.cells[0].source = "Some text"


def _long_cell(nb):
    nb.cells[1].source = "\n".join(["x = 1"] * 50)


def _version(nb):
    nb.metadata["language_info"]["version"] = "3.11.7"


def _widget(tags, stored, state=None):
    def edit(nb):
        view = {notebook_checks.WIDGET_VIEW: {"model_id": "m1", "version_major": 2}}
        nb.cells[1].outputs = [new_output("display_data", view)]
        nb.cells[1].metadata["tags"] = tags
        models = state or {"m1": {"model_name": "IntSliderModel", "state": {}}}
        nb.metadata["widgets"] = {notebook_checks.WIDGET_STATE: {"state": models if stored else {}}}

    return edit


def _model(name, **state):
    return {"model_name": name, "state": state}


def _player(link_slider=True, extra=None):
    """A box holding a play button and a slider, both linked in the browser, and a picture."""
    state = {
        "m1": _model(
            "VBoxModel", children=["IPY_MODEL_box", "IPY_MODEL_stack"], layout="IPY_MODEL_l"
        ),
        "box": _model("HBoxModel", children=["IPY_MODEL_play", "IPY_MODEL_slider"]),
        "play": _model("PlayModel", style="IPY_MODEL_s"),
        "slider": _model("IntSliderModel"),
        "stack": _model("StackModel", children=["IPY_MODEL_pic" if extra is None else extra]),
        "pic": _model("HTMLModel"),
        "img": _model("ImageModel"),
        "l": _model("LayoutModel"),
        "s": _model("DescriptionStyleModel"),
        "k1": _model(
            "LinkModel", source=["IPY_MODEL_play", "value"], target=["IPY_MODEL_slider", "value"]
        ),
    }
    if link_slider:
        state["k2"] = _model(
            "LinkModel",
            source=["IPY_MODEL_slider", "value"],
            target=["IPY_MODEL_stack", "selected_index"],
        )
    else:
        state["k1"]["state"]["target"] = ["IPY_MODEL_stack", "selected_index"]
    return state


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (_unexecuted, "not executed"),
        (_out_of_order, "not run top to bottom"),
        (_error_output, "stored error output"),
        (_tagged_but_silent, "raised nothing"),
        (_output("saved to /home/reader/figure.png"), "machine path"),
        (_output("<object at 0x7f3a2b1c9d00>"), "memory address"),
        (_output("run at 2026-11-22 08:30:01"), "timestamp"),
        (_stderr, "stderr"),
        (_ignored_claim, "nbval-ignore-output on a cell that asserts"),
        (_marker_in_the_code, "shows on the site"),
        (_marker_nbval_does_not_read, "shows on the site"),
        (_pinned_digits, "printed digits of a float"),
        (_pinned_digits_in_a_tuple, "printed digits of a float"),
        (_figure_without_caption, "without a caption"),
        (_plain_maths_in_a_caption, "caption writes maths as plain text ['M_1']"),
        (_unnamed_source("As one write-up puts it, ..."), "unnamed source"),
        (_unnamed_source(":::{admonition} Errata: a slip"), "unnamed source"),
        (_unnamed_source("Two tutorials repeat the claim."), "unnamed source"),
        (_mostly_hidden, "at most half"),
        (_reads_a_removed_name, "defined only in cells the site removes"),
        (_no_title, "# Title"),
        (_long_cell, "longer than"),
        (_version, "machine-specific"),
        (_widget(["remove-output"], stored=False), "widget state not stored"),
        (_widget([], stored=True), "without the remove-output tag"),
        (_widget([], stored=True, state=_player(link_slider=False)), "IntSliderModel"),
        (
            _widget([], stored=True, state=_player(extra="IPY_MODEL_img")),
            "ImageModel (needs a kernel)",
        ),
    ],
    ids=lambda v: getattr(v, "__name__", None) if callable(v) else None,
)
def test_each_rule_catches_its_defect(edit, expected):
    found = broken(edit)
    assert any(expected in finding for finding in found), found


def test_a_stored_widget_left_off_the_site_passes():
    assert broken(_widget(["remove-output"], stored=True)) == []


def test_a_widget_linked_in_the_browser_may_be_shown():
    assert broken(_widget([], stored=True, state=_player())) == []


def test_a_common_mistake_stated_on_its_own_with_a_named_source_passes():
    text = (
        ":::{admonition} Common mistakes\n\nThe PyTorch tutorial "
        "{cite:p}`pytorch_transformer_tutorial` and the tutorials of this book are named."
    )
    assert broken(lambda nb: nb.cells.append(new_markdown_cell(text, id="named"))) == []


def test_a_name_a_shown_cell_defines_again_may_also_come_from_a_removed_cell():
    nb = copy.deepcopy(good_notebook())
    nb.cells[1].metadata["tags"] = ["remove-cell"]
    nb.cells[2].source = "x = 2\nx + 1"
    assert notebook_checks.check_shown_code_stands_alone(nb) == []
    nb.cells[1].metadata["tags"] = ["hide-input"]  # collapsed, but on the page
    nb.cells[2].source = "x + 1"
    assert notebook_checks.check_shown_code_stands_alone(nb) == []


def test_half_of_the_code_cells_may_be_hidden():
    assert broken(lambda nb: nb.cells[1].metadata.update(tags=["hide-input"])) == []


def test_raises_exception_tag_allows_a_stored_error():
    def edit(nb):
        _error_output(nb)
        nb.cells[1].metadata["tags"] = ["raises-exception"]

    assert broken(edit) == []
