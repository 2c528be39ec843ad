"""The book's pages in reading order, as ``_toc.yml`` lists them."""

from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def toc_entries(toc_file: Path = ROOT / "_toc.yml") -> list[str]:
    """The files _toc.yml lists (without suffix), root first, in reading order."""
    toc = yaml.safe_load(toc_file.read_text(encoding="utf-8"))
    return [toc["root"]] + [c["file"] for part in toc.get("parts", []) for c in part["chapters"]]
