"""posenc.experiments.model: the causal model whose attention takes the positional method."""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from posenc import sinusoidal  # noqa: E402
from posenc.alternatives import alibi_bias, t5_relative_position_bucket  # noqa: E402
from posenc.experiments.model import ENCODINGS, CausalLanguageModel  # noqa: E402


def _model(encoding, **kwargs):
    torch.manual_seed(0)
    options = {"d_model": 16, "n_heads": 2, "n_layers": 2, "max_len": 64, **kwargs}
    return CausalLanguageModel(11, encoding=encoding, **options).eval()


def _tokens(length, batch=2, seed=0):
    return torch.randint(0, 11, (batch, length), generator=torch.Generator().manual_seed(seed))


def test_attention_bias_alibi_is_the_numpy_bias():
    model = _model("alibi")
    bias = model.attention_bias(9).numpy()
    assert np.array_equal(bias, alibi_bias(2, 9).astype(np.float32))


def test_attention_bias_t5_looks_up_the_shared_table_and_stays_causal():
    model = _model("t5")
    with torch.no_grad():
        model.t5_table.copy_(torch.arange(64.0).view(32, 2))
    bias = model.attention_bias(40).detach().numpy()
    offsets = np.arange(40)[None, :] - np.arange(40)[:, None]
    buckets = t5_relative_position_bucket(offsets, bidirectional=False)
    past = offsets <= 0
    for h in range(2):
        assert np.array_equal(bias[h][past], (2 * buckets + h)[past].astype(np.float32))
        assert np.all(bias[h][~past] == -np.inf)


@pytest.mark.parametrize("encoding", ["none", "sinusoidal", "learned", "rope"])
def test_attention_bias_without_biases_is_the_causal_mask(encoding):
    bias = _model(encoding).attention_bias(5)[0].numpy()
    assert np.array_equal(np.isinf(bias), np.triu(np.ones((5, 5), bool), 1))
    assert np.all(bias[np.tril(np.ones((5, 5), bool))] == 0)


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_the_model_is_causal(encoding):
    model = _model(encoding)
    tokens = _tokens(12)
    changed = tokens.clone()
    changed[:, 8:] = (changed[:, 8:] + 1) % 11
    with torch.no_grad():
        a, b = model(tokens), model(changed)
    assert a.shape == (2, 12, 11)
    torch.testing.assert_close(a[:, :8], b[:, :8], atol=1e-5, rtol=0)
    assert (a[:, 8:] - b[:, 8:]).abs().max() > 1e-3


def _last_output_after_shuffling_the_prefix(encoding):
    """One layer: the last position's output for a sequence and for its prefix reversed."""
    model = _model(encoding, n_layers=1)
    with torch.no_grad():
        if encoding == "t5":
            model.t5_table.normal_()
        tokens = torch.arange(10)[None]
        shuffled = torch.cat([tokens[:, :9].flip(1), tokens[:, 9:]], dim=1)
        return model(tokens)[0, -1], model(shuffled)[0, -1]


def test_without_an_encoding_the_last_query_sees_its_prefix_as_a_set():
    a, b = _last_output_after_shuffling_the_prefix("none")
    torch.testing.assert_close(a, b, atol=1e-5, rtol=0)


@pytest.mark.parametrize("encoding", ["sinusoidal", "learned", "rope", "alibi", "t5"])
def test_every_encoding_but_none_tells_the_order_of_the_prefix(encoding):
    a, b = _last_output_after_shuffling_the_prefix(encoding)
    assert (a - b).abs().max() > 1e-3


def test_parameter_counts_differ_only_by_the_positional_parameters():
    count = {e: sum(p.numel() for p in _model(e).parameters()) for e in ENCODINGS}
    base = count["none"]
    assert count["sinusoidal"] == count["rope"] == count["alibi"] == base
    assert count["learned"] == base + 64 * 16
    assert count["t5"] == base + 32 * 2


def test_learned_refuses_sequences_past_its_table_and_others_do_not():
    with pytest.raises(ValueError, match="max_len"):
        _model("learned", max_len=8)(_tokens(9))
    for encoding in ("none", "sinusoidal", "rope", "alibi", "t5"):
        assert _model(encoding, max_len=8)(_tokens(9)).shape == (2, 9, 11)


