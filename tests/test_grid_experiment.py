"""The grid experiment: its task, the positions each arm gets, its runner and its data."""

from __future__ import annotations

import csv
import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("tqdm")

from posenc.experiments import grid  # noqa: E402
from posenc.experiments.analysis import bootstrap_interval  # noqa: E402
from posenc.multidim import grid_positions, sincos_2d  # noqa: E402
from posenc.rotary import RotaryEmbedding  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "data" / "grid_generalization.csv"
CELLS = DATA.with_name("grid_generalization_cells.csv")
SETUP = grid.QUICK  # 3 x 3 training grids, scored at 3 x 3 and 4 x 4


def _cells_average_to_their_rows(rows, cells, size):
    """Each (arm, seed)'s per-cell accuracies at ``size`` average to its row's accuracy."""
    for row in (r for r in rows if int(r["size"]) == size):
        mine = [
            float(c["accuracy"])
            for c in cells
            if (c["arm"], c["seed"]) == (row["arm"], row["seed"])
        ]
        assert sum(mine) / len(mine) == pytest.approx(float(row["accuracy"]), abs=1e-4)


def test_the_target_is_the_token_above_and_row_0_is_unscored():
    tokens, targets = grid.make_batch(torch.Generator().manual_seed(5), 2, 3, 3)
    assert tokens.shape == targets.shape == (2, 9)
    for t, y in zip(tokens.tolist(), targets.tolist(), strict=True):
        a, b, c, d, e, f, *_ = t  # the grid [[a, b, c], [d, e, f], [g, h, i]]
        assert y == [-1, -1, -1, a, b, c, d, e, f]
    assert tokens.min() >= 0 and tokens.max() < grid.VOCAB
    tokens, targets = grid.make_batch(torch.Generator().manual_seed(5), 1, 2, 4)  # 2 rows of 4
    assert targets[0].tolist() == [-1] * 4 + tokens[0, :4].tolist()


def test_held_out_grids_are_fixed_and_not_a_training_stream():
    first, again = grid.held_out_batch(4, 8), grid.held_out_batch(4, 8)
    assert torch.equal(first[0], again[0])
    training = grid.make_batch(torch.Generator().manual_seed(0), 8, 4, 4)
    assert not torch.equal(first[0], training[0])


def _record_rotations(monkeypatch):
    """Every RotaryEmbedding call from now on: (rotated width, sequence length, positions)."""
    calls = []
    plain = RotaryEmbedding.forward

    def recording(self, x, positions=None):
        calls.append((x.shape[-1], x.shape[-2], positions))
        return plain(self, x, positions)

    monkeypatch.setattr(RotaryEmbedding, "forward", recording)
    return calls


def _side(length: int) -> int:
    side = math.isqrt(length)
    assert side * side == length
    return side


def _calls_per_model(setup, rotations_per_layer):
    # training steps, then one pass per evaluation size; q and k in every layer
    passes = setup.steps + len(setup.eval_sizes)
    return passes * setup.n_layers * 2 * rotations_per_layer


def test_rope_1d_turns_every_query_and_key_by_the_raster_index(monkeypatch):
    calls = _record_rotations(monkeypatch)
    grid.unit_rows(SETUP, "rope_1d", 0)
    head = SETUP.d_model // SETUP.n_heads
    assert len(calls) == _calls_per_model(SETUP, 1)
    for width, length, positions in calls:
        assert width == head
        assert positions.tolist() == list(range(length))
    assert {length for _, length, _ in calls} == {9, 16}  # trained at 3 x 3, scored at 4 x 4


