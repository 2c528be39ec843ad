"""RotaryEmbedding as a drop-in for Hugging Face models' own RoPE.

Tiny models are built from configs with random weights (nothing is downloaded); their
rotary module is swapped for this library's, and the logits must not change beyond what
float32 angles cost. transformers computes its angles in float32, so at positions below
about 100 its cos and sin differ from the exact ones by a few 1e-6; the logits of these
one- or two-layer models then differ by less than 1e-4.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from posenc.rotary import RotaryEmbedding

transformers = pytest.importorskip("transformers")
from transformers.models.gptj import modeling_gptj  # noqa: E402
from transformers.models.llama import modeling_llama  # noqa: E402

TINY = {
    "hidden_size": 64,
    "num_attention_heads": 4,
    "num_hidden_layers": 2,
    "intermediate_size": 96,
    "vocab_size": 50,
    "pad_token_id": 0,
    "bos_token_id": 1,
    "eos_token_id": 2,
    # weights ten times the default spread: attention far from uniform, so that the
    # logits depend on the positions (with 0.02 a wrong base moves them by 3e-3 only)
    "initializer_range": 0.2,
}
LOGITS_ATOL = 1e-4

SHORT = [1.0, 1.25, 1.5, 2.0] * 2
CASES = {
    # name: (config class, rope_parameters, other config fields, sequence length)
    "default": ("LlamaConfig", {"rope_type": "default"}, {}, 24),
    "linear": ("LlamaConfig", {"rope_type": "linear", "factor": 4.0}, {}, 24),
    # dynamic NTK past its switch (max_position_embeddings 16): the base grows
    "dynamic": ("LlamaConfig", {"rope_type": "dynamic", "factor": 2.0}, {}, 24),
    "yarn": (
        "LlamaConfig",
        {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8},
        {},
        24,
    ),
    "yarn, mscale and mscale_all_dim": (
        "LlamaConfig",
        {
            "rope_type": "yarn",
            "factor": 4.0,
            "original_max_position_embeddings": 8,
            "mscale": 0.707,
            "mscale_all_dim": 1.0,
        },
        {},
        24,
    ),
    "yarn, attention_factor, truncate=False": (
        "LlamaConfig",
        {
            "rope_type": "yarn",
            "factor": 4.0,
            "original_max_position_embeddings": 8,
            "attention_factor": 0.9,
            "truncate": False,
        },
        {},
        24,
    ),
    "llama3": (
        "LlamaConfig",
        {
            "rope_type": "llama3",
            "rope_theta": 5e5,
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8,
        },
        {},
        24,
    ),
    "qwen2, theta 1e6, grouped keys": (
        "Qwen2Config",
        {"rope_type": "default", "rope_theta": 1e6},
        {"num_key_value_heads": 2},
        24,
    ),
    "gpt-neox, partial rotary 0.25": (
        "GPTNeoXConfig",
        {"rope_type": "default", "partial_rotary_factor": 0.25},
        {"hidden_size": 128},
        24,
    ),
    # longrope below and above its switch (original_max_position_embeddings 16)
    "longrope, short": (
        "Phi3Config",
        {"rope_type": "longrope", "short_factor": SHORT, "long_factor": [4.0] * 8},
        {"original_max_position_embeddings": 16},
        12,
    ),
    "longrope, long": (
        "Phi3Config",
        {"rope_type": "longrope", "short_factor": SHORT, "long_factor": [4.0] * 8},
        {"original_max_position_embeddings": 16},
        24,
    ),
}


def tiny_model(name: str):
    """A tiny model of the case's architecture, random weights, seed 0, in eval mode."""
    config_class, rope, fields, _ = CASES[name]
    config_type = getattr(transformers, config_class)
    options = {**TINY, "max_position_embeddings": 16, **fields}
    config = config_type(**options, rope_parameters={"rope_theta": 10000.0, **rope})
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    return model, config


class HuggingFaceRotary(nn.Module):
    """The shim: what a transformers rotary module returns, from RotaryEmbedding."""

    def __init__(self, rope: RotaryEmbedding):
        super().__init__()
        self.rope = rope

    def forward(self, x, position_ids, *args, **kwargs):
        return self.rope.cos_sin(position_ids, x.dtype, x.device, hf_format=True)


def swap_rotary(model, config) -> int:
    """Replace every rotary module of the model by the shim; return how many."""
    swapped = 0
    for name, _ in list(model.named_modules()):
        if name.endswith("rotary_emb"):
            parent = model.get_submodule(name.rsplit(".", 1)[0])
            parent.rotary_emb = HuggingFaceRotary(RotaryEmbedding.from_config(config))
            swapped += 1
    return swapped