def test_embedding_starts_at_unit_rms_length_before_the_scale():
    model = _model("none", d_model=256, n_heads=4)
    rms = model.embedding.weight.pow(2).sum(dim=1).mean().sqrt().item()
    assert math.isclose(rms, 1.0, rel_tol=0.1)


@pytest.mark.parametrize("encoding", ["none", "sinusoidal", "learned"])
def test_the_first_block_gets_scaled_embeddings_plus_the_added_table(encoding):
    model = _model(encoding)
    seen = []
    model.blocks[0].register_forward_pre_hook(lambda module, args: seen.append(args[0]))
    tokens = _tokens(7)
    with torch.no_grad():
        model(tokens)
        expected = model.embedding.weight[tokens] * 4.0  # sqrt(d_model = 16)
        if encoding == "sinusoidal":
            expected = expected + torch.from_numpy(sinusoidal(7, 16, dtype=np.float32))
        if encoding == "learned":
            expected = expected + model.position.table[:7]
    torch.testing.assert_close(seen[0], expected, atol=1e-6, rtol=0)


def test_model_refuses_bad_arguments():
    with pytest.raises(ValueError, match="encoding must be one of"):
        CausalLanguageModel(5, encoding="relative")
    with pytest.raises(ValueError, match=r"d_model=10 must be a multiple of n_heads=4"):
        CausalLanguageModel(5, 10, 4)
    with pytest.raises(ValueError, match=r"rope needs an even head size, got .* = 3"):
        CausalLanguageModel(5, 12, 4, encoding="rope")
    with pytest.raises(TypeError, match="n_layers must be an integer"):
        CausalLanguageModel(5, n_layers=2.0)
    with pytest.raises(TypeError, match=r"tokens must be an int32 or int64 tensor"):
        _model("none")(torch.zeros(2, 5))
    with pytest.raises(ValueError, match=r"tokens must have shape \(batch, length\)"):
        _model("none")(torch.zeros(5, dtype=torch.long))
    with pytest.raises(ValueError, match=r"token ids must lie in \[0, 11\)"):
        _model("none")(torch.full((1, 4), 11))


# -- explicit positions (randomized RoPE) ----------------------------------------------


@pytest.mark.parametrize("encoding", [e for e in ENCODINGS if e != "rope"])
def test_only_rope_models_take_positions(encoding):
    with pytest.raises(ValueError, match=f"with encoding='rope' only, not '{encoding}'"):
        _model(encoding)(_tokens(6), torch.arange(6))


def test_a_rope_model_uses_the_positions_it_is_given():
    model, tokens = _model("rope"), _tokens(9, batch=3)
    with torch.no_grad():
        plain = model(tokens)
        torch.testing.assert_close(model(tokens, torch.arange(9)), plain, atol=1e-6, rtol=0)
        # Only differences of positions matter to RoPE: a shift changes nothing.
        torch.testing.assert_close(model(tokens, torch.arange(9) + 37), plain, atol=1e-4, rtol=0)
        positions = torch.tensor([list(range(9)), [0, 3, 4, 9, 20, 21, 22, 40, 41], [0] * 9])
        rows = model(tokens, positions)
        for b in range(3):
            alone = model(tokens[b : b + 1], positions[b : b + 1])
            torch.testing.assert_close(rows[b : b + 1], alone, atol=1e-5, rtol=0)
    torch.testing.assert_close(rows[0], plain[0], atol=1e-5, rtol=0)
    assert (rows[1] - plain[1]).abs().max() > 1e-3


def test_learned_rows_past_the_training_length_get_no_gradient_and_stay_put():
    model = _model("learned").train()  # max_len 64
    table = model.position.table
    before = table.detach().clone()
    tokens = _tokens(10)
    loss = torch.nn.functional.cross_entropy(model(tokens).transpose(1, 2), _tokens(10, seed=1))
    loss.backward()
    assert torch.all(table.grad[10:] == 0)
    assert torch.all(table.grad[:10].abs().sum(dim=1) > 0)
    # AdamW without weight decay (as the experiment trains) leaves those rows as they were.
    torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.0).step()
    assert torch.equal(table.detach()[10:], before[10:])
    assert torch.all((table.detach()[:10] != before[:10]).any(dim=1))


