"""Chapter 25's facts about transformers' model code, kept out of the reader's path.

The chapter draws which layers of Command A rotate and the speeds of partial rotary;
these tests pin both to transformers' own code (nothing is downloaded: small random
models and default configurations only).
"""

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
tf = pytest.importorskip("transformers")

from posenc.rotary import RotaryEmbedding  # noqa: E402


def _cohere2_layers_that_move():
    """Run each layer of a small random Command A model alone at two position sets."""
    torch.manual_seed(0)
    small = tf.Cohere2Config(
        vocab_size=50,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=4,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=16,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
    )
    model = tf.Cohere2Model(small).eval()
    x = torch.randn(1, 8, 32)
    causal = torch.full((8, 8), -math.inf).triu(1)[None, None]
    # uneven gaps: one constant shift would change no RoPE score
    uneven = torch.tensor([0, 3, 4, 9, 10, 20, 21, 30])
    outputs = []
    with torch.no_grad():
        for pos in (torch.arange(8), uneven):
            cos_sin = model.rotary_emb(x, pos[None])
            outputs.append([layer.self_attn(x, cos_sin, causal)[0] for layer in model.layers])
    moved = [not torch.equal(a, b) for a, b in zip(*outputs, strict=True)]
    return small.layer_types, moved


def test_command_a_rotates_only_in_its_sliding_window_layers():
    layer_types, moved = _cohere2_layers_that_move()
    assert "full_attention" in layer_types and "sliding_attention" in layer_types
    assert moved == [t == "sliding_attention" for t in layer_types]


def test_command_a_configuration_has_no_rope_flag_per_layer():
    # the chapter applies the model code's rule because the configuration lists none
    assert getattr(tf.Cohere2Config(), "no_rope_layers", None) is None


def test_llama4_no_rope_layers_flag_is_one_where_the_layer_rotates():
    cfg = tf.Llama4TextConfig()
    assert cfg.no_rope_layers[:8] == [1, 1, 1, 0, 1, 1, 1, 0]
    assert (cfg.attn_temperature_tuning, cfg.floor_scale, cfg.attn_scale) == (True, 8192, 0.1)


@pytest.mark.parametrize(
    ("config", "module", "theta", "factor"),
    [
        ("Glm4MoeConfig", "glm4_moe.modeling_glm4_moe.Glm4MoeRotaryEmbedding", 1e6, 0.5),
        ("Qwen3NextConfig", "qwen3_next.modeling_qwen3_next.Qwen3NextRotaryEmbedding", 1e7, 0.25),
    ],
)
def test_partial_rotary_speeds_match_transformers(config, module, theta, factor):
    import importlib

    path, name = module.rsplit(".", 1)
    hf_rotary = getattr(importlib.import_module(f"transformers.models.{path}"), name)
    params = {"rope_type": "default", "rope_theta": theta, "partial_rotary_factor": factor}
    cfg = getattr(tf, config)(head_dim=128, rope_parameters=params)
    r = int(cfg.head_dim * factor)
    ours = RotaryEmbedding(cfg.head_dim, rotary_dim=r, base=theta).frequencies
    theirs = hf_rotary.compute_default_rope_parameters(cfg)[0].double().numpy()
    assert len(ours) == r // 2
    np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=0)


def _qk_logit_range(normalise):
    """Largest |logit| of Qwen3-style heads, and the chapter's cap G sqrt(d)."""
    from posenc.alternatives import rope

    torch.manual_seed(0)
    d = tf.Qwen3Config().head_dim
    norms = [tf.models.qwen3.modeling_qwen3.Qwen3RMSNorm(d) for _ in range(2)]
    with torch.no_grad():
        for norm in norms:  # learned gains, away from 1
            norm.weight.uniform_(0.5, 2.0)
        q, k = (10 * torch.randn(64, d) for _ in range(2))
        if normalise:
            q, k = norms[0](q), norms[1](k)
        gain = float(norms[0].weight.abs().max() * norms[1].weight.abs().max())
    q, k = rope(q.numpy().astype(np.float64)), rope(k.numpy().astype(np.float64))
    return np.abs(q @ k.T / math.sqrt(d)).max(), gain * math.sqrt(d)


def test_qk_norm_caps_the_logits():
    largest, cap = _qk_logit_range(normalise=True)
    assert largest <= cap * (1 + 1e-5)  # so no margin exceeds 2 G sqrt(d)
    largest, cap = _qk_logit_range(normalise=False)
    assert largest > cap  # without the norm nothing caps them


def test_mla_cache_widths_from_the_configurations():
    for cfg in (tf.DeepseekV3Config(), tf.DeepseekV32Config()):
        per_layer = cfg.kv_lora_rank + cfg.qk_rope_head_dim
        assert (per_layer, cfg.num_hidden_layers) == (576, 61)
        assert per_layer * cfg.num_hidden_layers == 35136  # per token, all layers


