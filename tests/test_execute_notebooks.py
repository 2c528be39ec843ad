"""`make execute` is deterministic, and the committed outputs are what it produces."""

from __future__ import annotations

import subprocess
import sys

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook
from tools import execute_notebooks

from conftest import NOTEBOOKS, ROOT

WIDGET_NOTEBOOK = [
    new_markdown_cell("# Widgets", id="title"),
    new_code_cell(
        "import ipywidgets as widgets\n"
        "slider = widgets.IntSlider(value=3, min=0, max=10, description='d')\n"
        "slider",
        id="slider",
    ),
    new_code_cell("import numpy as np\nnp.random.default_rng(0).normal(size=3)", id="numbers"),
]


@pytest.mark.slow
def test_executing_twice_gives_identical_bytes(tmp_path):
    """Widget model ids are random in Jupyter; after normalisation two runs agree."""
    path = tmp_path / "99_widgets.ipynb"
    nb = new_notebook(cells=WIDGET_NOTEBOOK)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    nbformat.write(nb, path)

    first = execute_notebooks.execute(path)
    second = execute_notebooks.execute(path)
    assert first == second

    executed = nbformat.reads(first, as_version=4)
    state = executed.metadata["widgets"][execute_notebooks.WIDGET_STATE]["state"]
    assert len(state) >= 2, "the slider's widget state was not stored"
    view = executed.cells[1].outputs[0]["data"][execute_notebooks.WIDGET_VIEW]
    assert view["model_id"] in state
    assert "execution" not in executed.cells[1].metadata
    assert "version" not in executed.metadata["language_info"]


def test_widget_ids_are_renamed_consistently():
    nb = new_notebook(cells=[new_code_cell("w", id="w", execution_count=1)])
    random_id = "5f0c8a3e9b7d4c21a6e0f1b2c3d4e5f6"
    nb.metadata["widgets"] = {
        execute_notebooks.WIDGET_STATE: {
            "state": {random_id: {"model_name": "IntSliderModel", "state": {}}},
            "version_major": 2,
            "version_minor": 0,
        }
    }
    nb.cells[0].outputs = [
        nbformat.v4.new_output(
            "display_data",
            {execute_notebooks.WIDGET_VIEW: {"model_id": random_id, "version_major": 2}},
        )
    ]
    text = execute_notebooks.normalize(nb, "07_example")
    assert random_id not in text
    again = nbformat.reads(text, as_version=4)
    (stable_id,) = again.metadata["widgets"][execute_notebooks.WIDGET_STATE]["state"]
    assert again.cells[0].outputs[0]["data"][execute_notebooks.WIDGET_VIEW]["model_id"] == (
        stable_id
    )


