"""Argument checks shared by the public functions.

Every public function rejects bad input at once with a message that names the
argument and its value (or shape): ``TypeError`` for the wrong kind of thing,
``ValueError`` for a value or shape out of range.
"""

from __future__ import annotations

import numpy as np


def floating_array(name: str, value, *, min_ndim: int = 0) -> np.ndarray:
    """Return ``value`` as an ndarray of a floating dtype, or raise.

    Integer, boolean, complex and object arrays are refused (``TypeError``):
    the library never guesses a precision for the caller.
    """
    array = np.asarray(value)
    if not np.issubdtype(array.dtype, np.floating):
        raise TypeError(f"{name} must be a floating-point array, got dtype {array.dtype}")
    if array.ndim < min_ndim:
        raise ValueError(
            f"{name} must have at least {min_ndim} dimensions, got shape {array.shape}"
        )
    return array


def boolean_array(name: str, value) -> np.ndarray:
    """Return ``value`` as a boolean ndarray, or raise ``TypeError``."""
    array = np.asarray(value)
    if array.dtype != np.bool_:
        raise TypeError(f"{name} must be a boolean array, got dtype {array.dtype}")
    return array


def broadcasts_into(small: tuple[int, ...], large: tuple[int, ...]) -> bool:
    """True when an array of shape ``small`` broadcasts to ``large`` without growing it."""
    if len(small) > len(large):
        return False
    for s, l in zip(reversed(small), reversed(large), strict=False):
        if s not in (1, l):
            return False
    return True
