"""posenc.block: the NumPy Transformer block and where the encoding enters it."""

from __future__ import annotations

import itertools
import math
import re

import numpy as np
import pytest

from posenc import sinusoidal
from posenc.attention import self_attention
from posenc.block import (
    BlockWeights,
    add_positional_encoding,
    embed,
    feed_forward,
    layer_norm,
    multi_head_self_attention,
    transformer_block,
)


@pytest.fixture
def sentence():
    return np.random.default_rng(7).normal(size=(5, 16))


def test_layer_norm_gives_rows_of_mean_zero_and_unit_variance():
    x = np.random.default_rng(0).normal(loc=3.0, scale=5.0, size=(4, 6, 32))
    y = layer_norm(x, eps=1e-300)
    assert np.allclose(y.mean(axis=-1), 0.0, atol=1e-12)
    assert np.allclose(y.var(axis=-1), 1.0, atol=1e-12)
    assert layer_norm(x.astype(np.float32)).dtype == np.float32


def test_feed_forward_is_relu_between_two_affine_maps():
    rng = np.random.default_rng(1)
    x, w_1, b_1, w_2, b_2 = (rng.normal(size=s) for s in [(3, 4), (4, 8), (8,), (8, 4), (4,)])
    hidden = x @ w_1 + b_1
    assert np.allclose(
        feed_forward(x, w_1, b_1, w_2, b_2), np.where(hidden > 0, hidden, 0) @ w_2 + b_2
    )


def test_one_head_is_the_chapter_1_self_attention_times_w_o(sentence):
    w = BlockWeights.random(16, n_heads=1, seed=3)
    out, attention = multi_head_self_attention(sentence, w)
    single, weights = self_attention(sentence, w.w_q[0], w.w_k[0], w.w_v[0])
    assert np.allclose(out, single @ w.w_o, atol=1e-12)
    assert np.array_equal(attention[0], weights)


def test_heads_are_concatenated_in_order(sentence):
    w = BlockWeights.random(16, n_heads=4, seed=3)
    out, attention = multi_head_self_attention(sentence, w)
    heads = [self_attention(sentence, w.w_q[h], w.w_k[h], w.w_v[h])[0] for h in range(4)]
    assert attention.shape == (4, 5, 5)
    assert np.allclose(out, np.concatenate(heads, axis=-1) @ w.w_o, atol=1e-12)


def test_block_is_post_norm_residual(sentence):
    w = BlockWeights.random(16, n_heads=2, seed=4)
    attended, _ = multi_head_self_attention(sentence, w)
    h = layer_norm(sentence + attended)
    expected = layer_norm(h + feed_forward(h, w.w_1, w.b_1, w.w_2, w.b_2))
    assert np.array_equal(transformer_block(sentence, w), expected)


def test_a_batch_is_blocks_of_its_members(sentence):
    w = BlockWeights.random(16, n_heads=2, seed=4)
    batch = np.stack([sentence, sentence[::-1]])
    out = transformer_block(batch, w)
    assert np.allclose(out[0], transformer_block(sentence, w), atol=1e-12)
    assert np.allclose(out[1], transformer_block(sentence[::-1], w), atol=1e-12)


def permutation_gaps(x, w, encode=lambda tokens: tokens):
    """Largest |model(x[perm]) - model(x)[perm]| for every non-identity permutation, where
    the model encodes the (reordered) tokens and runs the block."""

    def model(tokens):
        return transformer_block(encode(tokens), w)

    reference = model(x)
    return [
        np.abs(model(x[list(p)]) - reference[list(p)]).max()
        for p in itertools.permutations(range(len(x)))
        if list(p) != sorted(p)
    ]


def test_without_an_encoding_the_block_is_permutation_equivariant(sentence):
    w = BlockWeights.random(16, n_heads=2, seed=5)
    assert max(permutation_gaps(sentence, w)) < 1e-12


def test_with_the_encoding_every_permutation_changes_the_output(sentence):
    w = BlockWeights.random(16, n_heads=2, seed=5)
    gaps = permutation_gaps(sentence, w, add_positional_encoding)
    assert len(gaps) == 119 and min(gaps) > 1e-2


