"""posenc.multidim and RotaryEmbedding's axes_dims and mrope_section.

Values are computed by hand from each paper's or model's description: MAE's 2-D
sine-cosine table (column half first), diffusers' base_size convention, Qwen2-VL's
position ids and its M-RoPE sections (and, where transformers is installed, its own
rotary module), FLUX-style axial RoPE.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch

from posenc.multidim import grid_positions, mrope_position_ids, sincos_2d
from posenc.rotary import RotaryEmbedding

S1, C1 = math.sin(1.0), math.cos(1.0)


# --- sincos_2d --------------------------------------------------------------------------


def test_sincos_2d_two_by_two_by_hand():
    # dim 4: each axis gets [sin(p), cos(p)] (one speed, w_0 = 1); column half first
    expected = [
        [0.0, 1.0, 0.0, 1.0],  # (row 0, col 0)
        [S1, C1, 0.0, 1.0],  # (row 0, col 1)
        [0.0, 1.0, S1, C1],  # (row 1, col 0)
        [S1, C1, S1, C1],  # (row 1, col 1)
    ]
    table = sincos_2d(2, 2, 4)
    assert table.shape == (4, 4) and table.dtype == np.float64
    np.testing.assert_allclose(table, expected, rtol=0, atol=1e-15)


def test_sincos_2d_two_speeds_by_hand():
    # dim 8: each half has speeds w_0 = 1, w_1 = 10000 ** (-1/2) = 0.01, sines then cosines
    table = sincos_2d(2, 3, 8)
    r, c = 1, 2
    expected = [
        math.sin(c), math.sin(0.01 * c), math.cos(c), math.cos(0.01 * c),
        math.sin(r), math.sin(0.01 * r), math.cos(r), math.cos(0.01 * r),
    ]  # fmt: skip
    np.testing.assert_allclose(table[r * 3 + c], expected, rtol=0, atol=1e-15)


def test_sincos_2d_mae_layout_first_half_is_the_column():
    height, width, dim = 3, 5, 16
    table = sincos_2d(height, width, dim).reshape(height, width, dim)
    half = dim // 2
    # the first half does not change down a column, the second does not change along a row
    np.testing.assert_array_equal(
        table[:, :, :half], np.broadcast_to(table[:1, :, :half], table[:, :, :half].shape)
    )
    np.testing.assert_array_equal(
        table[:, :, half:], np.broadcast_to(table[:, :1, half:], table[:, :, half:].shape)
    )
    assert not np.allclose(table[0, 0, :half], table[0, 1, :half])
    assert not np.allclose(table[0, 0, half:], table[1, 0, half:])


def test_sincos_2d_first_row_swaps_the_halves():
    col_first = sincos_2d(3, 4, 8)
    row_first = sincos_2d(3, 4, 8, first="row")
    np.testing.assert_array_equal(row_first[:, :4], col_first[:, 4:])
    np.testing.assert_array_equal(row_first[:, 4:], col_first[:, :4])
    # token (row 1, col 0): the row half now comes first
    np.testing.assert_allclose(row_first[4, [0, 2]], [math.sin(1), math.cos(1)], atol=1e-15)


def test_sincos_2d_base_size_interpolates_positions():
    # diffusers: p = arange(n) / (n / base_size) / interpolation_scale; a 32-wide grid
    # on a base of 16 lands on 0, 0.5, 1, ..., 15.5
    table = sincos_2d(1, 32, 4, base_size=16)
    p = np.arange(32) / 2
    assert p[:3].tolist() == [0.0, 0.5, 1.0]
    np.testing.assert_allclose(table[:, 0], np.sin(p), atol=1e-15)
    np.testing.assert_allclose(table[:, 1], np.cos(p), atol=1e-15)
    # a 16-wide grid on its own base keeps integer positions; interpolation_scale divides
    np.testing.assert_array_equal(
        sincos_2d(2, 16, 8, base_size=16), sincos_2d(2, 16, 8, base_size=16)
    )
    np.testing.assert_allclose(
        sincos_2d(1, 16, 4, base_size=16)[:, 0], np.sin(np.arange(16)), atol=1e-15
    )
    halved = sincos_2d(1, 32, 4, base_size=16, interpolation_scale=2.0)
    np.testing.assert_allclose(halved[:, 0], np.sin(np.arange(32) / 4), atol=1e-15)


def test_grid_positions_raster_order():
    positions = grid_positions(2, 3)
    assert positions.dtype == np.int64
    assert positions.tolist() == [[0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [1, 2]]


# --- mrope_position_ids -----------------------------------------------------------------


def test_mrope_position_ids_image_between_text():
    ids = mrope_position_ids([3, (1, 2, 3), 2])
    assert ids.dtype == np.int64 and ids.shape == (3, 11)
    assert ids[0].tolist() == [0, 1, 2, 3, 3, 3, 3, 3, 3, 6, 7]
    assert ids[1].tolist() == [0, 1, 2, 3, 3, 3, 4, 4, 4, 6, 7]
    assert ids[2].tolist() == [0, 1, 2, 3, 4, 5, 3, 4, 5, 6, 7]


def test_mrope_position_ids_video():
    ids = mrope_position_ids([1, (2, 2, 2), 1])
    assert ids[0].tolist() == [0, 1, 1, 1, 1, 2, 2, 2, 2, 3]
    assert ids[1].tolist() == [0, 1, 1, 2, 2, 1, 1, 2, 2, 3]
    assert ids[2].tolist() == [0, 1, 2, 1, 2, 1, 2, 1, 2, 3]
    # the next start is the largest id so far plus one, here the temporal one
    assert mrope_position_ids([(3, 1, 1), 1]).tolist() == [[0, 1, 2, 3]] + [[0, 0, 0, 3]] * 2


def test_mrope_position_ids_text_only_is_arange():
    assert mrope_position_ids([4]).tolist() == [[0, 1, 2, 3]] * 3


# --- axial RoPE -------------------------------------------------------------------------


def _score(module, q, k, pos_q, pos_k):
    """q . k after rotating q at pos_q and k at pos_k (each a tuple of axis positions)."""
    x = torch.stack((q, k))[:, None, :]  # (2 tokens as a batch, seq 1, dim)
    positions = torch.tensor([[pos_q], [pos_k]])  # (batch 2, seq 1, n_axes)
    if module.axes_dims is None:
        positions = positions[..., 0]  # plain RoPE: (batch 2, seq 1)
    rotated = module(x[:, None], positions)[:, 0, 0]  # x as (batch, heads 1, seq 1, dim)
    return float(rotated[0] @ rotated[1])


@pytest.mark.parametrize("pairing", ["half", "interleaved"])
def test_axial_with_one_axis_is_plain_rope(pairing):
    torch.manual_seed(0)
    x = torch.randn(2, 3, 7, 12, dtype=torch.float64)
    positions = torch.tensor([0, 5, 2, 9, 100, 3, 1])
    for rotary_dim in (12, 8):
        axial = RotaryEmbedding(12, pairing=pairing, rotary_dim=rotary_dim, axes_dims=(rotary_dim,))
        plain = RotaryEmbedding(12, pairing=pairing, rotary_dim=rotary_dim)
        torch.testing.assert_close(
            axial(x, positions[:, None]), plain(x, positions), rtol=0, atol=1e-12
        )


def test_axial_score_depends_on_the_row_and_column_offsets_only():
    torch.manual_seed(1)
    q, k = torch.randn(2, 16, dtype=torch.float64)
    axial = RotaryEmbedding(16, axes_dims=(8, 8))
    reference = _score(axial, q, k, (1, 2), (3, 1))  # (Δrow, Δcol) = (2, -1)
    for dr, dc in [(0, 0), (5, 0), (0, 7), (4, 9), (20, 3)]:
        shifted = _score(axial, q, k, (1 + dr, 2 + dc), (3 + dr, 1 + dc))
        assert abs(shifted - reference) < 1e-12
    assert abs(_score(axial, q, k, (1, 2), (3, 2)) - reference) > 1e-3  # another offset
    # the token directly above, on grids of width 4 and 6: the same (Δrow, Δcol) = (1, 0)
    plain = RotaryEmbedding(16)
    above = {}
    for width in (4, 6):
        r, c = 2, 1
        above[width] = (
            _score(axial, q, k, (r, c), (r - 1, c)),
            _score(plain, q, k, (r * width + c,), ((r - 1) * width + c,)),
        )
    assert abs(above[4][0] - above[6][0]) < 1e-12  # axial: the same score
    assert abs(above[4][1] - above[6][1]) > 1e-3  # 1-D raster: the offset is the width


@pytest.mark.parametrize("pairing", ["half", "interleaved"])
def test_axial_chunk_is_plain_rope_of_its_width(pairing):
    torch.manual_seed(2)
    dims = (4, 6, 6)
    x = torch.randn(2, 3, 5, 18, dtype=torch.float64)  # 2 features pass through
    positions = torch.randint(0, 50, (2, 5, 3))
    module = RotaryEmbedding(18, pairing=pairing, rotary_dim=16, axes_dims=dims, base=100.0)
    out = module(x, positions)
    start = 0
    for axis, d in enumerate(dims):
        chunk = RotaryEmbedding(d, pairing=pairing, base=100.0)
        part = torch.stack(
            [chunk(x[b, :, :, start : start + d], positions[b, :, axis]) for b in range(2)]
        )
        torch.testing.assert_close(out[..., start : start + d], part, rtol=0, atol=1e-12)
        start += d
    torch.testing.assert_close(out[..., 16:], x[..., 16:], rtol=0, atol=0)
    expected_theta = np.concatenate([100.0 ** (-np.arange(0, d, 2) / d) for d in dims])
    np.testing.assert_allclose(module.frequencies, expected_theta, rtol=1e-15)


def test_axial_layouts_batches_dtypes_and_repr():
    torch.manual_seed(3)
    x = torch.randn(2, 4, 6, 8)  # (batch, heads, seq, dim), float32
    positions = torch.from_numpy(grid_positions(2, 3))
    module = RotaryEmbedding(8, axes_dims=(4, 4))
    shared = module(x, positions)
    batched = module(x, positions[None].expand(2, -1, -1))
    assert shared.dtype == torch.float32
    torch.testing.assert_close(shared, batched, rtol=0, atol=0)
    bshd = RotaryEmbedding(8, axes_dims=(4, 4), layout="bshd")
    torch.testing.assert_close(bshd(x.transpose(1, 2), positions).transpose(1, 2), shared)
    q, k = module.apply(x, x[:, :2], positions)
    torch.testing.assert_close(q, shared)
    torch.testing.assert_close(k, shared[:, :2])
    assert module.axes_dims == (4, 4) and module.mrope_section is None and module.n_axes == 2
    assert "axes_dims=(4, 4)" in repr(module)


# --- M-RoPE -----------------------------------------------------------------------------


@pytest.mark.parametrize("pairing", ["half", "interleaved"])
def test_mrope_equal_rows_is_plain_rope(pairing):
    torch.manual_seed(4)
    x = torch.randn(2, 3, 6, 20, dtype=torch.float64)
    positions = torch.tensor([0, 1, 2, 7, 40, 41])
    mrope = RotaryEmbedding(20, pairing=pairing, rotary_dim=16, mrope_section=(2, 3, 3))
    plain = RotaryEmbedding(20, pairing=pairing, rotary_dim=16)
    torch.testing.assert_close(
        mrope(x, positions.expand(3, -1)), plain(x, positions), rtol=0, atol=1e-12
    )
    batched = torch.stack((positions, positions.flip(0)))  # (batch, seq)
    torch.testing.assert_close(
        mrope(x, batched.expand(3, -1, -1)), plain(x, batched), rtol=0, atol=1e-12
    )


def test_mrope_sections_by_hand():
    torch.manual_seed(5)
    module = RotaryEmbedding(16, mrope_section=(2, 3, 3))  # half pairs: i and i + 8
    x = torch.randn(16, dtype=torch.float64)
    t, h, w = 5, 7, 11
    out = module(x[None], torch.tensor([[t], [h], [w]]))[0]
    for pair, position in [(1, t), (2, h), (4, h), (5, w), (7, w)]:
        angle = position * 10000.0 ** (-2 * pair / 16)
        x0, x1 = float(x[pair]), float(x[pair + 8])
        expected = (
            x0 * math.cos(angle) - x1 * math.sin(angle),
            x0 * math.sin(angle) + x1 * math.cos(angle),
        )
        got = (float(out[pair]), float(out[pair + 8]))
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12)
    # the height pairs (2, 3, 4 and 10, 11, 12) move with the height position only
    height = [2, 3, 4, 10, 11, 12]
    others = module(x[None], torch.tensor([[t + 3], [h], [w + 9]]))[0]
    torch.testing.assert_close(others[height], out[height], rtol=0, atol=0)
    assert not torch.allclose(others[[0, 1, 8, 9]], out[[0, 1, 8, 9]])
    moved = module(x[None], torch.tensor([[t], [h + 1], [w]]))[0]
    assert not torch.allclose(moved[height], out[height])
    rest = [0, 1, 5, 6, 7, 8, 9, 13, 14, 15]
    torch.testing.assert_close(moved[rest], out[rest], rtol=0, atol=0)
    assert "mrope_section=(2, 3, 3)" in repr(module) and module.n_axes == 3


def test_mrope_matches_qwen2_vl():
    pytest.importorskip("transformers")
    from transformers.models.qwen2_vl import configuration_qwen2_vl, modeling_qwen2_vl

    config = configuration_qwen2_vl.Qwen2VLTextConfig(
        hidden_size=64,
        num_attention_heads=4,  # head_dim 16
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3]},
    )
    rotary = modeling_qwen2_vl.Qwen2VLRotaryEmbedding(config)
    ids = torch.from_numpy(mrope_position_ids([3, (1, 2, 3), 2, (2, 2, 2), 1]))
    position_ids = ids[:, None]  # (3, batch 1, seq)
    torch.manual_seed(6)
    q = torch.randn(1, 4, ids.shape[1], 16)
    # transformers' rotary module splits the pairs into the sections (it returns
    # cos and sin of width head_dim, each angle twice, for rotate_half)
    cos, sin = rotary(q, position_ids)
    theirs, _ = modeling_qwen2_vl.apply_rotary_pos_emb(q, q, cos, sin)
    ours = RotaryEmbedding(16, mrope_section=(2, 3, 3))(q, position_ids)
    # transformers forms its angles in float32: a few 1e-6 at positions below 20
    torch.testing.assert_close(ours, theirs, rtol=0, atol=2e-5)
    mine_cos, mine_sin = RotaryEmbedding(16, mrope_section=(2, 3, 3)).cos_sin(
        position_ids, torch.float32, hf_format=True
    )
    torch.testing.assert_close(mine_cos, cos, rtol=0, atol=2e-6)
    torch.testing.assert_close(mine_sin, sin, rtol=0, atol=2e-6)
    # with sections that differ from the model's, the results differ: the check can fail
    other = RotaryEmbedding(16, mrope_section=(3, 3, 2))(q, position_ids)
    assert not torch.allclose(other, theirs, atol=1e-3)


def test_sincos_2d_is_two_sinusoidal_tables_column_first():
    # the chapter's construction: [T(col) | T(row)], T = chapter 2's concat-layout table
    from posenc import sinusoidal

    rows, cols = grid_positions(6, 9).T
    by_hand = np.hstack(
        [sinusoidal(9, 32, layout="concat")[cols], sinusoidal(6, 32, layout="concat")[rows]]
    )
    np.testing.assert_allclose(sincos_2d(6, 9, 64), by_hand, rtol=0, atol=1e-12)
    assert not np.allclose(sincos_2d(6, 9, 64, first="row"), by_hand, atol=1e-3)


def test_axial_mode_is_rope_on_each_half():
    # the chapter's axial RoPE from posenc.alternatives.rope, axes given as (column, row)
    from posenc.alternatives import rope

    x = np.random.default_rng(0).normal(size=(54, 64))
    rows, cols = grid_positions(6, 9).T
    by_hand = np.hstack([rope(x[:, :32], cols, base=100.0), rope(x[:, 32:], rows, base=100.0)])
    module = RotaryEmbedding(64, base=100.0, axes_dims=(32, 32), pairing="interleaved")
    col_row = torch.from_numpy(np.stack([cols, rows], axis=1))
    np.testing.assert_allclose(module(torch.from_numpy(x), col_row).numpy(), by_hand, atol=1e-12)
    row_col = torch.from_numpy(np.stack([rows, cols], axis=1))  # axes swapped: differs
    assert not np.allclose(module(torch.from_numpy(x), row_col).numpy(), by_hand, atol=1e-3)


def _transformers_rope_index(segments, merge=2, with_deltas=False):
    """transformers' Qwen2VLModel.get_rope_index on text spans and (t, h, w) grids (in
    merged tokens), driven through the few attributes it reads from its model."""
    import functools
    import types

    from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VLModel

    if not hasattr(Qwen2VLModel, "get_vision_position_ids"):
        pytest.skip("this transformers version builds the ids another way")
    kinds, grids = [], {1: [], 2: []}  # 0 text, 1 image, 2 video
    for segment in segments:
        if isinstance(segment, int):
            kinds += [0] * segment
        else:
            t, h, w = segment
            kinds += [1 if t == 1 else 2] * (t * h * w)
            grids[1 if t == 1 else 2].append((t, h * merge, w * merge))
    kinds = torch.tensor([kinds])
    model = types.SimpleNamespace(
        config=types.SimpleNamespace(vision_config=types.SimpleNamespace(spatial_merge_size=merge)),
        get_vision_position_ids=functools.partial(Qwen2VLModel.get_vision_position_ids, None),
    )
    image, video = (torch.tensor(g) if g else None for g in grids.values())
    ids, deltas = Qwen2VLModel.get_rope_index(model, torch.zeros_like(kinds), kinds, image, video)
    return (ids[:, 0].numpy(), int(deltas)) if with_deltas else ids[:, 0].numpy()


@pytest.mark.parametrize(
    "segments", [[4, (1, 3, 5), 3], [2, (2, 2, 3), 1], [2, (1, 2, 3), 1, (1, 4, 2), 2]]
)
def test_mrope_position_ids_match_transformers_on_images_and_short_videos(segments):
    pytest.importorskip("transformers")
    assert np.array_equal(mrope_position_ids(segments), _transformers_rope_index(segments))


def test_mrope_position_ids_after_a_long_video():
    # Qwen2-VL's rule (the paper, transformers 4.45 to 4.49): the text after a video of
    # 6 temporal patches of 2 x 2 tokens starts at the largest id plus one, 2 + 6. Recent
    # transformers advance the start by max(h, w) instead, reusing ids of the video.
    pytest.importorskip("transformers")
    segments = [2, (6, 2, 2), 2]
    ours, theirs = mrope_position_ids(segments), _transformers_rope_index(segments)
    assert ours[0, -2] == 2 + 6
    assert theirs[0, -2] in (2 + 6, 2 + max(2, 2))
    assert np.array_equal(ours[:, :-2], theirs[:, :-2])


def test_transformers_5_23_restarts_text_below_a_long_video():
    # Pins what chapter 24 states: transformers 5.23's get_rope_index advances by
    # max(h, w) after a video too, so after 2 text tokens and a video of 6 x 2 x 3
    # tokens the text goes on at 2 + 3 = 5, below the video's largest temporal id 7,
    # where Qwen2-VL's rule (mrope_position_ids) goes on at 8.
    transformers = pytest.importorskip("transformers")
    if transformers.__version__ != "5.23.0":
        pytest.skip("pinned to transformers 5.23.0")
    segments = [2, (6, 2, 3), 2]
    ours, theirs = mrope_position_ids(segments), _transformers_rope_index(segments)
    assert ours[:, -2:].tolist() == [[8, 9]] * 3
    assert theirs[:, -2:].tolist() == [[5, 6]] * 3
    assert theirs[0, 2:-2].max() == 7


def test_transformers_5_23_rope_deltas_disagree_with_its_prompt_ids():
    # Chapter 24's version box: rope_deltas (added to the cache position of each generated
    # token) comes from the largest id, 7, so the first generated token of the 40-token
    # prompt gets 40 - 32 = 8 while the prompt's last text token sits at 6.
    transformers = pytest.importorskip("transformers")
    if transformers.__version__ != "5.23.0":
        pytest.skip("pinned to transformers 5.23.0")
    ids, deltas = _transformers_rope_index([2, (6, 2, 3), 2], with_deltas=True)
    assert ids.shape[1] == 40 and ids[0, -1] == 6
    assert deltas == -32 and ids.shape[1] + deltas == ids.max() + 1 == 8


def test_qwen2_5_vl_temporal_ids_count_seconds():
    # Chapter 24: Qwen2.5-VL spaces a video's temporal ids by tokens_per_second times
    # second_per_grid_t, so two samplings of the same seconds get the same ids.
    pytest.importorskip("transformers")
    import functools
    import types

    from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VLModel

    def temporal(frames_per_patch_grid, seconds_per_patch, tokens_per_second=2):
        t = frames_per_patch_grid
        kinds = torch.tensor([[0] + [2] * (t * 1 * 1) + [0]])
        vision = types.SimpleNamespace(spatial_merge_size=2, tokens_per_second=tokens_per_second)
        model = types.SimpleNamespace(
            config=types.SimpleNamespace(vision_config=vision),
            get_vision_position_ids=functools.partial(
                Qwen2_5_VLModel.get_vision_position_ids, None
            ),
        )
        ids, _ = Qwen2_5_VLModel.get_rope_index(
            model,
            torch.zeros_like(kinds),
            kinds,
            None,
            torch.tensor([[t, 2, 2]]),
            torch.tensor([seconds_per_patch]),
        )
        return ids[0, 0, 1:-1].tolist()

    assert temporal(4, 2.0) == [1, 5, 9, 13]  # start 1, steps of 2 * 2.0
    assert temporal(16, 0.5)[::4] == temporal(4, 2.0)
    assert temporal(4, 2.0, tokens_per_second=1) == [1, 3, 5, 7]


# --- bad input --------------------------------------------------------------------------

BAD_MULTIDIM = [
    (sincos_2d, (0, 4, 8), {}, "0"),
    (sincos_2d, (4, -1, 8), {}, "-1"),
    (sincos_2d, (2.0, 4, 8), {}, "2.0"),
    (sincos_2d, (4, 4, 6), {}, "6"),
    (sincos_2d, (4, 4, 8), {"first": "x"}, "'x'"),
    (sincos_2d, (4, 4, 8), {"base": 0.0}, "0.0"),
    (sincos_2d, (4, 4, 8), {"base_size": -16}, "-16"),
    (sincos_2d, (4, 4, 8), {"interpolation_scale": 0}, "0"),
    (grid_positions, (0, 3), {}, "0"),
    (grid_positions, (3, True), {}, "True"),
    (mrope_position_ids, ([],), {}, "[]"),
    (mrope_position_ids, ("abc",), {}, "'abc'"),
    (mrope_position_ids, ([3, 0],), {}, "0"),
    (mrope_position_ids, ([-2],), {}, "-2"),
    (mrope_position_ids, ([(1, 0, 3)],), {}, "(1, 0, 3)"),
    (mrope_position_ids, ([(1, -2, 3)],), {}, "(1, -2, 3)"),
    (mrope_position_ids, ([(2, 3)],), {}, "(2, 3)"),
    (mrope_position_ids, ([(1, 2.0, 3)],), {}, "(1, 2.0, 3)"),
    (mrope_position_ids, ([1.5],), {}, "1.5"),
    (mrope_position_ids, ([True],), {}, "True"),
    (mrope_position_ids, (["text"],), {}, "'text'"),
]


@pytest.mark.parametrize(("function", "args", "kwargs", "named"), BAD_MULTIDIM)
def test_multidim_bad_input_names_the_value(function, args, kwargs, named):
    with pytest.raises((TypeError, ValueError), match=re.escape(named)):
        function(*args, **kwargs)


BAD_MODULE = [
    ({"axes_dims": (6, 5, 5)}, "(6, 5, 5)"),
    ({"axes_dims": (8, 4)}, "(8, 4)"),
    ({"axes_dims": (0, 16)}, "(0, 16)"),
    ({"axes_dims": ()}, "()"),
    ({"axes_dims": (8.0, 8)}, "(8.0, 8)"),
    ({"axes_dims": 16}, "16"),
    ({"axes_dims": (8, 8), "frequencies": np.ones(8)}, "(8, 8)"),
    ({"axes_dims": (8, 8), "mrope_section": (2, 3, 3)}, "(2, 3, 3)"),
    ({"mrope_section": (4, 4)}, "(4, 4)"),
    ({"mrope_section": (2, 3, 4)}, "(2, 3, 4)"),
    ({"mrope_section": (0, 4, 4)}, "(0, 4, 4)"),
    ({"mrope_section": (-1, 5, 4)}, "(-1, 5, 4)"),
    ({"mrope_section": "233"}, "'233'"),
]


@pytest.mark.parametrize(("kwargs", "named"), BAD_MODULE)
def test_rotary_bad_axes_name_the_values(kwargs, named):
    with pytest.raises((TypeError, ValueError), match=re.escape(named)):
        RotaryEmbedding(16, **kwargs)


BAD_POSITIONS = [
    ({"axes_dims": (8, 8)}, None, "None"),
    ({"axes_dims": (8, 8)}, torch.arange(5), "(5,)"),
    ({"axes_dims": (8, 8)}, torch.zeros(5, 3, dtype=torch.int64), "(5, 3)"),
    ({"axes_dims": (8, 8)}, torch.zeros(4, 2, dtype=torch.int64), "(4, 2)"),
    ({"axes_dims": (8, 8)}, torch.zeros(3, 5, 2, dtype=torch.int64), "(3, 5, 2)"),
    ({"axes_dims": (8, 8)}, torch.full((5, 2), -1), "-1"),
    ({"axes_dims": (8, 8)}, torch.zeros(5, 2), "torch.float32"),
    ({"mrope_section": (2, 3, 3)}, None, "None"),
    ({"mrope_section": (2, 3, 3)}, torch.arange(5), "(5,)"),
    ({"mrope_section": (2, 3, 3)}, torch.zeros(5, 3, dtype=torch.int64), "(5, 3)"),
    ({"mrope_section": (2, 3, 3)}, torch.zeros(2, 5, dtype=torch.int64), "(2, 5)"),
    ({"mrope_section": (2, 3, 3)}, torch.zeros(3, 4, dtype=torch.int64), "(3, 4)"),
    ({"mrope_section": (2, 3, 3)}, torch.full((3, 5), -2), "-2"),
]


@pytest.mark.parametrize(("kwargs", "positions", "named"), BAD_POSITIONS)
def test_rotary_bad_positions_name_the_shape(kwargs, positions, named):
    module = RotaryEmbedding(16, **kwargs)
    x = torch.randn(2, 2, 5, 16)  # (batch 2, heads, seq 5, dim)
    with pytest.raises((TypeError, ValueError), match=re.escape(named)):
        module(x, positions)


def test_mrope_between_patches_of_one_image_is_axial():
    # two patches of one image share the temporal id: the temporal pairs turn by the same
    # angle on both sides (offset 0), and the score depends on (Δrow, Δcol) alone
    torch.manual_seed(2)
    q, k = torch.randn(2, 128, dtype=torch.float64)
    mrope = RotaryEmbedding(128, base=1e6, mrope_section=(16, 24, 24))

    def score(query_ids, key_ids):
        ids = torch.tensor([query_ids, key_ids]).T  # (3, 2)
        rotated = mrope(torch.stack([q, k]), ids)
        return float(rotated[0] @ rotated[1])

    s = 4
    reference = score((s, s + 2, s + 1), (s, s, s + 3))  # (Δrow, Δcol) = (2, -2)
    for start, dr, dc in [(0, 0, 0), (9, 1, 5), (30, 6, 2)]:
        shifted = score(
            (start, start + 2 + dr, start + 1 + dc), (start, start + dr, start + 3 + dc)
        )
        assert abs(shifted - reference) < 1e-9
    # temporal pairs idle: a temporal id of 0 on both sides gives the same score
    assert abs(score((0, s + 2, s + 1), (0, s, s + 3)) - reference) < 1e-9
    # a query at another temporal id (a text token or a later frame) adds a temporal term
    assert abs(score((s + 3, s + 2, s + 1), (s, s, s + 3)) - reference) > 1e-3


def test_mrope_patches_of_one_image_add_the_unrotated_temporal_term():
    # chapter 24: with equal temporal ids the temporal pairs add q_t . k_t unrotated, and
    # the score is that plus the score of the height and width pairs alone
    q, k = torch.from_numpy(np.random.default_rng(3).normal(size=(2, 128)))
    mrope = RotaryEmbedding(128, base=1e6, mrope_section=(16, 24, 24))
    temporal = np.r_[0:16, 64:80]  # the features of pairs 0-15

    def score(query, key, query_ids=(9, 12, 10), key_ids=(9, 10, 12)):
        rotated = mrope(torch.stack([query, key]), torch.tensor([query_ids, key_ids]).T)
        return float(rotated[0] @ rotated[1])

    spatial_q, spatial_k = q.clone(), k.clone()
    spatial_q[temporal] = spatial_k[temporal] = 0
    content = float(q[temporal] @ k[temporal])
    assert abs(score(q, k) - content - score(spatial_q, spatial_k)) < 1e-12


def _transformers_model_source(name, kind):
    import importlib.util
    import pathlib

    spec = importlib.util.find_spec(f"transformers.models.{name}.{kind}_{name}")
    return pathlib.Path(spec.origin).read_text(encoding="utf-8")


def test_chapter_24_landscape_table_matches_transformers_source():
    # Chapter 24's table of image-token ids and its Qwen2.5-Omni sentence, read from
    # transformers' configuration and modeling files.
    transformers = pytest.importorskip("transformers")
    if transformers.__version__ != "5.23.0":
        pytest.skip("pinned to transformers 5.23.0")
    src = _transformers_model_source
    assert transformers.Qwen2_5_VLConfig().vision_config.tokens_per_second == 4
    for name in "qwen2_vl qwen2_5_vl qwen2_5_omni qwen3_vl glm4v ernie4_5_vl_moe".split():
        assert "mrope_section" in src(name, "configuration"), name
    for name in ("llava", "internvl", "gemma3", "llama4"):
        text = src(name, "modeling")
        assert "mrope" not in text and "get_rope_index" not in text, name
    # ERNIE-4.5-VL: height and width interleaved on the fast pairs, time on the slowest 20
    ernie = src("ernie4_5_vl_moe", "modeling")
    assert '"mrope_section", [22, 22, 20]' in ernie and "t_dim = mrope_section[2]" in ernie
    assert "inv_freq_3d[-t_dim:] = inv_freq[-t_dim:]" in ernie
    assert "torch.cat([freq_hw, freq_t], dim=-1)" in ernie
    # interleaved: Qwen3-VL, Qwen3-Omni, Qwen3.5 (partial rotary 0.25 of 256)
    for name, default in (
        ("qwen3_vl", "[24, 20, 20]"),
        ("qwen3_omni_moe", "[24, 20, 20]"),
        ("qwen3_5", "[11, 11, 10]"),
    ):
        text = src(name, "modeling")
        assert "idx = slice(offset, length, 3)" in text, name
        assert f'"mrope_section", {default})' in text, name
    q35 = src("qwen3_5", "configuration")
    assert "head_dim: int = 256" in q35
    assert 'kwargs.setdefault("partial_rotary_factor", 0.25)' in q35
    assert "freq.split(self.mrope_section, dim=-1)" in src("glm4v_moe", "modeling")
    # Qwen2.5-Omni: 25 temporal ids a second, 2-second chunks, one audio token per 40 ms
    omni = src("qwen2_5_omni", "configuration")
    assert "position_id_per_seconds: int = 25" in omni and "seconds_per_chunk: int = 2" in omni
    omni_model = src("qwen2_5_omni", "modeling")
    assert "t_ntoken_per_chunk = int(position_id_per_seconds * seconds_per_chunk)" in omni_model
    audio = "audio_len = ((audio_seqlens[audio_idx] - 1) // 2 + 1 - 2) // 2 + 1"
    assert audio in omni_model
    mel = transformers.WhisperFeatureExtractor()  # mel frames every hop_length samples
    assert mel.sampling_rate / mel.hop_length / 4 == 25  # halved twice: 40 ms a token