def test_llama4_qk_norm_has_no_gains_and_only_rope_layers_use_it():
    from transformers.models.llama4 import modeling_llama4 as m

    assert list(m.Llama4TextL2Norm().parameters()) == []  # G = 1 exactly
    cfg = tf.Llama4TextConfig(
        hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16
    )
    assert cfg.use_qk_norm
    for layer, rotates in enumerate(cfg.no_rope_layers[:4]):
        attention = m.Llama4TextAttention(cfg, layer)
        assert hasattr(attention, "qk_norm") == bool(rotates)
    x = torch.randn(3, 16, dtype=torch.float64)
    lengths = m.Llama4TextL2Norm(0.0)(x).norm(dim=-1)
    assert torch.allclose(lengths, torch.full((3,), 4.0, dtype=torch.float64))  # sqrt(d)


def test_absorbed_cache_designs_of_deepseek_v4_and_gemma4():
    import inspect

    from transformers.models.deepseek_v4 import modeling_deepseek_v4 as v4
    from transformers.models.gemma4 import modeling_gemma4 as g4

    cfg = tf.DeepseekV4Config()
    assert (cfg.head_dim, cfg.qk_rope_head_dim, cfg.num_key_value_heads) == (512, 64, 1)
    code = inspect.getsource(v4.DeepseekV4Attention.forward)
    assert "cos, -sin" in code  # the output's rotated slice is rotated back
    code = inspect.getsource(g4.Gemma4TextAttention)
    assert "attention_k_eq_v and not self.is_sliding" in code
    assert "if self.v_proj is not None else key_states" in code


def _mla_scores_and_outputs(rotate_rebuilt_keys=False, seed=0):
    """Explicit MLA (keys rebuilt per head) and absorbed MLA (one shared cached key)."""
    from posenc.alternatives import rope

    rng = np.random.default_rng(seed)
    n, d_model, d_c, d_h, d_r, heads = 10, 24, 6, 8, 4, 3

    def mat(*shape):
        return rng.normal(size=shape) / math.sqrt(shape[-1])

    def attend(scores, values):
        scores = np.where(np.tri(n, dtype=bool), scores, -np.inf)
        w = np.exp(scores - scores.max(-1, keepdims=True))
        return w / w.sum(-1, keepdims=True) @ values

    h = rng.normal(size=(n, d_model))
    c = h @ mat(d_c, d_model).T
    k_r = rope(h @ mat(d_r, d_model).T)
    w_uk, w_uv = mat(heads, d_h, d_c), mat(heads, d_h, d_c)
    q_c, q_r = h @ mat(heads, d_model, d_h), rope(h @ mat(heads, d_model, d_r))
    k_c = c @ w_uk.transpose(0, 2, 1)
    if rotate_rebuilt_keys:  # the design decoupled RoPE avoids
        q_c, k_c = rope(q_c), rope(k_c)
    keys = np.concatenate([k_c, np.broadcast_to(k_r, (heads, n, d_r))], -1)
    explicit = np.concatenate([q_c, q_r], -1) @ keys.transpose(0, 2, 1)
    absorbed = np.concatenate([q_c @ w_uk, q_r], -1) @ np.concatenate([c, k_r], -1).T
    outs = (
        attend(explicit, c @ w_uv.transpose(0, 2, 1)),
        attend(absorbed, c) @ w_uv.transpose(0, 2, 1),
    )
    return (explicit, absorbed), outs, attend(absorbed[0], np.eye(n))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_decoupled_mla_explicit_equals_absorbed(seed):
    (explicit, absorbed), (out_e, out_a), _ = _mla_scores_and_outputs(seed=seed)
    assert np.allclose(explicit, absorbed) and np.allclose(out_e, out_a)


def test_rope_on_rebuilt_keys_breaks_absorption():
    # the rotated query with one fixed absorbed matrix no longer reproduces the scores
    (explicit, absorbed), _, _ = _mla_scores_and_outputs(rotate_rebuilt_keys=True)
    assert not np.allclose(explicit, absorbed)


def _rotate_back(weights, values, shift, back=True):
    """DeepSeek-V4's rope slice: values rotated at j, output rotated by -i (if back)."""
    from posenc.alternatives import rope

    n = len(values)
    out = weights @ rope(values, np.arange(n) + shift)
    return rope(out, -np.arange(n) - shift) if back else out


def test_deepseek_v4_rotate_back_depends_on_relative_position_only():
    from posenc.alternatives import rope

    _, _, weights = _mla_scores_and_outputs()
    values = np.random.default_rng(5).normal(size=(len(weights), 4))
    outs = [_rotate_back(weights, values, t) for t in (0, 1000)]
    assert np.allclose(outs[0], outs[1])
    # sum_j w_ij R_{j-i} v_j, written out
    n = len(values)
    direct = [weights[i] @ rope(values, np.arange(n) - i) for i in range(n)]
    assert np.allclose(outs[0], np.array(direct))
    # without the rotation back the output depends on absolute position
    raw = [_rotate_back(weights, values, t, back=False) for t in (0, 1000)]
    assert not np.allclose(raw[0], raw[1])


