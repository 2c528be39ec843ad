"""The chapters' stored outputs are what other CPUs print, and the comparison can fail."""

from __future__ import annotations

import base64
import io
import shlex
import subprocess
import sys

import nbformat
import numpy as np
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output
from PIL import Image
from tools import compare_outputs, execute_notebooks, portability

from conftest import NOTEBOOKS, ROOT, network_can_be_cut


@pytest.mark.slow
def test_every_chapter_runs_unchanged_under_other_cpu_configurations():
    """Fresh kernels under each configuration: no cell error, the same outputs.

    Where the network can be cut (`unshare -n`), the kernels run without it, so this
    also shows that no chapter needs the network.
    """
    check = [sys.executable, "-m", "tools.portability", *map(str, NOTEBOOKS)]
    if network_can_be_cut():
        check = ["unshare", "-n", "sh", "-c", f"ip link set lo up && {shlex.join(check)}"]
    result = subprocess.run(check, cwd=ROOT, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]


def test_the_configurations_switch_every_library_named_in_the_book():
    for variables in portability.CONFIGURATIONS.values():
        assert set(variables) == {
            "NPY_DISABLE_CPU_FEATURES",
            "OPENBLAS_CORETYPE",
            "ATEN_CPU_CAPABILITY",
            "MKL_ENABLE_INSTRUCTIONS",
        }
    env = execute_notebooks._kernel_env("x86-64-v2")
    assert env["NPY_DISABLE_CPU_FEATURES"] == "X86_V3 X86_V4 AVX512_ICL"
    assert env["PYTHONHASHSEED"] == "0"


@pytest.mark.slow
def test_the_check_runs_the_kernel_under_the_configuration(tmp_path):
    """A cell that prints which of NumPy's AVX paths are on: x86-64-v2 turns them off."""
    path = tmp_path / "01_dispatch.ipynb"
    code = (
        "from numpy._core._multiarray_umath import __cpu_features__ as f\n"
        "print([k for k in ('X86_V3', 'X86_V4') if f.get(k)])"
    )
    nb = new_notebook(cells=[new_markdown_cell("# D"), new_code_cell(code, id="simd")])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    nbformat.write(nb, path)
    assert execute_notebooks.main([str(path)]) == 0
    stored = nbformat.read(path, as_version=4).cells[1].outputs[0]["text"]
    assert execute_notebooks.main(["--check", str(path)]) == 0
    expected_to_change = stored.strip() != "[]"
    changed = execute_notebooks.main(["--check", "--cpu", "x86-64-v2", str(path)]) == 1
    assert changed == expected_to_change


def test_cpu_needs_check(capsys):
    with pytest.raises(SystemExit):
        execute_notebooks.main(["--cpu", "avx2", str(NOTEBOOKS[0])])
    assert "--cpu checks stored outputs" in capsys.readouterr().err


# ---- the comparison ------------------------------------------------------------------


def _png(pixels: np.ndarray) -> str:
    buffer = io.BytesIO()
    Image.fromarray(pixels.astype(np.uint8)).save(buffer, format="png")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _notebook(text="42", picture=None, source="x"):
    outputs = [new_output("stream", name="stdout", text=text)]
    if picture is not None:
        outputs.append(new_output("display_data", {"image/png": _png(picture)}))
    return new_notebook(cells=[new_code_cell(source, id="c", execution_count=1, outputs=outputs)])


CANVAS = np.full((100, 100, 3), 255)


def test_equal_executions_have_no_differences():
    assert compare_outputs.differences(_notebook(), _notebook()) == []


def test_a_changed_text_output_is_named_with_its_cell():
    (line,) = compare_outputs.differences(_notebook("42"), _notebook("41"))
    assert line.startswith("cell 0: output differs") and "41" in line


def test_a_few_anti_aliased_pixels_are_not_a_change_but_another_figure_is():
    noisy = CANVAS.copy()
    noisy[50, 50] = 250  # one pixel of 10,000: 0.01 %
    assert compare_outputs.differences(_notebook(picture=CANVAS), _notebook(picture=noisy)) == []
    other = CANVAS.copy()
    other[40:60, :] = 0  # a new band: 20 %
    (line,) = compare_outputs.differences(_notebook(picture=CANVAS), _notebook(picture=other))
    assert "picture 1 differs in 20.00% of its pixels" in line
    resized = np.full((100, 120, 3), 255)
    assert compare_outputs.differences(_notebook(picture=CANVAS), _notebook(picture=resized))


def test_pictures_inside_html_and_widget_state_are_compared_as_pictures():
    def html_notebook(picture):
        nb = _notebook()
        html = f'<img src="data:image/png;base64,{_png(picture)}">'
        nb.cells[0].outputs.append(new_output("display_data", {"text/html": html}))
        return nb

    noisy, other = CANVAS.copy(), CANVAS.copy()
    noisy[0, 0], other[:, :50] = 0, 0
    assert compare_outputs.differences(html_notebook(CANVAS), html_notebook(noisy)) == []
    assert compare_outputs.differences(html_notebook(CANVAS), html_notebook(other))


def test_volatile_cells_errors_and_the_sanitizer():
    volatile = "# NBVAL_IGNORE_OUTPUT\nx"
    assert (
        compare_outputs.differences(
            _notebook("1", source=volatile), _notebook("2", source=volatile)
        )
        == []
    )
    failing = _notebook()
    failing.cells[0].outputs = [
        new_output("error", ename="AssertionError", evalue="", traceback=[])
    ]
    (line,) = compare_outputs.differences(_notebook(), failing)
    assert line == "cell 0: raised AssertionError: "
    patterns = compare_outputs.sanitize_patterns()
    assert any("0x" in p.pattern for p, _ in patterns)
    one, two = _notebook("at 0x7f3a2b1c4d5e"), _notebook("at 0x7f00aa11bb22")
    assert compare_outputs.differences(one, two) == []
    assert compare_outputs.differences(one, two, patterns=[])


def test_the_volatile_marker_is_read_as_nbval_reads_it():
    assert compare_outputs.is_volatile("# NBVAL_IGNORE_OUTPUT\n# (a timing)\nx")
    assert compare_outputs.is_volatile("x = 1\n  #  NBVAL_IGNORE_OUTPUT  ")
    assert not compare_outputs.is_volatile("# NBVAL_IGNORE_OUTPUT (a timing)\nx")
    assert not compare_outputs.is_volatile("print('NBVAL_IGNORE_OUTPUT')")


def test_an_edited_source_or_metadata_is_a_change():
    (line,) = compare_outputs.differences(_notebook(), _notebook(source="y"))
    assert line.startswith("notebook: output differs")


def test_a_raised_error_is_reported_with_the_failing_line():
    failing = _notebook()
    traceback = [
        "\x1b[31mAssertionError\x1b[39m",
        "\x1b[32m---> \x1b[39m\x1b[32m3\x1b[39m assert x < 1",
    ]
    failing.cells[0].outputs = [
        new_output("error", ename="AssertionError", evalue="", traceback=traceback)
    ]
    (line,) = compare_outputs.differences(_notebook(), failing)
    assert line == "cell 0: raised AssertionError:  at ---> 3 assert x < 1"
