"""The book's configuration keeps the verification promises the README makes."""

from __future__ import annotations

import re

import yaml

from conftest import ROOT

CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
TOC = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))


def test_execution_cannot_hide_an_error():
    execute = CONFIG["execute"]
    assert execute["allow_errors"] is False
    assert isinstance(execute["timeout"], int) and execute["timeout"] > 0
    assert execute["execute_notebooks"] in {"cache", "force"}
    assert CONFIG["sphinx"]["config"]["nb_execution_raise_on_error"] is True


def test_strict_build_flags():
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    build = re.search(r"^\s+\S*jupyter-book build (.*)$", makefile, re.M)
    assert build, "the Makefile does not build the book"
    for flag in ("-n", "-W", "--keep-going"):
        assert flag in build.group(1).split()


def test_launch_buttons_and_one_repository_url():
    url = CONFIG["repository"]["url"]
    assert url.startswith("https://github.com/")
    buttons = CONFIG["launch_buttons"]
    assert buttons["binderhub_url"] and buttons["colab_url"] and buttons["thebe"] is True
    for path in ("_toc.yml", "environment.yml", "Makefile"):
        assert url not in (ROOT / path).read_text(encoding="utf-8")


def test_references_math_and_fences():
    for bib in CONFIG["bibtex_bibfiles"]:
        assert (ROOT / bib).exists()
    extensions = set(CONFIG["parse"]["myst_enable_extensions"])
    assert {"dollarmath", "amsmath", "colon_fence"} <= extensions
    assert CONFIG["only_build_toc_files"] is True


def test_toc_has_captioned_parts_and_numbered_chapters():
    assert TOC["format"] == "jb-book"
    parts = TOC["parts"]
    assert parts and all(part.get("caption") for part in parts)
    chapters = [part for part in parts if any("notebooks/" in c["file"] for c in part["chapters"])]
    assert chapters and all(part.get("numbered") is True for part in chapters)
