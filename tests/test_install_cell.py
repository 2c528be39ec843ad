"""Every chapter opens with the cell that installs posenc where it is missing (Colab)."""

from __future__ import annotations

import subprocess
import sys

import nbformat
import pytest
from tools import install_cell

from conftest import NOTEBOOKS, ROOT


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_chapter_installs_posenc_from_the_configured_repository(path):
    nb = nbformat.read(path, as_version=4)
    assert install_cell.problems(nb, install_cell.repository_url()) == []


def test_the_address_is_the_one_in_config():
    url = install_cell.repository_url(ROOT / "_config.yml")
    assert url.startswith("https://") and f'"git+{url}"' in install_cell.cell_source(url)


def test_a_stale_or_missing_cell_is_found_and_rewritten():
    nb = nbformat.read(NOTEBOOKS[0], as_version=4)
    assert install_cell.problems(nb, "https://example.org/a-fork") != []
    install_cell.write(nb, "https://example.org/a-fork")
    assert install_cell.problems(nb, "https://example.org/a-fork") == []

    bare = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_markdown_cell("# T"), nbformat.v4.new_code_cell("x = 1")]
    )
    assert install_cell.problems(bare, "https://example.org/r") == [
        "the first code cell is not the install cell"
    ]
    install_cell.write(bare, "https://example.org/r")
    assert [c.get("id") for c in bare.cells][1] == install_cell.CELL_ID
    assert install_cell.problems(bare, "https://example.org/r") == []
    bare.cells[1].metadata["tags"] = []
    assert install_cell.problems(bare, "https://example.org/r") == [
        f"the install cell is not tagged {install_cell.TAG}"
    ]


def _run_cell(url: str, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *flags, "-c", install_cell.cell_source(url)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_the_cell_is_silent_where_posenc_imports():
    done = _run_cell("https://example.org/never-contacted")
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_a_failed_install_names_the_package_and_the_address(tmp_path):
    """-S hides site-packages, so posenc is missing; the address does not exist."""
    address = (tmp_path / "no-such-repository").as_uri()
    done = _run_cell(address, "-S")
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()
    message = next(line for line in last if line.startswith("ModuleNotFoundError"))
    assert "posenc is not installed" in message and f"git+{address}" in message
