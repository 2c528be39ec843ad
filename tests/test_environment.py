"""One lock, used by the venv and by environment.yml, and the environment matches it."""

from __future__ import annotations

import re
import tomllib
from importlib import metadata

import pytest
import yaml
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

from conftest import ROOT

PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;]+)$")


def read_lock(path=ROOT / "requirements.txt") -> dict[str, str]:
    pins: dict[str, str] = {}
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = PIN.match(line)
        assert match, f"requirements.txt:{number}: {line!r} is not an exact pin name==version"
        name = canonicalize_name(match.group(1))
        assert name not in pins, f"requirements.txt pins {name} twice"
        pins[name] = match.group(2)
    return pins


def requirement_lines(path) -> list[Requirement]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return [Requirement(line) for line in lines if line.strip() and not line.startswith("#")]


def top_level_requirements() -> list[Requirement]:
    return requirement_lines(ROOT / "requirements.in")


def torch_pin() -> Requirement:
    """The one line of requirements-torch.txt: torch==VERSION, nothing looser."""
    (requirement,) = requirement_lines(ROOT / "requirements-torch.txt")
    assert canonicalize_name(requirement.name) == "torch"
    (specifier,) = requirement.specifier
    assert specifier.operator == "==" and "+" not in specifier.version, (
        f"{requirement}: pin torch to one public version; the CPU wheel adds '+cpu' itself"
    )
    return requirement


@pytest.fixture(scope="module")
def lock():
    return read_lock()


def test_lock_satisfies_every_top_level_requirement(lock):
    for requirement in top_level_requirements():
        name = canonicalize_name(requirement.name)
        assert name in lock, f"{name} (requirements.in) is missing from the lock"
        assert requirement.specifier.contains(lock[name], prereleases=True), (
            f"lock pins {name}=={lock[name]}, outside {requirement.specifier}"
        )


def test_jupyter_book_is_the_sphinx_based_1x_line(lock):
    major = int(lock["jupyter-book"].split(".")[0])
    assert major == 1, f"jupyter-book {lock['jupyter-book']}: the book needs the 1.x line"


def test_lock_is_closed_under_dependencies(lock):
    """Every dependency of a locked package, or of torch (for this platform), is locked too."""
    environment = default_environment()
    for name in [*lock, "torch"]:
        for spec in metadata.requires(name) or []:
            requirement = Requirement(spec)
            if requirement.marker and not requirement.marker.evaluate({**environment, "extra": ""}):
                continue
            dependency = canonicalize_name(requirement.name)
            assert dependency in lock, f"{name} needs {dependency}, which the lock omits"
            assert requirement.specifier.contains(lock[dependency], prereleases=True)


def test_the_running_environment_is_the_lock(lock):
    for name, version in lock.items():
        installed = metadata.version(name)
        assert installed == version, f"{name} {installed} is installed, the lock says {version}"


def test_torch_is_the_pinned_cpu_build_and_stays_out_of_the_lock(lock):
    requirement = torch_pin()
    assert "torch" not in lock, "torch belongs in requirements-torch.txt, not in the lock"
    installed = metadata.version("torch")
    assert requirement.specifier.contains(installed), f"torch {installed} is not {requirement}"
    assert installed.endswith("+cpu"), f"torch {installed} is not the CPU build"
    cuda = [d for d in metadata.distributions() if d.metadata["Name"].startswith("nvidia-")]
    assert not cuda, f"CUDA packages are installed: {[d.metadata['Name'] for d in cuda]}"


def test_environment_yml_uses_the_same_lock(lock):
    env = yaml.safe_load((ROOT / "environment.yml").read_text(encoding="utf-8"))
    assert env["channels"] == ["conda-forge"]
    conda_packages = [d for d in env["dependencies"] if isinstance(d, str)]
    pip_sections = [d["pip"] for d in env["dependencies"] if isinstance(d, dict)]
    assert "python=3.11" in conda_packages
    assert "pip" in conda_packages
    (torch_range,) = [p for p in conda_packages if p.startswith("pytorch-cpu")]
    assert torch_range == f"pytorch-cpu{BINDER_TORCH}", "Binder asks conda-forge for a range"
    assert pip_sections == [["-r requirements.txt", "-e ."]]
    for package in conda_packages:
        name = canonicalize_name(re.split(r"[=<>! ]", package)[0])
        assert name in {"python", "pip", "pytorch-cpu"} or name not in lock, (
            f"{name} is pinned both by conda and by the pip lock: they can drift"
        )


# conda-forge's pytorch-cpu lags PyPI's torch: an exact pin it lacks breaks Binder. The
# chapters need torch 2.x (pyproject's torch extra), and the venv's pin lies inside.
BINDER_TORCH = ">=2.1,<3"
NEWEST_ON_CONDA_FORGE_WHEN_CHECKED = "2.12.1"


def test_binders_torch_range_admits_the_venvs_pin_and_what_conda_forge_has():
    binder = SpecifierSet(BINDER_TORCH)
    (pinned,) = (s.version for s in torch_pin().specifier)
    assert binder.contains(pinned), f"the venv's torch {pinned} is outside Binder's {binder}"
    assert binder.contains(NEWEST_ON_CONDA_FORGE_WHEN_CHECKED)
    assert not binder.contains("3.0") and not binder.contains("1.13")
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    extra = [Requirement(r) for r in pyproject["project"]["optional-dependencies"]["torch"]]
    (torch_extra,) = [r for r in extra if r.name == "torch"]
    assert str(torch_extra.specifier) == ">=2.1" and binder.contains("2.1")


def test_makefile_installs_the_lock_and_ci_runs_make_test():
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert "pip install --quiet --disable-pip-version-check -r requirements.txt" in makefile
    assert "-r requirements-torch.txt" in makefile
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    commands = [
        line.strip()
        for line in ci.splitlines()
        if line.strip() and not line.startswith(("#", "set ", "cd "))
    ]
    *setup, test = commands
    assert test == "make test", "CI runs the README's test command last"
    # Before it, only the browser the browser tests drive, installed when missing.
    assert all(
        line.startswith("command -v chromium") and "apt-get install" in line for line in setup
    ), setup


def test_the_lock_reader_refuses_loose_pins(tmp_path):
    loose = tmp_path / "requirements.txt"
    loose.write_text("numpy>=2\n", encoding="utf-8")
    with pytest.raises(AssertionError, match="not an exact pin"):
        read_lock(loose)