def batch(length: int, size: int = 2) -> torch.Tensor:
    return torch.randint(3, TINY["vocab_size"], (size, length), generator=torch.Generator())


@pytest.mark.parametrize("name", CASES)
def test_logits_match_the_model_s_own_rotary(name):
    model, config = tiny_model(name)
    tokens = batch(CASES[name][3])
    with torch.no_grad():
        want = model(tokens).logits
        assert swap_rotary(model, config) >= 1
        got = model(tokens).logits
    assert (got - want).abs().max() <= LOGITS_ATOL


def test_the_logits_check_sees_a_wrong_rotary():
    # The check above can fail: base 1e4 read where the model has 1e6 is caught.
    model, _ = tiny_model("qwen2, theta 1e6, grouped keys")
    tokens = batch(24)
    with torch.no_grad():
        want = model(tokens).logits
        model.model.rotary_emb = HuggingFaceRotary(RotaryEmbedding(16, base=1e4))
        got = model(tokens).logits
    assert (got - want).abs().max() > 100 * LOGITS_ATOL


def test_generate_with_a_kv_cache_and_left_padding_gives_the_same_tokens():
    model, config = tiny_model("default")
    tokens = batch(10, size=3)
    mask = torch.ones_like(tokens)
    tokens[0, :4], mask[0, :4] = 0, 0  # left padding: positions start late for row 0
    options = {"max_new_tokens": 12, "do_sample": False, "attention_mask": mask}
    with torch.no_grad():
        want = model.generate(tokens, **options)
        swap_rotary(model, config)
        got = model.generate(tokens, **options)
    assert torch.equal(got, want)


@pytest.mark.parametrize("name", ["default", "dynamic", "yarn", "llama3", "longrope, long"])
@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
def test_apply_matches_apply_rotary_pos_emb(name, layout):
    model, config = tiny_model(name)
    rotary = next(m for n, m in model.named_modules() if n.endswith("rotary_emb"))
    length = CASES[name][3]
    q, k = torch.randn(2, 4, length, 16), torch.randn(2, 2, length, 16)
    position_ids = torch.stack((torch.arange(length), torch.arange(3, 3 + length)))
    with torch.no_grad():
        cos, sin = rotary(q, position_ids)
        want_q, want_k = modeling_llama.apply_rotary_pos_emb(q, k, cos, sin)
    ours = RotaryEmbedding.from_config(config, layout=layout)
    if layout == "bshd":
        got_q, got_k = ours.apply(q.transpose(1, 2), k.transpose(1, 2), position_ids)
        got_q, got_k = got_q.transpose(1, 2), got_k.transpose(1, 2)
    else:
        got_q, got_k = ours.apply(q, k, position_ids)
    # float32 angles at positions below 30: a few 1e-6 on entries of size about 4
    torch.testing.assert_close(got_q, want_q, rtol=0, atol=1e-4)
    torch.testing.assert_close(got_k, want_k, rtol=0, atol=1e-4)


def test_gpt_j_interleaved_partial_rotary_in_its_own_layout():
    # GPT-J rotates (x_2i, x_2i+1) of the first rotary_dim features, in (batch, seq,
    # heads, head_dim): pairing="interleaved", layout="bshd".
    config = transformers.GPTJConfig(
        vocab_size=50, n_positions=32, n_embd=64, n_layer=2, n_head=4, rotary_dim=8
    )
    torch.manual_seed(0)
    model = transformers.GPTJForCausalLM(config).eval()
    tokens = batch(20)
    ours = RotaryEmbedding(16, rotary_dim=8, pairing="interleaved", layout="bshd")
    x = torch.randn(2, 20, 4, 16)
    positions = torch.stack((torch.arange(20), torch.arange(5, 25)))
    table = modeling_gptj.create_sinusoidal_positions(32, 8)[positions]
    sin, cos = table.split(4, dim=-1)
    want = torch.cat((modeling_gptj.apply_rotary_pos_emb(x[..., :8], sin, cos), x[..., 8:]), -1)
    torch.testing.assert_close(ours(x, positions), want, rtol=0, atol=1e-5)
    # and in the model: its sin/cos table replaced by this library's
    with torch.no_grad():
        reference = model(tokens).logits
        cos, sin = ours.cos_sin(torch.arange(32), torch.float32)
        for block in model.transformer.h:
            block.attn.embed_positions = torch.cat((sin, cos), dim=-1)
        got = model(tokens).logits
    assert (got - reference).abs().max() <= LOGITS_ATOL