def test_scaled_rope_frequencies_in_the_model():
    from posenc.long_context import scaled_frequencies

    frequencies, scale = scaled_frequencies(8, method="yarn", factor=4.0, original_length=8)
    model = _model("rope")  # head width 8
    tokens = _tokens(20)
    with torch.no_grad():
        plain = model(tokens)
        model.set_rope_frequencies(frequencies / 4)
        slowed = model(tokens)
        model.set_rope_frequencies()
        back = model(tokens)
    assert torch.equal(plain, back) and (plain - slowed).abs().max() > 1e-3
    model.set_rope_frequencies(frequencies, scale)
    for block in model.blocks:  # the library's one RoPE, with these settings
        rotary = block.attention.rotary
        assert rotary.pairing == "interleaved" and rotary.attention_scale == scale
        np.testing.assert_array_equal(rotary.frequencies, frequencies)
    assert list(model.state_dict()) == list(_model("rope").state_dict())  # no RoPE state
    with pytest.raises(ValueError, match=r"frequencies must have shape \(4,\)"):
        model.set_rope_frequencies(frequencies[:2])
    with pytest.raises(ValueError, match="attention_scale must be finite and > 0"):
        model.set_rope_frequencies(frequencies, attention_scale=0.0)
    with pytest.raises(ValueError, match="encoding='rope' only"):
        _model("alibi").set_rope_frequencies(frequencies)


@pytest.mark.parametrize("encoding", ["none", "rope", "alibi", "t5"])
def test_attention_weights_are_the_forward_pass_written_out(encoding):
    model = _model(encoding)
    tokens = _tokens(12)
    with torch.no_grad():
        logits = model(tokens)
    weights = model.attention_weights(tokens)
    # afterwards the model is back on the fused path, holding nothing
    assert all(not b.attention.keep_weights and b.attention.weights is None for b in model.blocks)
    assert len(weights) == len(model.blocks)
    for w in weights:
        assert w.shape == (tokens.shape[0], model.n_heads, 12, 12)
        torch.testing.assert_close(w.sum(dim=-1), torch.ones(w.shape[:-1]))
        assert torch.all(w.triu(diagonal=1) == 0)  # causal: nothing on later keys
    # the written-out softmax computes what the fused one does
    for block in model.blocks:
        block.attention.keep_weights = True
    with torch.no_grad():
        kept = model(tokens)
    torch.testing.assert_close(kept, logits, atol=1e-5, rtol=0)


def test_attention_entropy_is_ln_of_the_keys_for_uniform_attention_and_0_for_one_key():
    model = _model("none")
    tokens = _tokens(9)
    for block in model.blocks:  # zero queries: every score 0, uniform over the prefix
        torch.nn.init.zeros_(block.attention.qkv.weight[: model.d_model])
        torch.nn.init.zeros_(block.attention.qkv.bias[: model.d_model])
    entropy = model.attention_entropy(tokens)
    assert entropy.shape == (len(model.blocks), tokens.shape[0], model.n_heads, 9)
    expected = torch.log(torch.arange(1, 10, dtype=torch.float32))
    torch.testing.assert_close(entropy, expected.expand_as(entropy), atol=1e-5, rtol=0)
    assert torch.all(entropy[..., 0] == 0)  # the first query sees one key


def test_rope_queries_keys_turned_by_their_positions_give_the_attention_weights():
    model = _model("rope")
    tokens = _tokens(12)
    theta, scale = model.rope_frequencies()
    turn = np.exp(1j * np.arange(12)[:, None] * theta)  # pair i at position t: t theta_i
    for layer, weights in enumerate(model.attention_weights(tokens)):
        q, k = model.rope_queries_keys(tokens, layer)
        assert q.shape == k.shape == (*weights.shape[:3], theta.size) and np.iscomplexobj(q)
        scores = np.einsum("bhti,bhsi->bhts", q * turn, np.conj(k * turn)).real
        scores *= scale / math.sqrt(2 * theta.size)
        scores[..., np.triu_indices(12, 1)[0], np.triu_indices(12, 1)[1]] = -np.inf
        expected = np.exp(scores - scores.max(-1, keepdims=True))
        expected /= expected.sum(-1, keepdims=True)
        np.testing.assert_allclose(weights.numpy(), expected, atol=2e-5)
    with pytest.raises(ValueError, match="layer"):
        model.rope_queries_keys(tokens, len(model.blocks))
    with pytest.raises(ValueError, match="has no RoPE queries and keys"):
        _model("alibi").rope_queries_keys(tokens, 0)