def test_the_permutation_test_is_blind_to_a_constant_row(sentence):
    # The batch-axis bug adds the same row to every token: the test must see no order.
    w = BlockWeights.random(16, n_heads=2, seed=5)
    assert max(permutation_gaps(sentence, w, lambda tokens: tokens + sinusoidal(1, 16))) < 1e-12


def test_causal_mask_breaks_equivariance(sentence):
    w = BlockWeights.random(16, n_heads=2, seed=6)
    causal = np.tril(np.ones((5, 5), dtype=bool))
    reference = transformer_block(sentence, w, mask=causal)
    swapped = transformer_block(sentence[[1, 0, 2, 3, 4]], w, mask=causal)
    assert np.abs(swapped - reference[[1, 0, 2, 3, 4]]).max() > 1e-2


@pytest.mark.parametrize("batch_first", [True, False])
def test_every_batch_element_gets_rows_by_position(batch_first):
    zeros = np.zeros((3, 7, 10)) if batch_first else np.zeros((7, 3, 10))
    added = add_positional_encoding(zeros, batch_first=batch_first, start=2)
    per_element = added if batch_first else np.swapaxes(added, 0, 1)
    for element in per_element:
        assert np.array_equal(element, sinusoidal(7, 10, start=2))


def test_unbatched_input_and_dtype(sentence):
    out = add_positional_encoding(sentence.astype(np.float32))
    assert out.dtype == np.float32
    assert np.allclose(out, sentence + sinusoidal(5, 16), atol=1e-6)
    assert np.array_equal(add_positional_encoding(np.zeros((5, 16))), sinusoidal(5, 16))


@pytest.mark.parametrize("shape", [(16,), (1, 2, 5, 16)])
def test_add_positional_encoding_refuses_other_ranks(shape):
    with pytest.raises(ValueError, match=re_shape(shape)):
        add_positional_encoding(np.zeros(shape))


def re_shape(shape):
    return re.escape(str(tuple(shape)))


def test_add_positional_encoding_refuses_bad_kinds():
    with pytest.raises(TypeError, match="floating"):
        add_positional_encoding(np.zeros((2, 4), dtype=int))
    with pytest.raises(TypeError, match="batch_first"):
        add_positional_encoding(np.zeros((2, 3, 4)), batch_first=1)


def test_embed_scales_by_sqrt_d_model():
    table = np.random.default_rng(2).normal(size=(10, 9))
    tokens = np.array([[3, 1, 3], [0, 9, 2]])
    assert np.array_equal(embed(tokens, table, scale=False), table[tokens])
    assert np.allclose(embed(tokens, table), table[tokens] * 3.0, rtol=1e-15)
    assert math.isclose(embed([0], np.ones((1, 4)))[0, 0], 2.0)


@pytest.mark.parametrize("tokens", [[0, 10], [-1]])
def test_embed_refuses_ids_outside_the_vocabulary(tokens):
    with pytest.raises(ValueError, match=r"\[0, 10\)"):
        embed(tokens, np.zeros((10, 4)))


def test_embed_refuses_float_ids_and_a_flat_table():
    with pytest.raises(TypeError, match="tokens"):
        embed([1.0], np.zeros((10, 4)))
    with pytest.raises(ValueError, match=r"\(vocab_size, d_model\)"):
        embed([1], np.zeros(10))


def test_block_refuses_a_mismatched_width(sentence):
    w = BlockWeights.random(8)
    with pytest.raises(ValueError, match=r"d_model = 8, got \(5, 16\)"):
        transformer_block(sentence, w)


def test_random_weights_check_their_arguments():
    with pytest.raises(ValueError, match="n_heads must divide d_model"):
        BlockWeights.random(10, n_heads=4)
    with pytest.raises(TypeError, match="d_model"):
        BlockWeights.random(8.0)
    w = BlockWeights.random(12, n_heads=3, d_ff=7)
    assert (w.n_heads, w.d_model, w.w_q.shape, w.w_1.shape) == (3, 12, (3, 12, 4), (12, 7))
