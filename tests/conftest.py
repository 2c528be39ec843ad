"""Shared paths for the test suite."""

from __future__ import annotations

import sys
from pathlib import Path

import yaml
from hypothesis import settings

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))

# The maintenance scripts in tools/ are importable from the tests.
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def toc_entries() -> list[str]:
    """The files _toc.yml lists (without suffix), root first, in reading order."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    return [toc["root"]] + [c["file"] for part in toc.get("parts", []) for c in part["chapters"]]


# Property-based tests explore the same examples on every run, so a CI result
# can be reproduced, and they write no example database into the clone.
settings.register_profile("book", derandomize=True, deadline=None, database=None)
settings.load_profile("book")