@pytest.mark.slow
def test_committed_notebooks_are_exactly_what_make_execute_writes():
    """Re-executing every chapter reproduces the committed outputs (tools.compare_outputs).

    Text outputs must be equal under the sanitizer and figures equal up to a few
    anti-aliased pixels: byte for byte, two runs agree only on the same CPU.
    """
    result = subprocess.run(
        [sys.executable, "-m", "tools.execute_notebooks", "--check", *map(str, NOTEBOOKS)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow
def test_check_mode_notices_a_stale_notebook(tmp_path):
    path = tmp_path / "01_stale.ipynb"
    nb = new_notebook(cells=[new_code_cell("1 + 1", id="sum", execution_count=1)])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    nb.cells[0].outputs = [
        nbformat.v4.new_output("execute_result", {"text/plain": "3"}, execution_count=1)
    ]
    nbformat.write(nb, path)
    before = path.read_bytes()
    assert execute_notebooks.main(["--check", str(path)]) == 1
    assert path.read_bytes() == before, "--check must not write"
    assert execute_notebooks.main([str(path)]) == 0
    refreshed = nbformat.read(path, as_version=4)
    assert refreshed.cells[0].outputs[0]["data"]["text/plain"] == "2"
    assert execute_notebooks.main(["--check", str(path)]) == 0


@pytest.mark.slow
def test_volatile_cells_do_not_count_as_changes(tmp_path):
    """A timing cell prints something new each run; only the other cells are compared."""
    path = tmp_path / "04_timing.ipynb"
    cells = [
        new_code_cell(
            "import time\ntime.perf_counter_ns()",
            id="clock",
            metadata={"tags": ["nbval-ignore-output"]},
        ),
        new_code_cell("6 * 7", id="answer"),
    ]
    nb = new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    nbformat.write(nb, path)
    assert execute_notebooks.main([str(path)]) == 0
    first = path.read_bytes()
    assert execute_notebooks.main([str(path)]) == 0
    assert path.read_bytes() == first, "a re-run rewrote a file whose claims did not change"
    assert execute_notebooks.main(["--check", str(path)]) == 0

    stale = nbformat.read(path, as_version=4)
    stale.cells[1].outputs[0]["data"]["text/plain"] = "41"
    nbformat.write(stale, path)
    assert execute_notebooks.main(["--check", str(path)]) == 1
    assert execute_notebooks.main([str(path)]) == 0
    assert nbformat.read(path, as_version=4).cells[1].outputs[0]["data"]["text/plain"] == "42"


def test_a_print_split_by_the_kernel_is_stored_as_one_output():
    """A busy kernel may flush "0.63" and its newline separately: same text, same file."""
    stream = nbformat.v4.new_output
    whole = [stream("stream", name="stdout", text="smallest: 0.63\n")]
    split = [
        stream("stream", name="stdout", text="smallest: 0.63"),
        stream("stream", name="stdout", text="\n"),
    ]
    texts = []
    for outputs in (whole, split):
        nb = new_notebook(cells=[new_code_cell("print(x)", id="p", outputs=outputs)])
        texts.append(execute_notebooks.normalize(nb, "01_print"))
    assert texts[0] == texts[1]

    figure = stream("display_data", {"text/plain": "<Figure>"})
    mixed = [
        stream("stream", name="stdout", text="a\n"),
        stream("stream", name="stderr", text="b\n"),
        figure,
        stream("stream", name="stderr", text="c\n"),
        stream("stream", name="stderr", text="d\n"),
    ]
    merged = execute_notebooks._merge_streams(mixed)
    assert [(o["output_type"], o.get("text")) for o in merged] == [
        ("stream", "a\n"),
        ("stream", "b\n"),
        ("display_data", None),
        ("stream", "c\nd\n"),
    ]


class _FlakyClient:
    """Stands in for NotebookClient: its first ``deaths`` starts fail as ``error``."""

    starts = 0

    def __init__(self, nb, **_):
        self.nb = nb

    def execute(self, env):
        type(self).starts += 1
        if type(self).starts <= type(self).deaths:
            raise RuntimeError(type(self).error)
        for cell in self.nb.cells:
            cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="ran\n")]


def _flaky(monkeypatch, deaths, error=execute_notebooks.KERNEL_DIED_AT_START):
    client = type("Flaky", (_FlakyClient,), {"deaths": deaths, "error": error, "starts": 0})
    monkeypatch.setattr(execute_notebooks, "NotebookClient", client)
    return client


def _one_cell_notebook(tmp_path):
    path = tmp_path / "99_one.ipynb"
    nbformat.write(new_notebook(cells=[new_code_cell("print('ran')", id="one")]), path)
    return path


def test_a_kernel_that_dies_before_starting_is_started_again(tmp_path, monkeypatch):
    client = _flaky(monkeypatch, deaths=execute_notebooks.KERNEL_STARTS - 1)
    text = execute_notebooks.execute(_one_cell_notebook(tmp_path))
    assert client.starts == execute_notebooks.KERNEL_STARTS
    assert nbformat.reads(text, as_version=4).cells[0].outputs[0].text == "ran\n"


def test_a_kernel_that_keeps_dying_fails_the_run(tmp_path, monkeypatch):
    client = _flaky(monkeypatch, deaths=execute_notebooks.KERNEL_STARTS)
    with pytest.raises(RuntimeError, match="before replying"):
        execute_notebooks.execute(_one_cell_notebook(tmp_path))
    assert client.starts == execute_notebooks.KERNEL_STARTS


def test_other_kernel_errors_are_not_retried(tmp_path, monkeypatch):
    client = _flaky(monkeypatch, deaths=1, error="Kernel died while executing a cell")
    with pytest.raises(RuntimeError, match="while executing"):
        execute_notebooks.execute(_one_cell_notebook(tmp_path))
    assert client.starts == 1
