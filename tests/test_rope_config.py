"""posenc.rope_config: a Hugging Face model's RoPE configuration, read exactly.

Against transformers' own functions on tiny configs (nothing downloaded): its
``_compute_*_parameters`` (float32, hence rtol 1e-6 on the speeds) and its rotary
modules' per-length rule (``dynamic_rope_update``). Then small cases worked by hand
from the module docstring's formulas, and the bad inputs.
"""

from __future__ import annotations

import copy
import math
import subprocess
import sys

import numpy as np
import pytest

from posenc.rope_config import RopeParameters, inv_freq_at, rope_parameters

TINY = {
    "hidden_size": 64,
    "num_attention_heads": 4,
    "num_hidden_layers": 1,
    "intermediate_size": 64,
    "vocab_size": 32,
    "pad_token_id": 0,
    "bos_token_id": 1,
    "eos_token_id": 2,
}
LONG = {"original_max_position_embeddings": 64}


def _transformers():
    return pytest.importorskip("transformers")


def hf_config(model: str, rope: dict, **options):
    """A tiny config of transformers' ``model`` ("llama", "gpt_neox", "phi3")."""
    transformers = _transformers()
    cls = {
        "llama": transformers.LlamaConfig,
        "gpt_neox": transformers.GPTNeoXConfig,
        "phi3": transformers.Phi3Config,
    }[model]
    return cls(**{**TINY, "max_position_embeddings": 256, **options}, rope_parameters=dict(rope))


def hf_rotary(config):
    """The model's own rotary module for ``config``."""
    _transformers()
    from transformers.models.gpt_neox.modeling_gpt_neox import GPTNeoXRotaryEmbedding
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding
    from transformers.models.phi3.modeling_phi3 import Phi3RotaryEmbedding

    cls = {
        "llama": LlamaRotaryEmbedding,
        "gpt_neox": GPTNeoXRotaryEmbedding,
        "phi3": Phi3RotaryEmbedding,
    }[config.model_type]
    return cls(config)


