"""Checkers that name the likely bug in a positional-encoding table (chapter 12).

- :func:`check_sinusoidal_table` (:mod:`posenc.checks.tables`): a sinusoidal table
  against the formula and the declared conventions;
- :func:`check_rope_cache` (:mod:`posenc.checks.rope`): a RoPE cos/sin cache against
  the angles ``p * theta_i``.

Both return ``[]`` for what was declared and one readable finding per problem
otherwise. The modules import downward only: ``tables`` and ``rope`` use
:mod:`posenc.checks.tolerances` (the rounding each format costs) and
:mod:`posenc.checks.positions` (positions read from phases, shifts named).
"""

from posenc.checks.rope import ALLOWANCES, PAIRINGS, check_rope_cache
from posenc.checks.tables import (
    FIRSTS,
    FIT_ROWS,
    FREQUENCY_MODELS,
    LONE_COLUMNS,
    MAX_TOLERANCE,
    PAIR_NORM,
    POSITION_MODELS,
    SAMPLE_ROWS,
    SPACINGS,
    Explanation,
    check_sinusoidal_table,
)
from posenc.checks.tolerances import ANGLE_ROUNDINGS, GROWTH, PRECISIONS, STORAGE

__all__ = [
    "ALLOWANCES",
    "ANGLE_ROUNDINGS",
    "FIRSTS",
    "FIT_ROWS",
    "FREQUENCY_MODELS",
    "GROWTH",
    "LONE_COLUMNS",
    "MAX_TOLERANCE",
    "PAIRINGS",
    "PAIR_NORM",
    "POSITION_MODELS",
    "PRECISIONS",
    "SAMPLE_ROWS",
    "SPACINGS",
    "STORAGE",
    "Explanation",
    "check_rope_cache",
    "check_sinusoidal_table",
]
