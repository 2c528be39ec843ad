"""Unit tests of posenc.museum: each exhibit is the bug or convention it claims to be."""

from __future__ import annotations

import math

import numpy as np
import pytest

from posenc import museum, sinusoidal


def direct(positions, d_model, *, base=10000.0):
    """The formula entry by entry, interleaved, for any (also negative) positions."""
    positions = np.asarray(positions, dtype=np.float64)
    table = np.empty((len(positions), d_model))
    for c in range(d_model):
        angle = positions / base ** (2 * (c // 2) / d_model)
        table[:, c] = np.sin(angle) if c % 2 == 0 else np.cos(angle)
    return table


def test_double_counted_is_the_table_of_the_squared_base():
    bug = museum.double_counted(50, 16)
    assert np.allclose(bug, sinusoidal(50, 16, base=1e8), atol=1e-12)
    assert not np.allclose(bug, sinusoidal(50, 16), atol=1e-3)
    with pytest.raises(ValueError, match="d_model must be even"):
        museum.double_counted(5, 7)


def test_double_counted_as_found_gives_each_column_its_own_frequency():
    bug = museum.double_counted_as_found(30, 8)
    column = np.arange(8)
    angle = np.arange(30)[:, None] * 1e4 ** (-2 * column / 8)
    assert np.allclose(bug, np.where(column % 2 == 0, np.sin(angle), np.cos(angle)), atol=1e-13)
    assert np.array_equal(bug[:, 0::2], museum.double_counted(30, 8)[:, 0::2])
    with pytest.raises(ValueError, match="even"):
        museum.double_counted_as_found(5, 7)


def test_tutorial_table_is_right_for_even_and_raises_for_odd_d_model():
    assert np.allclose(museum.tutorial_table(64, 32), sinusoidal(64, 32), atol=1e-12)
    with pytest.raises(ValueError, match=r"\(64,15\).*\(64,14\)"):
        museum.tutorial_table(64, 29)


def test_odd_truncated_is_one_column_short_with_the_frequencies_of_d_model():
    bug = museum.odd_truncated(40, 29)
    assert bug.shape == (40, 28)
    assert np.allclose(bug, sinusoidal(40, 29)[:, :28], atol=1e-12)
    assert np.allclose(museum.odd_truncated(40, 28), sinusoidal(40, 28), atol=1e-12)


def test_added_tutorial_style_gives_each_sequence_the_row_of_its_batch_index():
    table = sinusoidal(100, 8)
    batch_first = np.zeros((3, 20, 8))
    out = museum.added_tutorial_style(batch_first, table)
    for b in range(3):
        assert np.array_equal(out[b], np.broadcast_to(table[b], (20, 8)))
    rng = np.random.default_rng(0)
    sequence_first = rng.normal(size=(20, 3, 8))
    right = museum.added_tutorial_style(sequence_first, table)
    assert np.array_equal(right, sequence_first + table[:20, None, :])


def test_added_tutorial_style_refuses_shapes_that_do_not_fit():
    with pytest.raises(ValueError, match="x must be"):
        museum.added_tutorial_style(np.zeros((3, 8)), sinusoidal(10, 8))
    with pytest.raises(ValueError, match="table has 10 rows"):
        museum.added_tutorial_style(np.zeros((11, 2, 8)), sinusoidal(10, 8))


@pytest.mark.parametrize(
    ("value", "rounded"),
    [
        (1.0, 1.0),
        (1 + 2**-8, 1.0),  # a tie: to the even neighbour
        (1 + 3 * 2**-8, 1 + 2**-6),  # a tie: to the even neighbour, upwards
        (1 + 2**-8 + 2**-20, 1 + 2**-7),
        (257.0, 256.0),
        (259.0, 260.0),
        (-3.0e-3, -197 * 2**-16),  # 0.003 is 196.6 steps of 2**-16
    ],
)
def test_round_to_bfloat16_known_values(value, rounded):
    got = museum.round_to_bfloat16(np.float32(value))
    assert got.dtype == np.float32
    assert float(got) == pytest.approx(rounded, rel=1e-12)


def test_round_to_bfloat16_agrees_with_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    values = (rng.normal(size=20000) * 10.0 ** rng.uniform(-8, 8, size=20000)).astype(np.float32)
    ours = museum.round_to_bfloat16(values)
    theirs = torch.from_numpy(values).to(torch.bfloat16).to(torch.float32).numpy()
    assert np.array_equal(ours, theirs)


@pytest.mark.parametrize(("precision", "exact_up_to"), [("float16", 2048), ("bfloat16", 256)])
def test_low_precision_angles_lose_positions_past_the_significand(precision, exact_up_to):
    table = museum.low_precision_angles(exact_up_to + 2, 8, precision=precision)
    assert table.dtype == np.float32
    assert np.array_equal(table[exact_up_to + 1], table[exact_up_to])  # p + 1 rounds to p
    assert not np.array_equal(table[exact_up_to - 1], table[exact_up_to])
    error = np.abs(table - sinusoidal(exact_up_to + 2, 8))
    assert error[:4].max() < 1e-2 and error.max() > 0.1


def test_bfloat16_angles_are_coarser_than_float16():
    f16 = museum.low_precision_angles(200, 16, precision="float16")
    bf16 = museum.low_precision_angles(200, 16, precision="bfloat16")
    exact = sinusoidal(200, 16)
    assert np.abs(bf16 - exact).max() > 4 * np.abs(f16 - exact).max() > 0


def test_swapped_exchanges_every_pair():
    table = sinusoidal(10, 6)
    assert np.array_equal(museum.swapped(10, 6), table[:, [1, 0, 3, 2, 5, 4]])
    with pytest.raises(ValueError, match="even"):
        museum.swapped(10, 5)


@pytest.mark.parametrize("d_model", [6, 7])
def test_relative_table_and_its_two_mistakes(d_model):
    offsets = np.arange(-5, 6)
    right = museum.relative_table(5, d_model)
    assert np.allclose(right, direct(offsets, d_model), atol=1e-13)
    absolute = museum.relative_table(5, d_model, mistake="absolute")
    assert np.array_equal(absolute, absolute[::-1])  # offsets k and -k share a row
    assert np.allclose(absolute, direct(np.abs(offsets), d_model), atol=1e-13)
    negated = museum.relative_table(5, d_model, mistake="negated")
    assert np.allclose(negated, direct(-offsets, d_model), atol=1e-13)
    with pytest.raises(ValueError, match="mistake"):
        museum.relative_table(5, d_model, mistake="mirrored")


def test_reinitialised_is_a_seeded_normal_draw_with_a_zero_padding_row():
    table = sinusoidal(400, 64, dtype=np.float32)
    weights = museum.reinitialised(table, std=0.02, padding_idx=1, seed=3)
    assert weights.shape == table.shape and weights.dtype == np.float32
    assert np.all(weights[1] == 0)
    assert abs(float(weights.std()) - 0.02) < 1e-3 and abs(float(weights.mean())) < 1e-3
    assert np.array_equal(weights, museum.reinitialised(table, padding_idx=1, seed=3))
    assert not np.array_equal(weights, museum.reinitialised(table, padding_idx=1, seed=4))


def test_tensor2tensor_signal_spacing_halves_and_padding():
    signal = museum.tensor2tensor_signal(30, 8, start_index=5)
    steps = np.arange(4) / 3  # num_timescales - 1 = 3 in the denominator
    angles = np.arange(5, 35)[:, None] * 1e4**-steps
    assert np.allclose(signal, np.hstack([np.sin(angles), np.cos(angles)]), atol=1e-12)
    odd = museum.tensor2tensor_signal(30, 9, start_index=5)
    assert odd.shape == (30, 9) and np.all(odd[:, -1] == 0)
    assert np.array_equal(odd[:, :8], signal)
    # one pair: the max(num_timescales - 1, 1) guard keeps the step finite
    assert np.allclose(museum.tensor2tensor_signal(3, 2), direct(range(3), 2)[:, [0, 1]])


def test_fairseq_table_is_tensor2tensor_with_a_zero_padding_row():
    table = museum.fairseq_table(40, 16, padding_idx=1)
    signal = museum.tensor2tensor_signal(40, 16)
    assert np.all(table[1] == 0)
    rows = np.arange(40) != 1
    assert np.allclose(table[rows], signal[rows], atol=1e-12)
    odd = museum.fairseq_table(40, 17)
    assert np.all(odd[:, -1] == 0)
    assert np.allclose(odd, museum.tensor2tensor_signal(40, 17), atol=1e-12)


def test_fairseq_positions_start_after_the_padding_index():
    tokens = np.array([[5, 6, 7, 1, 1], [9, 1, 1, 1, 1]])
    assert np.array_equal(museum.fairseq_positions(tokens, 1), [[2, 3, 4, 1, 1], [2, 1, 1, 1, 1]])
    encoded = museum.fairseq_table(10, 8, padding_idx=1)[museum.fairseq_positions(tokens, 1)]
    assert np.allclose(encoded[0, :3], museum.tensor2tensor_signal(3, 8, start_index=2))
    assert np.all(encoded[1, 1:] == 0)


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: museum.double_counted(5, 8, base=0.0), ValueError, "base"),
        (lambda: museum.tutorial_table(-1, 8), ValueError, "length"),
        (lambda: museum.low_precision_angles(5, 8, precision="float8"), ValueError, "precision"),
        (lambda: museum.low_precision_angles(5, 8, start=-1), ValueError, "start"),
        (lambda: museum.reinitialised(np.zeros((4, 2)), padding_idx=4), ValueError, "padding"),
        (lambda: museum.reinitialised(np.zeros(4)), ValueError, "table"),
        (lambda: museum.tensor2tensor_signal(5, 1), ValueError, "channels"),
        (lambda: museum.fairseq_table(5, 3), ValueError, "embedding_dim"),
        (lambda: museum.fairseq_positions(np.zeros(3, dtype=int), 1), ValueError, "tokens"),
        (lambda: museum.fairseq_positions([[1.5]], 1), TypeError, "tokens"),
        (lambda: museum.relative_table(2.0, 4), TypeError, "max_distance"),
    ],
)
def test_bad_arguments_raise_at_once(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_the_typo_the_wrong_base_exhibit_warns_about():
    assert 10e4 == 100000 and math.isclose(1e4, 10000)