def hf_parameters(config, seq_len=None) -> tuple[np.ndarray, float]:
    """(inv_freq, attention factor) from transformers' init function for the config."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    rope_type = config.rope_parameters["rope_type"]
    if rope_type == "default":  # each model defines its own default
        inv_freq, factor = type(hf_rotary(config)).compute_default_rope_parameters(config)
    else:
        inv_freq, factor = ROPE_INIT_FUNCTIONS[rope_type](config, "cpu", seq_len=seq_len)
    return inv_freq.double().numpy(), factor


YARN = {"rope_type": "yarn", "factor": 8.0, **LONG}
CASES = {
    # name: (model, rope_parameters, other config fields)
    "default": ("llama", {"rope_type": "default"}, {}),
    "default, head_dim given": ("llama", {"rope_type": "default"}, {"head_dim": 32}),
    "default, theta 5e5": ("llama", {"rope_type": "default", "rope_theta": 5e5}, {}),
    "default, partial 0.25": (
        "gpt_neox",
        {"rope_type": "default", "partial_rotary_factor": 0.25},
        {"hidden_size": 256},
    ),
    "linear": ("llama", {"rope_type": "linear", "factor": 4.0}, {}),
    "linear, partial 0.5": (
        "gpt_neox",
        {"rope_type": "linear", "factor": 2.0, "partial_rotary_factor": 0.5},
        {},
    ),
    "dynamic": ("llama", {"rope_type": "dynamic", "factor": 2.0}, {}),
    "yarn": ("llama", YARN, {}),
    "yarn, head_dim given": ("llama", {**YARN, "factor": 4.0}, {"head_dim": 32}),
    "yarn, mscale": ("llama", {**YARN, "mscale": 0.707, "mscale_all_dim": 1.0}, {}),
    "yarn, mscale alone": ("llama", {**YARN, "mscale": 0.707}, {}),
    "yarn, attention_factor": ("llama", {**YARN, "attention_factor": 0.9}, {}),
    "yarn, truncate=False": ("llama", {**YARN, "truncate": False}, {}),
    "yarn, betas": ("llama", {**YARN, "beta_fast": 16.0, "beta_slow": 2.0}, {}),
    "yarn, factor None": ("llama", {**YARN, "factor": None}, {}),
    "yarn, partial 0.5": ("gpt_neox", {**YARN, "partial_rotary_factor": 0.5}, {}),
    "llama3": (
        "llama",
        {
            "rope_type": "llama3",
            "rope_theta": 5e5,
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            **LONG,
        },
        {"hidden_size": 128},
    ),
    "longrope": (
        "phi3",
        {
            "rope_type": "longrope",
            "short_factor": [1.0, 1.25, 1.5, 2.0] * 2,
            "long_factor": [4.0] * 8,
        },
        LONG,
    ),
    "longrope, factor and attention_factor": (
        "phi3",
        {
            "rope_type": "longrope",
            "short_factor": [1.0] * 8,
            "long_factor": [2.0, 3.0] * 4,
            "factor": 2.0,
            "attention_factor": 1.1,
        },
        LONG,
    ),
    "longrope, partial 0.5": (
        "phi3",
        {"rope_type": "longrope", "short_factor": [1.5] * 4, "long_factor": [3.0] * 4},
        {**LONG, "partial_rotary_factor": 0.5},
    ),
}


@pytest.mark.parametrize("name", CASES)
def test_speeds_and_attention_factor_are_transformers_own(name):
    model, rope, options = CASES[name]
    config = hf_config(model, rope, **options)
    ours = rope_parameters(config)
    expected, factor = hf_parameters(config)
    np.testing.assert_allclose(ours.inv_freq, expected, rtol=1e-6, atol=0)
    assert ours.attention_factor == pytest.approx(factor, rel=1e-6)
    assert ours.rope_type == config.rope_parameters["rope_type"]
    assert ours.rotary_dim == 2 * expected.size
    # the model's rotary module starts from the same speeds and scale
    module = hf_rotary(config)
    np.testing.assert_allclose(ours.inv_freq, module.inv_freq.double(), rtol=1e-6, atol=0)
    assert ours.attention_factor == pytest.approx(module.attention_scaling, rel=1e-6)
    # the config object, its to_dict() and its rope_parameters with head_dim agree
    assert rope_parameters(config.to_dict()) == ours
    alone = {**config.rope_parameters, "max_position_embeddings": 256}
    assert rope_parameters(alone, head_dim=ours.head_dim) == ours


def test_the_head_dim_read_is_the_config_s_or_derived():
    assert rope_parameters(hf_config("llama", {"rope_type": "default"})).head_dim == 16
    assert rope_parameters(hf_config("llama", {}, head_dim=32)).rotary_dim == 32
    neox = rope_parameters(hf_config("gpt_neox", {"partial_rotary_factor": 0.25}))
    assert (neox.head_dim, neox.rotary_dim) == (16, 4)


def test_the_legacy_rope_scaling_with_type_is_read_as_transformers_reads_it():
    transformers = _transformers()
    legacy = {"type": "linear", "factor": 2.0}
    config = transformers.LlamaConfig(**TINY, rope_scaling=dict(legacy), rope_theta=5e5)
    expected, _ = hf_parameters(config)
    for source in (config, {**TINY, "rope_scaling": legacy, "rope_theta": 5e5}):
        ours = rope_parameters(source)
        assert (ours.rope_type, ours.base) == ("linear", 5e5)
        np.testing.assert_allclose(ours.inv_freq, expected, rtol=1e-6, atol=0)


def test_a_top_level_original_length_wins_as_in_phi3():
    transformers = _transformers()
    rope = {"rope_type": "longrope", "short_factor": [1.0] * 8, "long_factor": [2.0] * 8}
    stored = hf_config("phi3", rope, **LONG).to_dict()
    stored["rope_parameters"]["original_max_position_embeddings"] = 128  # overruled
    ours = rope_parameters(stored)
    config = transformers.Phi3Config.from_dict(copy.deepcopy(stored))  # it edits the dict
    assert ours.switch_length == 64 == config.rope_parameters["original_max_position_embeddings"]
    assert ours.attention_factor == pytest.approx(hf_parameters(config)[1], rel=1e-12)


def test_the_caller_s_dicts_are_left_as_they_were():
    rope = {"type": "yarn", "factor": 4.0}
    whole = {**TINY, "max_position_embeddings": 256, "rope_parameters": rope}
    rope_parameters(whole)
    assert rope == {"type": "yarn", "factor": 4.0}


@pytest.mark.parametrize(
    ("model", "rope", "options", "lengths"),
    [
        ("llama", {"rope_type": "dynamic", "factor": 2.0}, {}, (1, 255, 256, 257, 300, 1000)),
        (
            "gpt_neox",
            {"rope_type": "dynamic", "factor": 3.0, "partial_rotary_factor": 0.5},
            {},
            (256, 257, 2000),
        ),
        (
            "phi3",
            {"rope_type": "longrope", "short_factor": [1.0, 1.5] * 4, "long_factor": [3.0] * 8},
            LONG,
            (1, 64, 65, 256, 300),
        ),
    ],
)
def test_per_length_speeds_follow_transformers_update_rule(model, rope, options, lengths):
    torch = pytest.importorskip("torch")
    config = hf_config(model, rope, **options)
    ours = rope_parameters(config)
    switched = []
    for length in lengths:
        module = hf_rotary(config)  # a fresh module: no longer call seen before
        x = torch.zeros(1, length, 8)
        module(x, torch.arange(length)[None])
        expected = module.inv_freq.double().numpy()
        at_length = inv_freq_at(ours, length)
        np.testing.assert_allclose(at_length, expected, rtol=1e-6, atol=0)
        assert ours.attention_factor == pytest.approx(module.attention_scaling, rel=1e-6)
        np.testing.assert_allclose(
            at_length, hf_parameters(config, seq_len=length)[0], rtol=1e-6, atol=0
        )
        switched.append(not np.array_equal(at_length, ours.inv_freq))
    # the switch is where transformers puts it: past max_position_embeddings for
    # dynamic NTK, past original_max_position_embeddings for longrope
    assert switched == [length > ours.switch_length for length in lengths]


# ---- worked by hand from the module docstring's formulas, no transformers needed ----


def test_default_linear_and_dynamic_by_hand():
    rope = {"rope_theta": 100.0}
    default = rope_parameters({**rope, "rope_type": "default"}, head_dim=4)
    np.testing.assert_allclose(default.inv_freq, [1.0, 0.1], rtol=1e-15)  # 100^(-2i/4)
    linear = rope_parameters({**rope, "rope_type": "linear", "factor": 4}, head_dim=4)
    np.testing.assert_allclose(linear.inv_freq, [0.25, 0.025], rtol=1e-15)
    dynamic = rope_parameters(
        {**rope, "rope_type": "dynamic", "factor": 2, "max_position_embeddings": 10}, head_dim=4
    )
    assert (dynamic.switch_length, dynamic.dynamic_factor) == (10, 2.0)
    np.testing.assert_allclose(inv_freq_at(dynamic, 10), [1.0, 0.1], rtol=1e-15)
    # n = 20: base 100 · (2 · 20 / 10 - 1)^(4 / 2) = 900, so θ_1 = 900^(-1/2) = 1/30
    np.testing.assert_allclose(inv_freq_at(dynamic, 20), [1.0, 1 / 30], rtol=1e-14)
    for params in (default, linear, dynamic):
        assert params.attention_factor == 1.0
        assert inv_freq_at(params, 5) is params.inv_freq


# r = 8, base 256, L = 1000: θ = 4^(-i) = 1, 1/4, 1/16, 1/64; d(k) = 0.5 log2(L / (2π k)),
# d(32) = 1.157 -> floor 1 and d(1) = 3.657 -> ceil 4, so ramp = (i - 1) / 3 = 0, 0, 1/3, 2/3
# and, with s = 4, θ (1 - ramp) + θ / 4 · ramp = 1, 1/4, 3/64, 1/128.
YARN_BY_HAND = {"rope_type": "yarn", "rope_theta": 256.0, "factor": 4.0, **LONG}
YARN_BY_HAND["original_max_position_embeddings"] = 1000


def test_yarn_by_hand():
    yarn = rope_parameters(YARN_BY_HAND, head_dim=8)
    np.testing.assert_allclose(yarn.inv_freq, [1.0, 0.25, 3 / 64, 1 / 128], rtol=1e-15)
    assert yarn.attention_factor == pytest.approx(0.1 * math.log(4) + 1, rel=1e-15)  # 1.1386
    both = rope_parameters({**YARN_BY_HAND, "mscale": 2.0, "mscale_all_dim": 1.0}, head_dim=8)
    # (0.1 · 2 ln 4 + 1) / (0.1 · 1 ln 4 + 1)
    assert both.attention_factor == pytest.approx(1.121751143713058, rel=1e-14)
    np.testing.assert_array_equal(both.inv_freq, yarn.inv_freq)
    given = rope_parameters({**YARN_BY_HAND, "attention_factor": 0.5}, head_dim=8)
    assert given.attention_factor == 0.5
    # truncate=False: low = d(32), high = d(1) unrounded, ramp = (i - low) / (high - low)
    low, high = 0.5 * math.log2(1000 / (64 * math.pi)), 0.5 * math.log2(1000 / (2 * math.pi))
    ramp = np.clip((np.arange(4) - low) / (high - low), 0, 1)
    theta = 4.0 ** -np.arange(4)
    smooth = rope_parameters({**YARN_BY_HAND, "truncate": False}, head_dim=8)
    np.testing.assert_allclose(smooth.inv_freq, theta * (1 - ramp) + theta / 4 * ramp, rtol=1e-14)
    assert not np.allclose(smooth.inv_freq, yarn.inv_freq, rtol=1e-3)  # unrounded bounds


def test_llama3_by_hand():
    # r = 8, base 16^4: θ = 16^(-i); wavelengths 2π 16^i = 6.3, 100, 1608, 25736 against
    # L / high = 1000 and L / low = 4000: kept, kept, blended, divided by s = 8.
    params = {"rope_type": "llama3", "rope_theta": 16.0**4, "factor": 8.0}
    params.update(low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=4000)
    llama3 = rope_parameters(params, head_dim=8)
    b = (4000 / (2 * math.pi * 256) - 1) / 3  # 0.4956
    expected = [1.0, 1 / 16, (1 - b) / 256 / 8 + b / 256, 1 / 4096 / 8]
    np.testing.assert_allclose(llama3.inv_freq, expected, rtol=1e-14)
    assert llama3.attention_factor == 1.0


def test_longrope_by_hand():
    params = {"rope_type": "longrope", "rope_theta": 100.0, "short_factor": [1, 2]}
    params.update(long_factor=[2, 4], original_max_position_embeddings=10)
    longrope = rope_parameters({**params, "max_position_embeddings": 40}, head_dim=4)
    np.testing.assert_allclose(longrope.inv_freq, [1.0, 0.05], rtol=1e-15)  # θ / short
    np.testing.assert_allclose(longrope.long_inv_freq, [0.5, 0.025], rtol=1e-15)
    assert inv_freq_at(longrope, 10) is longrope.inv_freq
    assert inv_freq_at(longrope, 11) is longrope.long_inv_freq
    # s = 40 / 10 = 4: sqrt(1 + ln 4 / ln 10)
    assert longrope.attention_factor == pytest.approx(1.2657250852092496, rel=1e-14)
    assert rope_parameters({**params, "factor": 1}, head_dim=4).attention_factor == 1.0
    with pytest.raises(ValueError, match="needs max_position_embeddings"):
        rope_parameters(params, head_dim=4)  # no factor and no M to divide by L


def test_arrays_are_read_only_and_equality_compares_values():
    params = rope_parameters({"rope_type": "default"}, head_dim=8)
    with pytest.raises(ValueError, match="read-only"):
        params.inv_freq[0] = 2.0
    assert params == rope_parameters({"rope_theta": 10000}, head_dim=8)
    assert params != rope_parameters({"rope_theta": 10001}, head_dim=8)


def test_the_module_does_not_import_transformers():
    code = (
        "import sys, posenc.rope_config as r; "
        "r.rope_parameters({'rope_type': 'default'}, head_dim=8); "
        "assert 'transformers' not in sys.modules and 'torch' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# ---- bad input names the field and its value ----

LIN = {"rope_type": "linear", "factor": 2.0}
DYN = {"rope_type": "dynamic", "factor": 2.0, "max_position_embeddings": 64}
YRN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}
L3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0}
L3["original_max_position_embeddings"] = 64
LR = {"rope_type": "longrope", "short_factor": [1.0] * 4, "long_factor": [2.0] * 4}
LR["original_max_position_embeddings"] = 64
WHOLE = {"hidden_size": 64, "num_attention_heads": 4, "max_position_embeddings": 256}


@pytest.mark.parametrize(
    ("config", "head_dim", "error", "pattern"),
    [
        ({"rope_type": "ntk"}, 8, ValueError, r"rope_type.*'ntk'"),
        ({"rope_type": "proportional"}, 8, ValueError, r"rope_type.*'proportional'"),
        ({"rope_type": "linear"}, 8, ValueError, r"rope_parameters\['factor'\].*missing"),
        ({**LIN, "factor": 0.5}, 8, ValueError, r"'factor'.*>= 1, got 0\.5"),
        ({**LIN, "factor": "2"}, 8, TypeError, r"'factor'.*'2'"),
        ({**LIN, "factor": float("nan")}, 8, ValueError, r"'factor'.*nan"),
        ({**DYN, "factor": 0.9}, 8, ValueError, r"'factor'.*0\.9"),
        (
            {k: v for k, v in DYN.items() if k != "max_position_embeddings"},
            8,
            ValueError,
            "max_position_embeddings",
        ),
        ({**DYN, "max_position_embeddings": 0}, 8, ValueError, r"max_position_embeddings.*0"),
        (DYN, 2, ValueError, r"rotary_dim=2"),
        ({**YRN, "factor": 0.5}, 8, ValueError, r"'factor'.*0\.5"),
        ({"rope_type": "yarn", "factor": 4.0}, 8, ValueError, "original_max_position_embeddings"),
        ({"rope_type": "yarn", **LONG}, 8, ValueError, r"'factor'.*missing"),
        ({**YRN, "factor": None}, 8, ValueError, "max_position_embeddings"),
        ({**YRN, "original_max_position_embeddings": 64.5}, 8, TypeError, r"original_max.*64\.5"),
        ({**YRN, "beta_fast": 1.0, "beta_slow": 2.0}, 8, ValueError, r"beta_fast.*beta_slow=2"),
        ({**YRN, "beta_fast": -3.0}, 8, ValueError, r"'beta_fast'.*-3"),
        ({**YRN, "truncate": "no"}, 8, TypeError, r"'truncate'.*'no'"),
        ({**YRN, "attention_factor": -1.0}, 8, ValueError, r"'attention_factor'.*-1"),
        ({**YRN, "mscale": -1.0, "mscale_all_dim": 1.0}, 8, ValueError, r"'mscale'.*-1"),
        ({**L3, "factor": 0.5}, 8, ValueError, r"'factor'.*0\.5"),
        (
            {k: v for k, v in L3.items() if k != "low_freq_factor"},
            8,
            ValueError,
            r"'low_freq_factor'.*missing",
        ),
        ({**L3, "high_freq_factor": 1.0}, 8, ValueError, r"high_freq_factor.*high_freq_factor=1"),
        ({**L3, "low_freq_factor": 0.0}, 8, ValueError, r"'low_freq_factor'.*> 0, got 0"),
        (
            {k: v for k, v in LR.items() if k != "long_factor"},
            8,
            ValueError,
            r"'long_factor'.*missing",
        ),
        ({**LR, "short_factor": [1.0] * 3}, 8, ValueError, r"'short_factor'.*= 4, got 3"),
        ({**LR, "long_factor": [2.0] * 5}, 8, ValueError, r"'long_factor'.*= 4, got 5"),
        ({**LR, "short_factor": [1.0, 0.0, 1.0, 1.0]}, 8, ValueError, r"'short_factor'.*got 0"),
        ({**LR, "long_factor": 2.0}, 8, TypeError, r"'long_factor'.*list.*2\.0"),
        ({**LR, "factor": 0.5}, 8, ValueError, r"'factor'.*0\.5"),
        ({**LR, "attention_factor": 0}, 8, ValueError, r"'attention_factor'.*got 0"),
        ({"partial_rotary_factor": 0.5}, 6, ValueError, r"rotary_dim.*int\(6 \* 0\.5\) = 3"),
        ({"partial_rotary_factor": 0.25}, 2, ValueError, r"rotary_dim.*= 0 must be even"),
        ({}, 7, ValueError, r"rotary_dim.*= 7 must be even"),
        ({"partial_rotary_factor": 1.5}, 8, ValueError, r"partial_rotary_factor.*1\.5"),
        ({"partial_rotary_factor": 0}, 8, ValueError, r"partial_rotary_factor.*> 0, got 0"),
        ({"rope_theta": -1.0}, 8, ValueError, r"rope_theta.*-1"),
        ({"rope_theta": "1e4"}, 8, TypeError, r"rope_theta.*'1e4'"),
        ({"rope_type": "default"}, None, ValueError, "head_dim is needed"),
        ({"rope_type": "default"}, 0, ValueError, r"head_dim.*0"),
        ({"rope_type": "default"}, 8.0, TypeError, r"head_dim.*8\.0"),
        ({**WHOLE, "num_attention_heads": 0}, None, ValueError, r"num_attention_heads.*0"),
        ({**WHOLE, "rope_parameters": [1]}, None, TypeError, r"rope_parameters.*\[1\]"),
        ({"full_attention": {}, "sliding_attention": {}}, 8, ValueError, "per layer type"),
        ("llama", None, TypeError, "config must be a transformers config.*str"),
    ],
)
def test_bad_input_names_the_field_and_value(config, head_dim, error, pattern):
    with pytest.raises(error, match=pattern):
        rope_parameters(config, head_dim)


def test_a_whole_config_dict_is_checked_as_a_bare_one_is():
    with pytest.raises(ValueError, match=r"'factor'.*0\.5"):
        rope_parameters({**WHOLE, "rope_parameters": {**LIN, "factor": 0.5}})
    with pytest.raises(ValueError, match=r"'short_factor'.*= 8, got 4"):
        rope_parameters({**WHOLE, "rope_parameters": LR})  # head_dim 16: 8 pairs


@pytest.mark.parametrize(
    ("seq_len", "error", "pattern"),
    [
        (-1, ValueError, r"seq_len.*-1"),
        (1.5, TypeError, r"seq_len.*1\.5"),
        (True, TypeError, "seq_len"),
    ],
)
def test_inv_freq_at_refuses_bad_lengths(seq_len, error, pattern):
    with pytest.raises(error, match=pattern):
        inv_freq_at(rope_parameters(DYN, head_dim=8), seq_len)
    with pytest.raises(TypeError, match="params must be a RopeParameters, got dict"):
        inv_freq_at(DYN, 10)


@pytest.mark.parametrize(
    ("changes", "pattern"),
    [
        ({"inv_freq": np.ones(3)}, r"inv_freq must be 2 finite.*\(3,\)"),
        ({"rotary_dim": 3}, r"rotary_dim must be even.*got 3"),
        ({"rope_type": "ntk"}, r"rope_type.*'ntk'"),
        ({"switch_length": 8}, r"switch_length.*8.*'default'"),
        ({"dynamic_factor": 2.0}, r"dynamic_factor.*'dynamic'.*2\.0"),
        ({"attention_factor": 0.0}, r"attention_factor.*0\.0"),
    ],
)
def test_hand_built_parameters_are_checked(changes, pattern):
    fields = {"rope_type": "default", "head_dim": 4, "rotary_dim": 4, "base": 100.0}
    fields.update(inv_freq=[1.0, 0.1], attention_factor=1.0)
    RopeParameters(**fields)
    with pytest.raises(ValueError, match=pattern):
        RopeParameters(**{**fields, **changes})