def test_axial_turns_half_the_features_by_the_row_and_half_by_the_column(monkeypatch):
    calls = _record_rotations(monkeypatch)
    grid.unit_rows(SETUP, "rope_axial", 0)
    half = SETUP.d_model // SETUP.n_heads // 2
    assert len(calls) == _calls_per_model(SETUP, 2)
    for (w_row, length, rows), (w_col, _, cols) in zip(calls[::2], calls[1::2], strict=True):
        side = _side(length)
        assert w_row == w_col == half
        assert rows.tolist() == [i // side for i in range(length)]
        assert cols.tolist() == [i % side for i in range(length)]


def test_swapping_rows_and_columns_changes_the_axial_model():
    model = grid.GridModel("rope_axial", SETUP).eval()
    tokens = grid.held_out_batch(4, 2)[0][:, :12]  # a 3 x 4 grid: rows and columns differ
    positions = model.positions(3, 4)
    assert positions.tolist() == [[r, c] for r in range(3) for c in range(4)]
    with torch.no_grad():
        logits = model(tokens, (3, 4))
        model.positions = lambda height, width: positions[:, [1, 0]]
        swapped = model(tokens, (3, 4))
    assert not torch.allclose(logits, swapped, atol=1e-4)


def test_axial_scores_depend_on_the_row_and_column_offsets_only():
    q, k = torch.randn(2, 1, 6, 16, dtype=torch.float64).unbind(0)
    rows, cols = torch.tensor([0, 0, 1, 1, 2, 2]), torch.tensor([0, 1, 0, 1, 0, 1])

    def scores(dr, dc):
        return grid._axial(q, rows + dr, cols + dc) @ grid._axial(k, rows + dr, cols + dc).mT

    assert torch.allclose(scores(0, 0), scores(5, 3), atol=1e-12)
    assert not torch.allclose(
        scores(0, 0), grid._axial(q, cols, rows) @ grid._axial(k, cols, rows).mT
    )


def test_axial_matches_the_rotary_modules_axes_mode_where_it_exists():
    try:
        module = RotaryEmbedding(16, pairing="interleaved", axes_dims=(8, 8))
    except TypeError:
        pytest.skip("RotaryEmbedding has no axes_dims yet")
    q = torch.randn(2, 3, 12, 16, dtype=torch.float64)
    positions = torch.from_numpy(grid_positions(3, 4))
    expected = grid._axial(q, positions[:, 0], positions[:, 1])
    assert torch.allclose(module(q, positions), expected, atol=1e-12)


@pytest.mark.parametrize("arm, squeezed", [("sincos_2d", False), ("sincos_2d_interp", True)])
def test_the_table_arms_add_the_library_table_at_every_size(monkeypatch, arm, squeezed):
    calls = _record_rotations(monkeypatch)
    added = _record_tables(monkeypatch)
    grid.unit_rows(SETUP, arm, 0)
    assert calls == []  # nothing rotates
    assert len(added) == SETUP.steps + len(SETUP.eval_sizes)
    base_size = SETUP.train_size if squeezed else None  # diffusers' squeeze onto the training side
    for (height, width), table in added:
        expected = sincos_2d(height, width, SETUP.d_model, base_size=base_size)
        np.testing.assert_allclose(table, expected.astype(np.float32), atol=1e-5)  # (x + t) - x
    assert [shape for shape, _ in added[-2:]] == [(3, 3), (4, 4)]


def test_the_row_break_sequence_of_a_hand_built_3_by_3_grid():
    tokens = torch.tensor([[1, 2, 3, 4, 5, 6, 7, 8, 9]])  # [[1, 2, 3], [4, 5, 6], [7, 8, 9]]
    targets = torch.tensor([[-1, -1, -1, 1, 2, 3, 4, 5, 6]])
    sequence, scored, positions, cells = grid.row_break_sequence(tokens, targets, 3)
    b = grid.ROW_BREAK
    assert b == grid.VOCAB  # a new symbol, after the grid symbols 0 .. VOCAB - 1
    assert sequence.tolist() == [[1, 2, 3, b, 4, 5, 6, b, 7, 8, 9, b]]
    assert positions.tolist() == list(range(12))
    assert cells.tolist() == [0, 1, 2, 4, 5, 6, 8, 9, 10]
    assert scored.tolist() == [[-1, -1, -1, -1, 1, 2, 3, -1, 4, 5, 6, -1]]
    masked = [i for i in range(12) if scored[0, i] < 0]
    assert masked == [0, 1, 2, 3, 7, 11]  # row 0 and every row break
    for i in range(12):  # the token above is width + 1 = 4 places back
        if i not in masked:
            assert scored[0, i] == sequence[0, i - 4] != b
    model = grid.GridModel("rope_1d_rows", SETUP)
    assert model.positions(3, 3).tolist() == positions.tolist()
    assert model.lm.embedding.num_embeddings == grid.VOCAB + 1
    with pytest.raises(ValueError, match="same shape"):
        grid.row_break_sequence(tokens[:, :8], targets[:, :8], 3)


def test_the_row_break_arm_scores_its_grid_cells_on_the_grid_symbols():
    model = grid.GridModel("rope_1d_rows", SETUP).eval()
    tokens, targets = grid.held_out_batch(4, 2)
    sequence, _, positions, cells = grid.row_break_sequence(tokens, targets, 4)
    with torch.no_grad():
        logits = model(tokens, (4, 4))
        whole = model.lm(sequence, positions)
    assert logits.shape == (2, 16, grid.VOCAB) and whole.shape == (2, 20, grid.VOCAB + 1)
    assert torch.equal(logits, whole[:, cells, : grid.VOCAB])


def test_rope_1d_rows_turns_every_query_and_key_by_the_index_in_the_longer_sequence(
    monkeypatch,
):
    calls = _record_rotations(monkeypatch)
    grid.unit_rows(SETUP, "rope_1d_rows", 0)
    assert len(calls) == _calls_per_model(SETUP, 1)
    for width, length, positions in calls:
        assert width == SETUP.d_model // SETUP.n_heads
        assert positions.tolist() == list(range(length))
    assert {length for _, length, _ in calls} == {3 * 4, 4 * 5}  # a break after every row


def _direct_interpolated_table(n, dim, base_size):
    """sincos_2d's table with diffusers' interpolation, written out: p = i * base_size / n
    on both axes, each half [sin(p w_j), cos(p w_j)], w_j = 10000^(-j / (dim / 4)), the
    column half first."""
    quarter = dim // 4
    w = 10000.0 ** (-np.arange(quarter) / quarter)
    p = np.arange(n) * base_size / n
    axis = np.concatenate((np.sin(np.outer(p, w)), np.cos(np.outer(p, w))), axis=1)
    return np.array([np.concatenate((axis[c], axis[r])) for r in range(n) for c in range(n)])


def _record_tables(monkeypatch):
    added = []
    plain = grid._GridTable.forward

    def recording(self, x):
        y = plain(self, x)
        added.append((self.grid, (y - x)[0].detach().numpy()))
        return y

    monkeypatch.setattr(grid._GridTable, "forward", recording)
    return added


def test_the_interpolated_arm_squeezes_every_grid_onto_the_training_grids_range(monkeypatch):
    added = _record_tables(monkeypatch)
    model = grid.GridModel("sincos_2d_interp", grid.FULL).eval()
    with torch.no_grad():
        model(grid.held_out_batch(16, 1)[0], (16, 16))
    [((height, width), table)] = added
    expected = _direct_interpolated_table(16, grid.FULL.d_model, base_size=8)
    assert (height, width) == (16, 16) and table.shape == expected.shape == (256, 64)
    np.testing.assert_allclose(table, expected.astype(np.float32), atol=1e-5)
    library = sincos_2d(16, 16, grid.FULL.d_model, base_size=8)
    np.testing.assert_allclose(library, expected, atol=1e-12)
    # neighbours half a step apart: cell (0, 1) of 16 x 16 is (0, 0.5) of the 8 x 8 range
    assert not np.allclose(library, sincos_2d(16, 16, grid.FULL.d_model), atol=1e-3)


def test_a_unit_is_deterministic_given_its_seed():
    assert grid.unit_rows(SETUP, "rope_1d", 1) == grid.unit_rows(SETUP, "rope_1d", 1)


def _read(path):
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def test_the_runner_skips_done_units_and_refuses_another_setups_file(tmp_path):
    out = tmp_path / "grid.csv"
    cells = tmp_path / "grid_cells.csv"
    assert grid.cells_path(out) == cells
    arms = ("rope_1d",)
    assert grid.run(SETUP, out, arms=arms, seeds=1, progress=False) == 1
    assert grid.run(SETUP, out, arms=arms, seeds=1, progress=False) == 0
    assert grid.run(SETUP, out, arms=arms, seeds=2, progress=False) == 1
    rows = _read(out)
    assert [(r["seed"], r["size"]) for r in rows] == [
        ("0", "3"),
        ("0", "4"),
        ("1", "3"),
        ("1", "4"),
    ]
    assert {r["setup"] for r in rows} == {SETUP.id}
    cell_rows = _read(cells)
    assert len(cell_rows) == 2 * 3 * 4  # two seeds, rows 1 .. 3 of a 4 x 4 grid
    assert {r["setup"] for r in cell_rows} == {SETUP.id}
    # a lost cells file is remade without writing the units' rows twice
    cells.unlink()
    assert grid.run(SETUP, out, arms=arms, seeds=2, progress=False) == 2
    assert _read(out) == rows and _read(cells) == cell_rows
    other = dataclasses.replace(SETUP, steps=SETUP.steps + 1)
    assert other.id != SETUP.id
    with pytest.raises(ValueError, match="another setup"):
        grid.run(other, out, arms=arms, seeds=2, progress=False)
    text = cells.read_text()
    cells.write_text("".join(text.splitlines(keepends=True)[:-1]))  # a cell lost
    with pytest.raises(ValueError, match="without all 4 x 4 cells"):
        grid.run(SETUP, out, arms=arms, seeds=2, progress=False)
    cells.write_text(text)
    out.write_text("".join(out.read_text().splitlines(keepends=True)[:-1]))  # a size lost
    with pytest.raises(ValueError, match="without all sizes"):
        grid.run(SETUP, out, arms=arms, seeds=2, progress=False)


class _Copies:
    """A stand-in model that predicts, at raster index i, the token ``back`` places
    earlier (symbol 0 where there is none): one-hot logits."""

    def __init__(self, back):
        self.back = back

    def __call__(self, tokens, grid_shape):
        width = grid_shape[1]
        back = width if self.back == "above" else self.back
        guess = torch.zeros_like(tokens)
        guess[:, back:] = tokens[:, :-back]
        return torch.nn.functional.one_hot(guess, grid.VOCAB).float()


def test_copies_8_back_tells_the_training_width_from_the_token_above():
    setup = grid.FULL  # trained at 8 x 8: "8 back" is the training width
    tokens, targets = grid.held_out_batch(12, setup.eval_batch)
    scored = targets >= 0
    agree = (tokens[:, 4:-8] == targets[:, 12:]).float().mean().item()  # 8 back == above

    width = grid.evaluate(_Copies(8), 12, setup)
    assert width["copies_8_back"] == 1.0
    assert width["accuracy"] == pytest.approx(
        agree, abs=1e-4
    )  # right only where the two tokens agree
    assert abs(width["accuracy"] - 1 / grid.VOCAB) < 0.01  # chance: 1 / 16
    assert scored[:, 12:].all() and not scored[:, :12].any()

    above = grid.evaluate(_Copies("above"), 12, setup)
    assert above["accuracy"] == above["accuracy_inside"] == 1.0
    assert above["copies_8_back"] == 0.0

    seven = grid.evaluate(_Copies(7), 12, setup)  # another offset: copies 8 back by chance
    assert abs(seven["copies_8_back"] - 1 / grid.VOCAB) < 0.01

    at_training_size = grid.evaluate(_Copies(8), 8, setup)  # 8 back *is* the token above
    assert at_training_size["accuracy"] == 1.0
    assert math.isnan(at_training_size["copies_8_back"])


class _CopiesWithRowBreaks:
    """:class:`_Copies` for the row-break arm: predicts, at every grid cell, the token
    ``back`` places earlier in the sequence with row breaks (symbol 0 where there is none
    or it is a row break)."""

    arm = "rope_1d_rows"

    def __init__(self, back):
        self.back = back

    def __call__(self, tokens, grid_shape):
        width = grid_shape[1]
        back = width + 1 if self.back == "above" else self.back
        sequence, _, _, cells = grid.row_break_sequence(tokens, torch.zeros_like(tokens), width)
        guess = torch.zeros_like(sequence)
        guess[:, back:] = sequence[:, :-back]
        guess[guess == grid.ROW_BREAK] = 0
        return torch.nn.functional.one_hot(guess[:, cells], grid.VOCAB).float()


def test_copies_8_back_of_the_row_break_arm_is_the_training_offset_9_back():
    setup = grid.FULL
    nine = grid.evaluate(_CopiesWithRowBreaks(9), 12, setup)
    assert nine["copies_8_back"] == 1.0
    assert abs(nine["accuracy"] - 1 / grid.VOCAB) < 0.02  # right only where they agree
    above = grid.evaluate(_CopiesWithRowBreaks("above"), 12, setup)
    assert above["accuracy"] == above["accuracy_inside"] == 1.0
    assert above["copies_8_back"] == 0.0
    eight = grid.evaluate(_CopiesWithRowBreaks(8), 12, setup)  # 8 back is not the offset here
    assert abs(eight["copies_8_back"] - 1 / grid.VOCAB) < 0.02
    at_training_size = grid.evaluate(_CopiesWithRowBreaks(9), 8, setup)
    assert at_training_size["accuracy"] == 1.0
    assert math.isnan(at_training_size["copies_8_back"])


def test_a_units_cells_cover_every_target_and_average_to_its_accuracy():
    rows, cells = grid.unit(SETUP, "rope_axial", 0)
    assert rows == grid.unit_rows(SETUP, "rope_axial", 0)
    size = SETUP.eval_sizes[-1]
    assert [(c["row"], c["col"]) for c in cells] == [
        (r, c) for r in range(1, size) for c in range(size)
    ]
    assert {c["size"] for c in cells} == {size}
    assert all(set(grid.CELL_FIELDS) == set(c) for c in cells)
    mean = sum(c["accuracy"] for c in cells) / len(cells)
    assert mean == pytest.approx(rows[-1]["accuracy"], abs=1e-4)


def test_summary_gives_the_mean_and_bootstrap_interval_per_arm_and_size():
    accuracies = {("rope_1d", 8): [1.0, 1.0, 1.0], ("rope_1d", 12): [0.1, 0.2, 0.6]}
    rows = [
        {"arm": arm, "size": str(size), "seed": str(seed), "accuracy": str(a)}
        for (arm, size), values in accuracies.items()
        for seed, a in enumerate(values)
    ]
    table = grid.summary(rows)
    assert [(t["arm"], t["size"], t["seeds"]) for t in table] == [
        ("rope_1d", 8, 3),
        ("rope_1d", 12, 3),
    ]
    assert (table[0]["mean"], table[0]["low"], table[0]["high"]) == (1.0, 1.0, 1.0)
    assert table[1]["mean"] == pytest.approx(0.3)
    assert (table[1]["mean"], table[1]["low"], table[1]["high"]) == bootstrap_interval(
        [0.1, 0.2, 0.6]
    )
    assert 0.1 <= table[1]["low"] < 0.3 < table[1]["high"] <= 0.6
    with pytest.raises(ValueError, match="seeds"):
        grid.summary(rows[:-1])  # rope_1d at 12 lacks seed 2


def test_the_committed_data_holds_every_arm_size_and_seed_of_one_setup():
    rows = _read(DATA)
    assert tuple(rows[0]) == grid.FIELDS
    assert {r["setup"] for r in rows} == {grid.FULL.id}
    keys = [(r["arm"], int(r["size"]), int(r["seed"])) for r in rows]
    expected = {(a, s, seed) for a in grid.ARMS for s in grid.FULL.eval_sizes for seed in range(5)}
    assert len(keys) == len(set(keys)) and set(keys) == expected
    assert {int(r["steps"]) for r in rows} == {grid.FULL.steps}
    assert all(0 <= float(r["accuracy"]) <= 1 for r in rows)
    training = [r for r in rows if int(r["size"]) == grid.FULL.train_size]
    assert all(math.isnan(float(r["copies_8_back"])) for r in training)
    larger = [r for r in rows if int(r["size"]) != grid.FULL.train_size]
    assert all(0 <= float(r["copies_8_back"]) <= 1 for r in larger)


def test_the_committed_cells_hold_every_cell_with_a_target_at_16_and_match_the_accuracy():
    rows, cells = _read(DATA), _read(CELLS)
    assert tuple(cells[0]) == grid.CELL_FIELDS
    assert {c["setup"] for c in cells} == {grid.FULL.id}
    size = grid.FULL.eval_sizes[-1]
    assert {int(c["size"]) for c in cells} == {size} and size == 16
    keys = [(c["arm"], int(c["seed"]), int(c["row"]), int(c["col"])) for c in cells]
    expected = {
        (a, seed, r, c)
        for a in grid.ARMS
        for seed in range(5)
        for r in range(1, size)
        for c in range(size)
    }
    assert len(keys) == len(set(keys)) == len(grid.ARMS) * 5 * 15 * 16
    assert set(keys) == expected
    assert all(0 <= float(c["accuracy"]) <= 1 for c in cells)
    _cells_average_to_their_rows(rows, cells, size)


# -- training on mixed grid sizes ---------------------------------------------------------

MIXED_QUICK = dataclasses.replace(SETUP, train_sizes=(2, 3, 4), steps=30)


def test_the_single_size_setup_keeps_the_id_its_committed_data_carry():
    assert grid.FULL.train_sizes == ()
    assert grid.FULL.id == "b1787987d12b"
    assert grid.MIXED.id not in (grid.FULL.id, dataclasses.replace(grid.MIXED, steps=601).id)
    assert grid.MIXED.train_size == 8 and grid.MIXED.eval_sizes == grid.FULL.eval_sizes
    assert grid.MIXED.train_sizes == (6, 7, 8, 9, 10)
    assert set(grid.MIXED_ARMS) == {"rope_1d", "rope_1d_rows", "rope_axial"}


def test_mixed_training_sides_vary_and_are_fixed_by_the_seed():
    def sides(seed):
        return [side for side, _, _ in grid.training_batches(MIXED_QUICK, seed)]

    first = sides(0)
    assert len(first) == MIXED_QUICK.steps and set(first) == {2, 3, 4}
    assert sides(0) == first and sides(1) != first
    for (side, tokens, targets), (_, again, _) in zip(
        grid.training_batches(MIXED_QUICK, 0), grid.training_batches(MIXED_QUICK, 0), strict=True
    ):
        assert tokens.shape == targets.shape == (MIXED_QUICK.batch_size, side * side)
        assert torch.equal(tokens, again)
        assert torch.equal(targets[:, side:], tokens[:, :-side])
    # without train_sizes: the one training size and the single-size stream, unchanged
    data = torch.Generator().manual_seed(0)
    for side, tokens, _ in grid.training_batches(SETUP, 0):
        assert side == SETUP.train_size
        assert torch.equal(tokens, grid.make_batch(data, SETUP.batch_size, side, side)[0])


def test_a_mixed_model_trains_on_every_drawn_side(monkeypatch):
    seen = []
    correct = grid.lg._correct

    def spy(model, tokens, targets, shape):
        seen.append((shape, tokens.shape[1]))
        return correct(model, tokens, targets, shape)

    monkeypatch.setattr(grid.lg, "_correct", spy)
    grid.train("rope_1d_rows", 0, MIXED_QUICK)
    expected = [side for side, _, _ in grid.training_batches(MIXED_QUICK, 0)]
    assert seen == [((side, side), side * side) for side in expected]


@pytest.mark.parametrize(
    ("sizes", "error", "message"),
    [
        ((4, 5), ValueError, r"train_size=3 must be one of train_sizes=\(4, 5\)"),
        ((1, 3), ValueError, r"got 1 in train_sizes=\(1, 3\)"),
        ((3, 2.5), ValueError, r"got 2\.5 in"),
        ((3, True), ValueError, r"got True in"),
        ([3, 4], TypeError, r"train_sizes must be a tuple of ints, got \[3, 4\]"),
    ],
)
def test_bad_train_sizes_are_refused_naming_the_value(sizes, error, message):
    with pytest.raises(error, match=message):
        dataclasses.replace(SETUP, train_sizes=sizes)


def test_a_quick_mixed_run_writes_rows_of_the_mixed_arms(tmp_path, capsys):
    out = tmp_path / "mixed.csv"
    argv = ["--mixed", "--quick", "--seeds", "1", "--no-progress", "--out", str(out)]
    assert grid.main(argv) == 0
    rows, cells = _read(out), _read(grid.cells_path(out))
    quick = grid.QUICK_MIXED
    assert tuple(rows[0]) == grid.FIELDS and tuple(cells[0]) == grid.CELL_FIELDS
    assert {r["setup"] for r in rows} == {r["setup"] for r in cells} == {quick.id}
    assert quick.train_sizes and quick.id != SETUP.id
    keys = [(r["arm"], int(r["size"])) for r in rows]
    assert keys == [(a, s) for a in grid.MIXED_ARMS for s in quick.eval_sizes]
    assert len(cells) == len(grid.MIXED_ARMS) * 3 * 4
    assert grid.main(argv) == 0  # resumed: nothing left to make
    assert capsys.readouterr().out.count("0 units made") == 1
    assert _read(out) == rows


def test_the_committed_mixed_run_holds_every_arm_size_seed_and_cell_of_its_setup():
    out = DATA.with_name("grid_mixed_sizes.csv")
    rows, cells = _read(out), _read(grid.cells_path(out))
    assert tuple(rows[0]) == grid.FIELDS and tuple(cells[0]) == grid.CELL_FIELDS
    assert {r["setup"] for r in rows} == {c["setup"] for c in cells} == {grid.MIXED.id}
    setup, arms, seeds = grid.MIXED, grid.MIXED_ARMS, range(5)
    keys = [(r["arm"], int(r["size"]), int(r["seed"])) for r in rows]
    expected = {(a, s, seed) for a in arms for s in setup.eval_sizes for seed in seeds}
    assert len(keys) == len(set(keys)) and set(keys) == expected
    assert all(0 <= float(r["accuracy"]) <= 1 for r in rows)
    size = setup.eval_sizes[-1]
    keys = [(c["arm"], int(c["seed"]), int(c["row"]), int(c["col"])) for c in cells]
    assert len(keys) == len(set(keys)) == len(arms) * 5 * (size - 1) * size
    _cells_average_to_their_rows(rows, cells, size)
