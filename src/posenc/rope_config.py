"""A Hugging Face model's RoPE configuration, read into exact float64 frequencies.

:func:`rope_parameters` reads what a transformers config says about rotary position
embedding (``rope_parameters``, or the older ``rope_scaling`` with ``rope_theta``,
plus ``partial_rotary_factor``, ``head_dim``, ``max_position_embeddings`` and
``original_max_position_embeddings``) and returns a :class:`RopeParameters`: the
rotation speed of every pair and the factor on cos and sin, as the ``_compute_*``
functions of ``transformers.modeling_rope_utils`` (transformers 5.23) define them,
but evaluated in float64 (transformers evaluates them in float32). With
θ_i = base^(-2i/r), i = 0 .. r/2 - 1, r = rotary_dim = int(head_dim ·
partial_rotary_factor), L the original (pre-training) length and s the factor:

- ``"default"``: θ_i.
- ``"linear"``: θ_i / s.
- ``"dynamic"`` (dynamic NTK): θ_i while the length n <= max_position_embeddings = M;
  past it the base grows to base · (s n / M - (s - 1))^(r / (r - 2)).
- ``"yarn"``: the pair index that turns k times within L is
  d(k) = r ln(L / (2π k)) / (2 ln base); low = d(beta_fast), high = d(beta_slow)
  (floor and ceil when ``truncate``, the default), clamped to [0, r - 1]
  (high += 0.001 if they meet); ramp_i = clip((i - low) / (high - low), 0, 1) and the
  speed is θ_i (1 - ramp_i) + (θ_i / s) ramp_i. cos and sin are multiplied by
  ``attention_factor`` if given, else m(s, mscale) / m(s, mscale_all_dim) when both
  are given (and non-zero), else m(s, 1), with m(s, μ) = 0.1 μ ln s + 1 (1 for s <= 1).
  A missing (None) factor is M / L.
- ``"llama3"``: θ_i for wavelengths 2π/θ_i below L / high_freq_factor, θ_i / s above
  L / low_freq_factor, and in between (1 - b) θ_i / s + b θ_i with
  b = (L / wavelength - low_freq_factor) / (high_freq_factor - low_freq_factor).
- ``"longrope"``: θ_i / short_factor_i, and θ_i / long_factor_i once the length
  exceeds L; cos and sin are multiplied by ``attention_factor`` if given, else by
  sqrt(1 + ln s / ln L) with s = ``factor`` or M / L (1 when s <= 1).

The "length" of a call is its largest position plus one, as transformers'
``dynamic_rope_update`` reads it; :func:`inv_freq_at` gives the speeds for a length.
This module needs NumPy only: it reads a transformers config by its attributes and
never imports transformers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields

import numpy as np

from posenc._validation import flag, integer, positive_finite
from posenc.alternatives import rope_frequencies
from posenc.long_context import scaled_frequencies

__all__ = ["ROPE_TYPES", "RopeParameters", "inv_freq_at", "rope_parameters"]

ROPE_TYPES = ("default", "linear", "dynamic", "yarn", "llama3", "longrope")
"""The ``rope_type`` values :func:`rope_parameters` reads (transformers' names)."""

DEFAULT_THETA = 10_000.0  # transformers' RotaryEmbeddingConfigMixin.default_theta
_WITH_ORIGINAL_LENGTH = ("yarn", "llama3", "longrope")  # as standardize_rope_params
_CONFIG_KEYS = ("rope_parameters", "rope_scaling", "hidden_size", "num_attention_heads")


@dataclass(frozen=True, eq=False)
class RopeParameters:
    """One model's RoPE, read by :func:`rope_parameters`; arrays are float64, read-only.

    ``inv_freq`` (rotary_dim // 2,) are the speeds at short lengths (longrope: the
    short factors; dynamic: the unscaled speeds). ``attention_factor`` multiplies cos
    and sin. ``long_inv_freq`` (longrope) replaces ``inv_freq`` once a call's length
    exceeds ``switch_length``; for dynamic NTK, ``switch_length`` is
    max_position_embeddings, past which the base grows with ``dynamic_factor``
    (:func:`inv_freq_at`).
    """

    rope_type: str
    head_dim: int
    rotary_dim: int
    base: float
    inv_freq: np.ndarray
    attention_factor: float
    long_inv_freq: np.ndarray | None = None
    switch_length: int | None = None
    dynamic_factor: float | None = None

    def __post_init__(self):
        if self.rope_type not in ROPE_TYPES:
            raise ValueError(f"rope_type must be one of {ROPE_TYPES}, got {self.rope_type!r}")
        head_dim = integer("head_dim", self.head_dim, minimum=1)
        rotary_dim = integer("rotary_dim", self.rotary_dim, minimum=2, maximum=head_dim)
        if rotary_dim % 2:
            raise ValueError(f"rotary_dim must be even (RoPE rotates pairs), got {rotary_dim}")
        positive_finite("base", self.base)
        positive_finite("attention_factor", self.attention_factor)
        for name in ("inv_freq", "long_inv_freq"):
            value = getattr(self, name)
            if value is None:
                continue
            array = np.array(value, dtype=np.float64)  # a copy the caller cannot change
            if array.shape != (rotary_dim // 2,) or not np.all(np.isfinite(array)):
                raise ValueError(
                    f"{name} must be {rotary_dim // 2} finite numbers (rotary_dim // 2), "
                    f"got shape {array.shape}"
                )
            array.flags.writeable = False
            object.__setattr__(self, name, array)
        length_dependent = {"dynamic": "dynamic_factor", "longrope": "long_inv_freq"}
        for rope_type, needed in length_dependent.items():
            given = getattr(self, needed) is not None
            if given != (self.rope_type == rope_type):
                raise ValueError(
                    f"{needed} belongs to rope_type {rope_type!r} and to it alone, got "
                    f"{needed}={getattr(self, needed)!r} for rope_type {self.rope_type!r}"
                )
        if (self.switch_length is not None) != (self.rope_type in length_dependent):
            raise ValueError(
                f"switch_length is set for rope_type 'dynamic' and 'longrope' only, got "
                f"switch_length={self.switch_length!r} for rope_type {self.rope_type!r}"
            )
        if self.switch_length is not None:
            integer("switch_length", self.switch_length, minimum=1)

    def __eq__(self, other):
        if not isinstance(other, RopeParameters):
            return NotImplemented
        for field in fields(self):
            mine, theirs = getattr(self, field.name), getattr(other, field.name)
            if isinstance(mine, np.ndarray) or isinstance(theirs, np.ndarray):
                if mine is None or theirs is None or not np.array_equal(mine, theirs):
                    return False
            elif mine != theirs:
                return False
        return True


def _field(rope_type: str, name: str) -> str:
    return f"rope_parameters[{name!r}] (rope_type {rope_type!r})"


def _real(rope_type: str, name: str, value, *, at_least: float | None = None) -> float:
    """A finite real number (bool refused), at least ``at_least`` if given, > 0 if not."""
    where = _field(rope_type, name)
    if isinstance(value, bool | np.bool_) or not isinstance(
        value, int | float | np.integer | np.floating
    ):
        raise TypeError(f"{where} must be a real number, got {value!r}")
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"{where} must be finite, got {value!r}")
    if at_least is not None and number < at_least:
        raise ValueError(f"{where} must be >= {at_least:g}, got {value!r}")
    if at_least is None and number <= 0:
        raise ValueError(f"{where} must be > 0, got {value!r}")
    return number


def _length(name: str, value) -> int:
    try:
        return integer(name, value, minimum=1)
    except TypeError as error:
        raise TypeError(f"{name} must be a whole number of positions, got {value!r}") from error


def _max_positions(model: dict, rope_type: str, why: str) -> int:
    """The config's max_position_embeddings, which ``rope_type`` needs ``why``."""
    value = model.get("max_position_embeddings")
    if value is None:
        raise ValueError(
            f"rope_type {rope_type!r} needs max_position_embeddings ({why}): give the whole "
            f"config, or add the key to the rope_parameters dict"
        )
    return _length("max_position_embeddings", value)


def _required(params: dict, rope_type: str, name: str):
    if name not in params:
        raise ValueError(
            f"rope_type {rope_type!r} needs rope_parameters[{name!r}], which is missing "
            f"(got keys {sorted(params)})"
        )
    return params[name]


def _factors(params: dict, rope_type: str, name: str, pairs: int, theta: np.ndarray):
    """θ_i / factor_i for longrope's per-pair list ``name`` (one positive number a pair)."""
    values = _required(params, rope_type, name)
    where = _field(rope_type, name)
    if isinstance(values, str | bytes | Mapping) or not hasattr(values, "__len__"):
        raise TypeError(f"{where} must be a list of numbers, got {values!r}")
    for value in values:
        _real(rope_type, name, value)
    if len(values) != pairs:
        raise ValueError(
            f"{where} must have one entry per rotated pair, rotary_dim // 2 = {pairs}, "
            f"got {len(values)}"
        )
    return theta / np.asarray(values, dtype=np.float64)


def _read(config) -> tuple[dict, dict]:
    """(rope parameters, model fields) from a config object, its to_dict(), or the
    rope_parameters dict alone; copies, never the caller's dicts."""
    if isinstance(config, Mapping):
        if any(key in config for key in _CONFIG_KEYS):
            model = dict(config)
        else:  # the rope_parameters dict alone
            model = {"max_position_embeddings": config.get("max_position_embeddings")}
            return dict(config), model
    elif any(hasattr(config, key) for key in (*_CONFIG_KEYS, "rope_theta")):
        names = (
            "rope_parameters",
            "rope_scaling",
            "rope_theta",
            "partial_rotary_factor",
            "head_dim",
            "hidden_size",
            "num_attention_heads",
            "max_position_embeddings",
            "original_max_position_embeddings",
        )
        model = {name: getattr(config, name) for name in names if hasattr(config, name)}
    else:
        raise TypeError(
            f"config must be a transformers config, its to_dict() or its rope_parameters "
            f"dict, got {type(config).__name__}"
        )
    # convert_rope_params_to_dict: a legacy rope_scaling takes the place of rope_parameters
    params = model.get("rope_scaling") or model.get("rope_parameters") or {}
    if not isinstance(params, Mapping):
        raise TypeError(f"rope_parameters must be a dict, got {params!r}")
    return dict(params), model


def _standardize(params: dict, model: dict) -> dict:
    """transformers' standardize_rope_params, on our copy: rope_type (or the legacy
    "type"), rope_theta and partial_rotary_factor, original_max_position_embeddings."""
    nested = [key for key, value in params.items() if isinstance(value, Mapping)]
    if nested:
        raise ValueError(
            f"rope_parameters is given per layer type ({nested}); pass one of them, "
            f"config.rope_parameters[layer_type], with head_dim"
        )
    params.setdefault("rope_type", params.get("type", "default"))
    if params.get("rope_theta") is None:
        theta = model.get("rope_theta")
        params["rope_theta"] = DEFAULT_THETA if theta is None else theta
    if params.get("partial_rotary_factor") is None:
        params["partial_rotary_factor"] = model.get("partial_rotary_factor")
    if params["rope_type"] in _WITH_ORIGINAL_LENGTH:
        if model.get("original_max_position_embeddings") is not None:
            # Phi-3 keeps it next to rope_parameters, and there it takes priority
            params["original_max_position_embeddings"] = model["original_max_position_embeddings"]
        elif model.get("max_position_embeddings") is not None:
            params.setdefault("original_max_position_embeddings", model["max_position_embeddings"])
    return params


def _head_dim(model: dict, head_dim) -> int:
    if head_dim is not None:
        return integer("head_dim", head_dim, minimum=1)
    if model.get("head_dim"):
        return integer("head_dim", model["head_dim"], minimum=1)
    hidden, heads = model.get("hidden_size"), model.get("num_attention_heads")
    if hidden is None or heads is None:
        raise ValueError(
            "head_dim is needed: the config gives neither head_dim nor hidden_size and "
            "num_attention_heads (pass head_dim=... with a rope_parameters dict)"
        )
    return integer("hidden_size", hidden, minimum=1) // integer(
        "num_attention_heads", heads, minimum=1
    )


