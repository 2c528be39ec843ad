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
    _refuse_tensor(name, value)
    array = np.asarray(value)
    if not np.issubdtype(array.dtype, np.floating):
        raise TypeError(f"{name} must be a floating-point array, got dtype {array.dtype}")
    if array.ndim < min_ndim:
        raise ValueError(
            f"{name} must have at least {min_ndim} dimensions, got shape {array.shape}"
        )
    return array


def is_torch_tensor(value) -> bool:
    """True for a torch tensor, without importing torch where it is not loaded."""
    return type(value).__module__.startswith("torch") and hasattr(value, "detach")


def floating_array_or_tensor(name: str, value, *, integers: bool = False) -> tuple[np.ndarray, str]:
    """Return ``value`` as a NumPy array, and the name of the dtype it came in.

    A torch tensor is accepted as it comes: on any device, with or without
    ``requires_grad``, in any float dtype. It is detached and copied to the CPU;
    bfloat16, which NumPy lacks, arrives as the float32 array of the same values and
    the name ``"bfloat16"``. Otherwise as :func:`floating_array` (integer arrays too
    when ``integers`` is true).
    """
    if is_torch_tensor(value):
        tensor = value.detach().to("cpu")
        dtype = str(tensor.dtype).removeprefix("torch.")
        if not (tensor.is_floating_point() or (integers and not tensor.is_complex())):
            raise TypeError(f"{name} must be a floating-point tensor, got dtype {tensor.dtype}")
        if dtype == "bool" and integers:
            raise TypeError(f"{name} must be numbers, got a boolean tensor")
        if dtype == "bfloat16":
            return tensor.float().numpy(), dtype
        return tensor.numpy(), dtype
    array = np.asarray(value)
    if integers and array.dtype.kind in "iu":
        return array, array.dtype.name
    array = floating_array(name, array)
    return array, array.dtype.name


def _refuse_tensor(name: str, value) -> None:
    """Raise a TypeError that points at posenc.torch when ``value`` is a torch tensor.

    The NumPy functions of the book compute in NumPy and return NumPy arrays; converting
    a tensor silently would drop its device and its gradient.
    """
    if is_torch_tensor(value):
        raise TypeError(
            f"{name} is a torch tensor ({value.dtype}, on {value.device}); this function "
            f"works on NumPy arrays and returns them: pass {name}.detach().cpu().numpy(), "
            f"or use posenc.torch (RotaryEmbedding, SinusoidalPositionalEncoding), which "
            f"keeps tensors, devices and gradients"
        )


def boolean_array(name: str, value) -> np.ndarray:
    """Return ``value`` as a boolean ndarray, or raise ``TypeError``."""
    _refuse_tensor(name, value)
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


def integer(name: str, value, *, minimum: int, maximum: int | None = None) -> int:
    """Return ``value`` as a Python int in ``[minimum, maximum]``, or raise.

    Python and NumPy integers are accepted; ``bool`` is refused even though it is
    an ``int`` subclass, and so are floats, even integral ones such as ``4.0``.
    """
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | np.integer):
        raise TypeError(f"{name} must be an integer, got {value!r} ({type(value).__name__})")
    value = int(value)
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be at most {maximum}, got {value}")
    return value


def integer_array(name: str, value, *, bound: int) -> np.ndarray:
    """Return ``value`` (an int or array-like of ints) as an int64 array, or raise.

    Every entry must lie in ``[-bound, bound]``. Booleans and floats are refused, as
    for :func:`integer`.
    """
    _refuse_tensor(name, value)
    try:
        array = np.asarray(value)
    except (TypeError, ValueError) as error:
        raise TypeError(f"{name} must be integers, got {value!r}") from error
    if array.dtype.kind not in "iu":
        raise TypeError(f"{name} must be integers, got {value!r} (dtype {array.dtype})")
    if array.size and (array.min() < -bound or array.max() > bound):
        raise ValueError(f"{name} must lie in [-{bound}, {bound}], got {value!r}")
    return array.astype(np.int64)


def positive_finite(name: str, value) -> float:
    """Return ``value`` as a float that is finite and > 0, or raise."""
    if isinstance(value, bool | np.bool_) or not isinstance(
        value, int | float | np.integer | np.floating
    ):
        raise TypeError(f"{name} must be a real number, got {value!r} ({type(value).__name__})")
    try:
        number = float(value)
    except OverflowError:
        number = float("inf")
    if not np.isfinite(number) or number <= 0:
        raise ValueError(f"{name} must be finite and > 0, got {value!r}")
    return number


def floating_dtype(name: str, value) -> np.dtype:
    """Return ``value`` as a floating NumPy dtype (float16, float32, float64, ...), or raise."""
    try:
        if value is None:  # np.dtype(None) would silently mean float64
            raise TypeError
        dtype = np.dtype(value)
    except TypeError as error:
        raise TypeError(f"{name} must be a floating-point dtype, got {value!r}") from error
    if not np.issubdtype(dtype, np.floating):
        raise TypeError(f"{name} must be a floating-point dtype, got {value!r} ({dtype})")
    return dtype


def flag(name: str, value) -> bool:
    """Return ``value`` if it is ``True`` or ``False``, or raise ``TypeError`` (no 0/1)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return value


def probability(name: str, value) -> float:
    """Return ``value`` as a float in ``[0, 1)`` (a dropout rate), or raise."""
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise TypeError(f"{name} must be a probability, got {value!r} ({type(value).__name__})")
    if not 0.0 <= value < 1.0:
        raise ValueError(f"{name} must lie in [0, 1), got {value!r}")
    return float(value)


def choice(name: str, value, options: tuple[str, ...]) -> str:
    """Return ``value`` if it is one of the strings ``options``, or raise."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be one of {options}, got {value!r} ({type(value).__name__})")
    if value not in options:
        raise ValueError(f"{name} must be one of {options}, got {value!r}")
    return value


def positions_or_start(start, positions, length: int, *, bound: int = 2**53) -> np.ndarray:
    """The position of each of ``length`` rows, as float64: ``start + r``, or ``positions``.

    ``start`` is an integer (negative allowed, for relative offsets); ``positions``, given
    instead of it, is 1-D with one finite entry per row, integers or fractions, a NumPy
    array, a list or a torch tensor. Giving both, or positions of another shape, raises.
    """
    if positions is None:
        start = integer("start", start, minimum=-bound, maximum=bound)
        if start + length > bound:
            raise ValueError(f"start + length must be at most 2**53, got {start} + {length}")
        return start + np.arange(length, dtype=np.float64)
    if isinstance(start, bool) or not isinstance(start, int | np.integer) or start != 0:
        raise ValueError(f"give start or positions, not both: got start={start!r} and positions")
    declared, _ = floating_array_or_tensor("positions", positions, integers=True)
    if declared.ndim != 1:
        raise ValueError(f"positions must be 1-D, one per row, got shape {declared.shape}")
    if declared.shape[0] != length:
        raise ValueError(
            f"positions must have one entry per row ({length}), got {declared.shape[0]}"
        )
    declared = declared.astype(np.float64)
    if not np.all(np.isfinite(declared)) or np.any(np.abs(declared) > bound):
        raise ValueError("positions must be finite and at most 2**53 in size")
    return declared
