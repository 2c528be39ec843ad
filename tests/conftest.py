"""Shared paths for the test suite."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))

# The maintenance scripts in tools/ are importable from the tests.
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