def test_bfloat16_position_rounds_as_the_chapter_states():
    """The porting box: in bfloat16, position 100,001 is stored as 99,840."""
    stored = torch.tensor(100001.0, dtype=torch.float32).to(torch.bfloat16)
    assert stored.item() == 99840.0
    assert torch.tensor(100001.0, dtype=torch.float32).item() == 100001.0


@pytest.mark.parametrize("factor", [4.0, 40.0])
def test_deepseek_v3_yarn_scales_scores_by_the_square_of_0_1_ln_s_plus_1(factor):
    from transformers.models.deepseek_v3 import modeling_deepseek_v3 as ds3

    params = {"rope_type": "yarn", "factor": factor, "mscale_all_dim": 1.0}
    assert math.isclose(ds3.yarn_apply_mscale(params, 1.0), (0.1 * math.log(factor) + 1) ** 2)


def test_deepseek_v4_compressed_entries_get_block_start_positions_and_own_rope():
    import inspect

    from transformers.models.deepseek_v4 import configuration_deepseek_v4 as c4
    from transformers.models.deepseek_v4 import modeling_deepseek_v4 as m4

    v4 = tf.DeepseekV4Config()
    assert v4.compress_rope_theta == 160000.0
    assert v4.rope_parameters["main"]["rope_theta"] == 10000.0
    assert v4.rope_parameters["compress"]["rope_theta"] == 160000.0
    window_only = c4._COMPRESS_RATIO_TO_LAYER_TYPE[0]
    assert window_only == "sliding_attention" and window_only not in v4.layer_types
    code = inspect.getsource(m4)
    assert "positions * self.compress_rate + first_window_position" in code
    assert '"main" if self.layer_type == "sliding_attention" else "compress"' in code


def test_deepseek_v4_compressed_layers_rotate_everything_with_the_compress_rope():
    """CSA/HCA layers rotate queries and window keys with base 160,000 too, not only entries."""
    import inspect

    from transformers.models.deepseek_v4 import modeling_deepseek_v4 as m4

    attention = inspect.getsource(m4.DeepseekV4Attention)
    assert "cos, sin = position_embeddings[self.rope_layer_type]" in attention
    assert "q = apply_rotary_pos_emb(q, cos, sin)" in attention
    assert "kv = apply_rotary_pos_emb(kv, cos, sin)" in attention
    # CSA reads only the indexer's top index_topk compressed entries
    assert "top_k = min(self.index_topk, compressed_len)" in inspect.getsource(m4)
    assert tf.DeepseekV4Config().index_topk == 512


def test_gemma4_attention_k_eq_v_applies_to_global_layers_only():
    import inspect

    from transformers.models.gemma4 import modeling_gemma4 as g4

    code = inspect.getsource(g4.Gemma4TextAttention.__init__)
    assert "config.attention_k_eq_v and not self.is_sliding" in code


def test_deepseek_v3_released_yarn_multiplies_scores_by_about_1_87():
    from transformers.models.deepseek_v3 import modeling_deepseek_v3 as ds3

    released = {"rope_type": "yarn", "rope_theta": 1e4, "factor": 40.0, "mscale": 1.0}
    released |= {"mscale_all_dim": 1.0, "original_max_position_embeddings": 4096}
    cfg = tf.DeepseekV3Config(rope_parameters=released)
    gain = ds3.yarn_apply_mscale(cfg.rope_parameters, 1.0)
    assert round(gain, 2) == 1.87


def test_deepseek_v4_default_has_no_yarn_and_mixes_csa_and_hca_layers():
    """YaRN (factor 16) is not in the default configuration; the layer list mixes the two."""
    v4 = tf.DeepseekV4Config()
    assert {t: p["rope_type"] for t, p in v4.rope_parameters.items()} == {
        "main": "default",
        "compress": "default",
    }
    csa, hca = "compressed_sparse_attention", "heavily_compressed_attention"
    assert v4.layer_types[:5] == [hca, hca, hca, csa, hca]
    assert set(v4.layer_types) == {csa, hca}
    yarn = {"rope_type": "yarn", "factor": 16.0, "original_max_position_embeddings": 65536}
    compress = tf.DeepseekV4Config(rope_parameters=yarn).rope_parameters["compress"]
    assert compress["rope_type"] == "yarn" and compress["rope_theta"] == 160000.0


def test_sliding_window_of_w_reaches_w_minus_one_back_and_gemma_defaults():
    w, n = 8, 32
    i, j = np.mgrid[:n, :n]
    mask = (i >= j) & (i - j < w)  # the chapter's sliding-window mask
    assert (i - j)[mask].max() == w - 1
    assert tf.Gemma3TextConfig().sliding_window == 4096
    assert tf.Gemma4TextConfig().attention_k_eq_v is False
