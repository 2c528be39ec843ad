"""Exact reference values, computed with mpmath at 40 significant digits.

Tests and chapter 5 measure every implementation against these. Each value is
the exact formula rounded once to float64, so an error measured against it is
the implementation's own (to within half a float64 ulp).
"""

from __future__ import annotations

import mpmath
import numpy as np

from posenc.encoding import _arrange, table_spec

DIGITS = 40


def _context() -> mpmath.ctx_mp.MPContext:
    context = mpmath.MPContext()
    context.dps = DIGITS
    return context


def exact_frequencies(d_model, *, base=10000.0) -> np.ndarray:
    """``base**(-2i/d_model)`` for each pair i, correctly rounded to float64."""
    spec = table_spec(1, d_model, base=base, start=0, dtype=np.float64, layout="interleaved")
    mp = _context()
    return np.array(
        [
            float(mp.power(mp.mpf(spec.base), mp.mpf(-2 * i) / spec.d_model))
            for i in range((spec.d_model + 1) // 2)
        ],
        dtype=np.float64,
    )


def exact_sinusoidal(length, d_model, *, base=10000.0, start=0, layout="interleaved") -> np.ndarray:
    """The sinusoidal table with every entry exact, then rounded to float64.

    Same arguments as :func:`posenc.sinusoidal` (no ``dtype``: the result is float64).
    Costs some ten to twenty microseconds an entry: keep tables small.
    """
    spec = table_spec(length, d_model, base=base, start=start, dtype=np.float64, layout=layout)
    mp = _context()
    frequencies = [
        mp.power(mp.mpf(spec.base), mp.mpf(-2 * i) / spec.d_model)
        for i in range((spec.d_model + 1) // 2)
    ]
    table = np.empty((spec.length, spec.d_model), dtype=np.float64)
    for row in range(spec.length):
        pos = spec.start + row
        for i, frequency in enumerate(frequencies):
            angle = pos * frequency
            table[row, 2 * i] = float(mp.sin(angle))
            if 2 * i + 1 < spec.d_model:
                table[row, 2 * i + 1] = float(mp.cos(angle))
    return _arrange(table, spec.layout)
