"""The chapters' stored outputs are what other CPUs print, and the comparison can fail."""

from __future__ import annotations

import base64
import io
import json
import math
import os
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
    switches = {
        "NPY_DISABLE_CPU_FEATURES",
        "OPENBLAS_CORETYPE",
        "ATEN_CPU_CAPABILITY",
        "ONEDNN_MAX_CPU_ISA",
        "MKL_ENABLE_INSTRUCTIONS",
    }
    for name, variables in portability.CONFIGURATIONS.items():
        preload = {"LD_PRELOAD"} if name == "other-libm" else set()
        assert set(variables) == switches | preload, name
    env = execute_notebooks._kernel_env("x86-64-v2")
    assert set(env["NPY_DISABLE_CPU_FEATURES"].split()) >= {"X86_V3", "X86_V4", "AVX512_ICL"}
    assert env["PYTHONHASHSEED"] == "0"


def test_numpy_targets_above_the_level_are_derived_not_listed():
    # NumPy ignores a name it does not know, so the list comes from its own targets:
    # NumPy 2's groups, NumPy 1's extensions, and a target added later all turn off.
    numpy2 = ["X86_V3", "X86_V4", "AVX512_ICL", "AVX512_SPR"]
    assert portability.numpy_disabled("avx2", numpy2) == ["X86_V4", "AVX512_ICL", "AVX512_SPR"]
    assert portability.numpy_disabled("x86-64-v2", numpy2) == numpy2
    numpy1 = ["SSSE3", "SSE41", "POPCNT", "SSE42", "AVX", "F16C", "FMA3", "AVX2", "AVX512F"]
    numpy1 += ["AVX512_SKX", "AVX512_CLX", "AVX512_CNL", "AVX512_ICL", "AVX512_SPR"]
    assert portability.numpy_disabled("avx2", numpy1) == numpy1[8:]
    assert portability.numpy_disabled("x86-64-v2", numpy1) == numpy1[4:]
    assert portability.numpy_disabled("avx2", ["X86_V3", "AVX10_2"]) == ["AVX10_2"]


@pytest.mark.parametrize("name", sorted(portability.LEVELS))
def test_a_kernel_under_each_configuration_has_nothing_above_its_level(name):
    """In a process run as the configuration says, NumPy has no target above the
    level left on, and PyTorch picks the level's kernels."""
    probe = (
        "import json, torch\n"
        "from tools import portability\n"
        "dispatch, features = portability._numpy_dispatch()\n"
        "print(json.dumps([[t for t in dispatch if features.get(t)],"
        " torch.backends.cpu.get_cpu_capability()]))"
    )
    env = {**os.environ, **portability.environment(name)}
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr[-2000:]
    numpy_on, torch_capability = json.loads(result.stdout.splitlines()[-1])
    assert set(numpy_on) <= portability.LEVELS[name].numpy, numpy_on
    level = portability.LEVELS[name].switches["ATEN_CPU_CAPABILITY"]
    assert torch_capability in {level.upper(), "DEFAULT"}, torch_capability


def test_describe_names_what_a_configuration_turns_off_here():
    for name in portability.LEVELS:
        line = portability.describe(name)
        assert line.startswith(f"{name}: ")
        assert ("another math library" in line) == (name == "other-libm")


OTHER_LIBM_PROBE = """
import json, math
import numpy as np
x = np.linspace(0.05, 40.0, 4001)
print(json.dumps({
    "numpy": {f: getattr(np, f)(x).tolist() for f in ("log", "exp", "log10")},
    "pow": [float(np.power(10000.0, -k / 64)) for k in range(64)],
    "pow_glibc": [10000.0 ** (-k / 64) for k in range(64)],
    "powf": np.power(np.float32(10000), -np.arange(64, dtype=np.float32) / 64).tolist(),
    "exact": [
        float(v)
        for v in (np.power(16.0, 0.5), np.log(1.0), np.exp2(-33.0), np.float32(4) ** 0.5)
    ],
    "math_log": math.log(3.3),
}))
"""


@pytest.mark.slow
def test_the_other_libm_is_faithful_and_other():
    """Under other-libm NumPy's inexact results are the other neighbour of the true
    value than glibc's nearest one, exact results stay exact, and nothing but NumPy
    is touched."""
    import mpmath

    env = {**os.environ, **portability.environment("other-libm")}
    result = subprocess.run(
        [sys.executable, "-c", OTHER_LIBM_PROBE], env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr[-2000:]
    got = json.loads(result.stdout)
    xs = np.linspace(0.05, 40.0, 4001).tolist()
    mpmath.mp.prec = 200
    other = 0
    for name in ("log", "exp", "log10"):
        for x, mine in zip(xs, got["numpy"][name], strict=True):
            true = getattr(mpmath, name)(mpmath.mpf(x))
            nearest = float(true)
            assert abs(mine - true) < np.spacing(abs(nearest)), (name, x)  # faithful
            other += mine != nearest
    assert other > 0.9 * 3 * len(xs)  # all but the results too close to call
    assert all(a != b for a, b in zip(got["pow"][1:], got["pow_glibc"][1:], strict=True))
    exact32 = (np.float32(10000) ** (-np.arange(64, dtype=np.float32) / 64)).astype(np.float64)
    assert np.all(np.abs(np.array(got["powf"]) - exact32) <= np.spacing(exact32.astype(np.float32)))
    assert got["exact"] == [4.0, 0.0, 2.0**-33, 2.0]
    assert got["math_log"] == math.log(3.3)  # CPython's math calls glibc on every CPU


@pytest.mark.slow
def test_other_libm_shows_a_digit_that_depends_on_the_math_library(tmp_path):
    """A last digit of np.log differs under other-libm; the same value to six digits,
    and glibc's own through Python's math, do not."""
    path = tmp_path / "01_libm.ipynb"
    cells = [
        new_markdown_cell("# L"),
        new_code_cell("import numpy as np\nprint(repr(float(np.log(3.3))))", id="last"),
        new_code_cell("import math\nprint(f'{np.log(3.3):.6f}', math.log(3.3))", id="stable"),
    ]
    nb = new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    nbformat.write(nb, path)
    outputs = {}
    for name in ("avx2", "other-libm"):
        executed = nbformat.reads(execute_notebooks.execute(path, cpu=name), as_version=4)
        outputs[name] = [cell.outputs[0]["text"] for cell in executed.cells[1:]]
    assert outputs["avx2"][0] != outputs["other-libm"][0]
    assert outputs["avx2"][1] == outputs["other-libm"][1]


def test_the_other_libm_is_built_from_its_source_once(tmp_path, monkeypatch):
    library = tmp_path / "other_libm.so"
    monkeypatch.setattr(portability, "OTHER_LIBM", library)
    assert portability.build_other_libm() == library and library.exists()
    built = library.stat().st_mtime_ns
    assert portability.build_other_libm() == library
    assert library.stat().st_mtime_ns == built  # up to date: not built again
    monkeypatch.setenv("CC", str(tmp_path / "no-such-compiler"))
    library.unlink()
    with pytest.raises(RuntimeError, match="needs a C compiler"):
        portability.build_other_libm()


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


def test_the_volatile_tag_is_read_as_nbval_reads_it():
    assert compare_outputs.is_volatile("x", ["hide-input", "nbval-ignore-output"])
    assert not compare_outputs.is_volatile("x", ["hide-input"])


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