def _rotary_dim(head_dim: int, partial_rotary_factor, rope_type: str) -> int:
    fraction = 1.0
    if partial_rotary_factor is not None:
        fraction = _real(rope_type, "partial_rotary_factor", partial_rotary_factor)
        if fraction > 1:
            raise ValueError(
                f"{_field(rope_type, 'partial_rotary_factor')} must lie in (0, 1], got "
                f"{partial_rotary_factor!r}"
            )
    rotary_dim = int(head_dim * fraction)
    if rotary_dim < 2 or rotary_dim % 2:
        raise ValueError(
            f"rotary_dim = int(head_dim * partial_rotary_factor) = int({head_dim} * "
            f"{fraction:g}) = {rotary_dim} must be even and at least 2 (RoPE rotates pairs)"
        )
    return rotary_dim


def _mscale(factor: float, mscale: float) -> float:
    """YaRN's m(s, μ) = 0.1 μ ln s + 1, and 1 for s <= 1 (transformers' get_mscale)."""
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


def _yarn(params: dict, theta: np.ndarray, rotary_dim: int, base: float, model: dict):
    """YaRN's speeds and attention factor, as transformers' _compute_yarn_parameters."""
    rope_type = "yarn"
    original = _length(
        _field(rope_type, "original_max_position_embeddings"),
        _required(params, rope_type, "original_max_position_embeddings"),
    )
    factor = _required(params, rope_type, "factor")
    if factor is None:  # DeepSeek-V3 style: the ratio of the two lengths
        factor = _max_positions(model, rope_type, "factor None means its ratio") / original
    factor = _real(rope_type, "factor", factor, at_least=1)
    # beta_fast / beta_slow: None or 0 take the defaults 32 / 1, as transformers' `or`
    beta_fast = _real(rope_type, "beta_fast", params.get("beta_fast") or 32)
    beta_slow = _real(rope_type, "beta_slow", params.get("beta_slow") or 1)
    if beta_fast < beta_slow:
        raise ValueError(
            f"{_field(rope_type, 'beta_fast')} must be >= beta_slow, got beta_fast="
            f"{beta_fast:g} and beta_slow={beta_slow:g}"
        )
    truncate = params.get("truncate", True)
    flag(_field(rope_type, "truncate"), truncate)

    def pair_index(rotations: float) -> float:  # the pair that turns `rotations` times in L
        return rotary_dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = pair_index(beta_fast), pair_index(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, rotary_dim - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(rotary_dim // 2, dtype=np.float64) - low) / (high - low), 0, 1)
    inv_freq = theta * (1 - ramp) + (theta / factor) * ramp

    attention_factor = params.get("attention_factor")
    if attention_factor is not None:
        return inv_freq, _real(rope_type, "attention_factor", attention_factor)
    mscale, mscale_all_dim = params.get("mscale"), params.get("mscale_all_dim")
    for name, value in (("mscale", mscale), ("mscale_all_dim", mscale_all_dim)):
        if value is not None:
            _real(rope_type, name, value, at_least=0)
    if mscale and mscale_all_dim:
        return inv_freq, _mscale(factor, mscale) / _mscale(factor, mscale_all_dim)
    return inv_freq, _mscale(factor, 1.0)


def _longrope(params: dict, theta: np.ndarray, rotary_dim: int, model: dict):
    """(short speeds, long speeds, attention factor, original length) for longrope."""
    rope_type = "longrope"
    original = _length(
        _field(rope_type, "original_max_position_embeddings"),
        _required(params, rope_type, "original_max_position_embeddings"),
    )
    pairs = rotary_dim // 2
    short = _factors(params, rope_type, "short_factor", pairs, theta)
    long = _factors(params, rope_type, "long_factor", pairs, theta)
    attention_factor = params.get("attention_factor")
    if attention_factor is not None:
        return short, long, _real(rope_type, "attention_factor", attention_factor), original
    factor = params.get("factor")
    if factor is None:  # Phi-3: the ratio of the two lengths
        factor = _max_positions(model, rope_type, "no factor means its ratio") / original
    else:
        factor = _real(rope_type, "factor", factor, at_least=1)
    if factor <= 1:
        return short, long, 1.0, original
    if original < 2:
        raise ValueError(
            f"{_field(rope_type, 'original_max_position_embeddings')} must be at least 2 for "
            f"the default attention factor sqrt(1 + ln s / ln L), got {original}"
        )
    return short, long, math.sqrt(1 + math.log(factor) / math.log(original)), original


def rope_parameters(config, head_dim=None) -> RopeParameters:
    """The RoPE of a Hugging Face model, as transformers 5.23 computes it, in float64.

    ``config`` is a transformers config object (``.rope_parameters``, or the older
    ``.rope_scaling`` with ``.rope_theta``; ``.partial_rotary_factor``; ``.head_dim`` or
    ``hidden_size // num_attention_heads``; ``.max_position_embeddings``;
    ``.original_max_position_embeddings``), its ``to_dict()``, or the rope_parameters
    dict alone (then ``head_dim`` is required, and a dynamic or a factor-less yarn or
    longrope entry needs a ``"max_position_embeddings"`` key). ``head_dim``, when given,
    takes the place of the config's. The legacy key ``"type"`` is read for
    ``"rope_type"``, as transformers reads it. See the module docstring for the formulas.

    Raises ``ValueError`` (``TypeError`` for the wrong kind) naming the field and its
    value: an unknown rope_type; a missing required field (linear, dynamic: factor;
    yarn: factor, original_max_position_embeddings; llama3: factor, low_freq_factor,
    high_freq_factor, original_max_position_embeddings; longrope: short_factor,
    long_factor, original_max_position_embeddings); a factor < 1 or
    high_freq_factor <= low_freq_factor or beta_fast < beta_slow (transformers' own
    validation flags these); a rotary_dim that is odd or 0 (dynamic: 2, whose exponent
    r / (r - 2) divides by zero); a long or short factor list of the wrong length.
    """
    params, model = _read(config)
    params = _standardize(params, model)
    rope_type = params["rope_type"]
    if rope_type not in ROPE_TYPES:
        raise ValueError(
            f"rope_parameters['rope_type'] must be one of {ROPE_TYPES}, got {rope_type!r}"
        )
    head_dim = _head_dim(model, head_dim)
    rotary_dim = _rotary_dim(head_dim, params["partial_rotary_factor"], rope_type)
    base = positive_finite("rope_parameters['rope_theta']", params["rope_theta"])
    theta = rope_frequencies(rotary_dim, base=base)
    common = {"rope_type": rope_type, "head_dim": head_dim, "rotary_dim": rotary_dim, "base": base}

    if rope_type == "default":
        return RopeParameters(**common, inv_freq=theta, attention_factor=1.0)
    if rope_type == "linear":
        factor = _real(rope_type, "factor", _required(params, rope_type, "factor"), at_least=1)
        return RopeParameters(**common, inv_freq=theta / factor, attention_factor=1.0)
    if rope_type == "dynamic":
        factor = _real(rope_type, "factor", _required(params, rope_type, "factor"), at_least=1)
        limit = _max_positions(model, rope_type, "the length past which the base grows")
        if rotary_dim == 2:
            raise ValueError(
                "rope_type 'dynamic' needs rotary_dim > 2 (its exponent r / (r - 2)), got "
                "rotary_dim=2"
            )
        return RopeParameters(
            **common,
            inv_freq=theta,
            attention_factor=1.0,
            switch_length=limit,
            dynamic_factor=factor,
        )
    if rope_type == "yarn":
        inv_freq, attention_factor = _yarn(params, theta, rotary_dim, base, model)
        return RopeParameters(**common, inv_freq=inv_freq, attention_factor=attention_factor)
    if rope_type == "llama3":
        factor = _real(rope_type, "factor", _required(params, rope_type, "factor"), at_least=1)
        low = _real(rope_type, "low_freq_factor", _required(params, rope_type, "low_freq_factor"))
        high = _real(
            rope_type, "high_freq_factor", _required(params, rope_type, "high_freq_factor")
        )
        if high <= low:
            raise ValueError(
                f"{_field(rope_type, 'high_freq_factor')} must be greater than low_freq_factor, "
                f"got high_freq_factor={high:g} and low_freq_factor={low:g}"
            )
        original = _length(
            _field(rope_type, "original_max_position_embeddings"),
            _required(params, rope_type, "original_max_position_embeddings"),
        )
        inv_freq, _ = scaled_frequencies(
            rotary_dim,
            base=base,
            method="llama3",
            factor=factor,
            original_length=original,
            low_freq_factor=low,
            high_freq_factor=high,
        )
        return RopeParameters(**common, inv_freq=inv_freq, attention_factor=1.0)
    short, long, attention_factor, original = _longrope(params, theta, rotary_dim, model)
    return RopeParameters(
        **common,
        inv_freq=short,
        attention_factor=attention_factor,
        long_inv_freq=long,
        switch_length=original,
    )


def inv_freq_at(params: RopeParameters, seq_len: int) -> np.ndarray:
    """float64 speeds for a call whose largest position is ``seq_len - 1``.

    Dynamic NTK: the unscaled speeds up to ``switch_length`` (max_position_embeddings
    M), then those of the base grown to base · (s n / M - (s - 1))^(r / (r - 2)) for
    n = seq_len. Longrope: the long factors' speeds once seq_len exceeds
    ``switch_length`` (the original length). ``params.inv_freq`` for every other type.
    This is the rule of transformers' ``dynamic_rope_update`` for a module that has not
    seen a longer call before (transformers keeps a grown dynamic base until a call
    shorter than M resets it).
    """
    if not isinstance(params, RopeParameters):
        raise TypeError(f"params must be a RopeParameters, got {type(params).__name__}")
    seq_len = integer("seq_len", seq_len, minimum=0)
    if params.switch_length is None or seq_len <= params.switch_length:
        return params.inv_freq
    if params.long_inv_freq is not None:
        return params.long_inv_freq
    grown, _ = scaled_frequencies(
        params.rotary_dim,
        base=params.base,
        method="dynamic_ntk",
        factor=params.dynamic_factor,
        original_length=params.switch_length,
        seq_len=seq_len,
    )
    grown.flags.writeable = False
    return grown
