"""Unit tests of posenc.checks: silent on correct tables, and naming every exhibit's bug.

Every exhibit of chapter 12 (posenc.museum) is checked here with the finding it must
produce, so each of the check's detectors is seen failing on its bug; correct tables
of every kind must produce no finding at all.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from posenc import implementations, museum, sinusoidal
from posenc.checks import check_sinusoidal_table as check
from posenc.encoding import frequencies

DTYPES = [np.float16, np.float32, np.float64]


# ---- correct tables: no finding ---------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("layout", ["interleaved", "concat"])
@pytest.mark.parametrize("d_model", [1, 2, 3, 4, 5, 7, 8, 63, 64, 65, 128, 511, 512])
def test_correct_tables_have_no_findings(d_model, layout, dtype):
    for length in (1, 2, 200):
        table = sinusoidal(length, d_model, dtype=dtype, layout=layout)
        assert check(table, layout=layout) == []


@pytest.mark.parametrize("start", [1, 2, 1000, 10**6, 2**40])
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_correct_tables_far_from_zero_have_no_findings(start, dtype):
    table = sinusoidal(300, 96, start=start, dtype=dtype)
    assert check(table, start=start) == []


@pytest.mark.parametrize(
    "build",
    [
        implementations.naive_loops,
        implementations.vectorized,
        implementations.log_space,
        implementations.angle_addition,
    ],
)
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_every_construction_of_the_book_passes(build, dtype):
    length = 300 if build is implementations.naive_loops else 4096
    assert check(build(length, 64, dtype=dtype)) == []


def test_the_tutorial_construction_in_float32_passes():
    # float32 angles: an error that grows with the position, within float32's own reach
    table = museum.tutorial_table(8192, 512).astype(np.float32)
    assert check(table) == []


def test_a_large_float32_table_passes():
    assert check(sinusoidal(8192, 1024, dtype=np.float32)) == []


@pytest.mark.parametrize("d_model", [6, 7])
def test_a_correct_relative_table_with_negative_positions_passes(d_model):
    assert check(museum.relative_table(40, d_model), start=-40) == []


def test_other_bases_pass_when_they_are_asked_for():
    assert check(sinusoidal(100, 32, base=500000.0), base=500000.0) == []


def test_empty_tables_have_no_findings():
    assert check(np.zeros((0, 8))) == []
    assert check(np.zeros((5, 0))) == []


@settings(max_examples=60, deadline=None)
@given(
    length=st.integers(1, 300),
    d_model=st.integers(1, 300),
    start=st.integers(0, 10**7),
    dtype=st.sampled_from([np.float32, np.float64]),
    layout=st.sampled_from(["interleaved", "concat"]),
)
def test_no_false_findings_on_random_correct_tables(length, d_model, start, dtype, layout):
    table = sinusoidal(length, d_model, start=start, dtype=dtype, layout=layout)
    assert check(table, start=start, layout=layout) == []


# ---- every exhibit: its finding ---------------------------------------------------


def only(findings, *phrases):
    """Assert there is exactly one finding per phrase, in order, and each contains it."""
    assert len(findings) == len(phrases), findings
    for finding, phrase in zip(findings, phrases, strict=True):
        assert phrase in finding, (phrase, finding)


def test_double_counting():
    only(check(museum.double_counted_as_found(100, 64)), "2 * (i + 1)")
    only(check(museum.double_counted(100, 64)), "i-vs-2i double counting")
    only(check(sinusoidal(100, 64, base=1e8)), "2x too fast")


def test_exponent_i_over_d_instead_of_2i_over_d():
    only(check(sinusoidal(100, 64, base=100.0)), "2x too slowly")


def test_odd_d_model_truncated():
    only(check(museum.odd_truncated(100, 65)), "spaced for d_model = 65")


@pytest.mark.parametrize("layout", ["interleaved", "concat"])
def test_odd_d_model_zero_padded(layout):
    # the table of width 64 with a zero column added (fairseq, diffusers)
    padded = np.hstack([sinusoidal(100, 64, layout=layout), np.zeros((100, 1))])
    if layout == "concat":  # fairseq's odd table: [sin | cos | 0]
        only(check(museum.fairseq_table(100, 65), layout="concat"), "num_timescales", "zeros")
    only(check(padded, layout=layout), "last column is all zeros")


@pytest.mark.parametrize("batch_index", [0, 3])
def test_batch_axis_used_as_position_axis(batch_index):
    out = museum.added_tutorial_style(np.zeros((4, 50, 64)), sinusoidal(100, 64))
    only(check(out[batch_index]), f"row of position {batch_index}: the position does not")


@pytest.mark.parametrize(
    ("precision", "name"), [("float16", "in float16"), ("bfloat16", "in bfloat16")]
)
@pytest.mark.parametrize("length", [100, 2048])
def test_low_precision_angles(precision, name, length):
    only(check(museum.low_precision_angles(length, 64, precision=precision)), name)


def test_float32_angles_in_a_float64_table():
    table = museum.tutorial_table(1000, 64).astype(np.float32).astype(np.float64)
    only(check(table), "in float32")


def test_concat_table_read_as_interleaved_and_back():
    only(check(sinusoidal(100, 64, layout="concat")), "concat layout")
    only(check(sinusoidal(100, 64), layout="concat"), "interleaved layout")


def test_tensor2tensor_spacing():
    only(check(museum.tensor2tensor_signal(100, 512), layout="concat"), "num_timescales - 1")
    only(
        check(museum.tensor2tensor_signal(100, 512)),
        "concat layout",
        "num_timescales - 1",
    )


def test_positions_from_padding_idx_plus_one():
    table = museum.fairseq_table(200, 64, padding_idx=1)
    positions = museum.fairseq_positions(np.full((1, 100), 7), 1)[0]
    only(check(table[positions], layout="concat"), "num_timescales", "start at position 2")
    only(check(sinusoidal(100, 64, start=2)), "start at position 2, not 0")
    only(check(sinusoidal(100, 64, start=5000), start=4000), "position 5000, not 4000")
    only(check(sinusoidal(100, 64, start=1)), "off-by-one")


@pytest.mark.parametrize("start", [10**5, 10**6, 1234567])
def test_a_shift_beyond_the_lowest_frequencys_turn(start):
    # 1e4**(-510/512) * 1e5 is 10 radians: only the beat of two frequencies tells
    only(check(sinusoidal(64, 512, start=start)), f"start at position {start}, not 0")


def test_shifted_float64_tables_get_no_precision_finding():
    for start in (100, 1000, 40000):
        only(check(sinusoidal(64, 512, start=start)), "shifted by")


def test_fairseq_padding_row():
    only(
        check(museum.fairseq_table(100, 64, padding_idx=1), layout="concat"),
        "row 1 is all zeros",
        "num_timescales",
    )


def test_sin_and_cos_swapped():
    only(check(museum.swapped(100, 64)), "swapped")


@pytest.mark.parametrize(
    ("base", "phrase"), [(1000.0, "base = 1000, not 10000"), (10e4, "10e4, which is 100000")]
)
def test_wrong_base(base, phrase):
    only(check(sinusoidal(100, 64, base=base)), phrase)


@pytest.mark.parametrize(("mistake", "phrase"), [("absolute", "|i - j|"), ("negated", "j - i")])
def test_relative_position_signs(mistake, phrase):
    only(check(museum.relative_table(40, 64, mistake=mistake), start=-40), phrase)


def test_table_overwritten_by_initialisation():
    weights = museum.reinitialised(sinusoidal(100, 64, dtype=np.float32), padding_idx=1)
    only(check(weights), "row 1 is all zeros", "not sine-cosine pairs", "initialisation")


def test_scaled_table():
    only(check(sinusoidal(100, 64) * 8.0), "norm 8")


def test_all_zeros_and_non_finite():
    only(check(np.zeros((5, 4))), "all zeros")
    broken = sinusoidal(5, 4)
    broken[2, 3] = np.nan
    only(check(broken), "not finite, the first at row 2, column 3")


def test_two_bugs_at_once_are_both_named():
    table = sinusoidal(100, 64, layout="concat", start=2)
    only(check(table), "concat layout", "start at position 2")
    table = museum.swapped(100, 64)[:, :] * 1.0
    only(check(table, base=1000.0), "swapped", "base = 10000, not 1000")


def test_atol_tightens_and_loosens_the_comparison():
    float32_angles = implementations.vectorized(4096, 64, dtype=np.float32)
    assert check(float32_angles) == []
    only(check(float32_angles, atol=1e-6), "in float32")
    assert check(sinusoidal(100, 64) + 1e-3, atol=2e-3) == []


def test_an_unexplained_difference_is_reported_not_hidden():
    table = sinusoidal(100, 64)
    table[50:, 10] = 0.5
    findings = check(table)
    assert findings and "not sine-cosine pairs" in findings[0]


# ---- arguments --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"table": np.zeros((3, 4), dtype=int)}, TypeError, "table"),
        ({"table": np.zeros(4)}, ValueError, "2-D"),
        ({"base": 0.0}, ValueError, "base"),
        ({"start": True}, TypeError, "start"),
        ({"start": 2.0}, TypeError, "start"),
        ({"start": 2**53}, ValueError, "2\\*\\*53"),
        ({"layout": "halves"}, ValueError, "layout"),
        ({"atol": 0.0}, ValueError, "atol"),
        ({"atol": float("nan")}, ValueError, "atol"),
    ],
)
def test_bad_arguments_raise_at_once(kwargs, error, match):
    arguments = {"table": sinusoidal(3, 4), **kwargs}
    with pytest.raises(error, match=match):
        check(**arguments)


def test_the_default_tolerance_is_capped_far_from_zero():
    # 4 * eps(float16) * 10**4 would admit anything; the cap of 0.01 does not
    noise = museum.reinitialised(np.zeros((50, 64), dtype=np.float16), std=0.5)
    assert "not sine-cosine pairs" in check(noise, start=10**4)[0]
    far = implementations.vectorized(64, 64, start=10**6, dtype=np.float32)
    only(check(far, start=10**6), "in float32")


def test_pairs_in_an_order_no_bug_explains_are_reported_as_unexplained():
    rows = np.random.default_rng(0).permutation(100)
    only(check(sinusoidal(100, 64)[rows]), "no known bug explains it")


def test_a_shift_read_through_float16_noise():
    # float16 entries fix the lowest frequency's angle to about 5e-4 rad, i.e. several
    # positions; the higher frequencies must refine the estimate
    for start in range(1000, 20000, 1499):
        table = sinusoidal(100, 64, start=start, dtype=np.float16)
        only(check(table), f"start at position {start}, not 0")


# ---- declared conventions: tables as real libraries build them ---------------------


def test_tables_of_real_libraries_pass_when_their_conventions_are_declared():
    t2t = {"layout": "concat", "spacing": "tensor2tensor"}
    m2m100 = museum.fairseq_table(1026, 1024, padding_idx=1, dtype=np.float32)
    assert check(m2m100, **t2t, padding_idx=1) == []
    assert check(museum.fairseq_table(100, 65, padding_idx=1), **t2t, padding_idx=1) == []
    assert check(museum.whisper_table(1500, 384), **t2t) == []
    assert check(museum.marian_table(512, 512), layout="concat") == []
    assert check(museum.marian_table(64, 33), layout="concat") == []
    steps = np.arange(1000)
    flipped = museum.timestep_embedding(steps, 320, flip_sin_to_cos=True)
    assert check(flipped, **t2t, first="cos") == []
    scaled = museum.timestep_embedding(np.arange(50), 64, scale=1000, downscale_freq_shift=0)
    assert check(scaled, layout="concat", positions=1000.0 * np.arange(50)) == []
    wide = museum.timestep_embedding(steps[:100], 64, downscale_freq_shift=0, max_period=1e5)
    assert check(wide, layout="concat", base=1e5) == []


def test_undeclared_conventions_are_named_in_the_declarations_terms():
    flipped = museum.timestep_embedding(np.arange(1000), 320, flip_sin_to_cos=True)
    only(check(flipped), "layout='concat'", "first='cos'", "spacing='tensor2tensor'")
    m2m100 = museum.fairseq_table(200, 64, padding_idx=1, dtype=np.float32)
    only(
        check(m2m100, layout="concat"),
        "row 1 is all zeros: looks like a padding row of an embedding (declare it with padding_idx",
        "spacing='tensor2tensor'",
    )
    only(
        check(museum.marian_table(100, 64), layout="concat", spacing="tensor2tensor"),
        "spacing='paper'",
    )


def test_a_declared_padding_row_must_be_zero():
    table = sinusoidal(10, 8)
    only(check(table, padding_idx=3), "row 3 (padding_idx) is not all zeros")
    table[3] = 0
    assert check(table, padding_idx=3) == []


def test_scaled_and_fractional_positions_are_named_and_can_be_declared():
    diffusers = museum.timestep_embedding(np.arange(50), 64, scale=1000, downscale_freq_shift=0)
    only(check(diffusers, layout="concat"), "1000 times the declared ones")
    grid = 0.25 * np.arange(200)
    angles = grid[:, None] * frequencies(64)[None, :]  # position interpolation by 4
    table = np.empty((200, 64))
    table[:, 0::2], table[:, 1::2] = np.sin(angles), np.cos(angles)
    only(check(table), "0.25 times the declared ones")
    assert check(table, positions=grid) == []


def test_another_base_is_named_without_presuming_a_typo():
    finding = check(
        museum.timestep_embedding(np.arange(100), 64, downscale_freq_shift=0, max_period=1e5),
        layout="concat",
    )
    only(finding, "declare base=100000 if the model uses it")


def test_a_zero_padded_odd_width_is_its_own_explanation_not_a_wrong_base():
    odd = museum.timestep_embedding(np.arange(100), 65, downscale_freq_shift=0)
    only(check(odd, layout="concat"), "the table of width 64 with a zero column added")


# ---- storage rounding, angle arithmetic and the rest, told apart -------------------


@pytest.mark.parametrize("name", ["bfloat16", "float16"])
def test_a_table_stored_in_a_narrow_format_is_named_as_storage(name):
    correct = sinusoidal(100, 64, dtype=np.float32)
    stored = (
        museum.round_to_bfloat16(correct)
        if name == "bfloat16"
        else correct.astype(np.float16).astype(np.float32)
    )
    only(check(stored), f"the table was stored in {name}")
    assert check(stored, stored_dtype=name) == []
    assert all("angles computed" not in f for f in check(stored))


def test_a_float64_table_stored_in_float32_is_named_as_storage():
    stored = sinusoidal(50, 32, dtype=np.float32).astype(np.float64)
    only(check(stored), "stored in float32")
    assert check(stored, stored_dtype=np.float32) == []


def test_noise_is_an_unexplained_deviation_not_a_precision():
    rng = np.random.default_rng(0)
    noisy = sinusoidal(100, 64) + rng.uniform(-1e-3, 1e-3, (100, 64))
    only(check(noisy), "does not grow with the angle, and no known bug explains it")


def test_angle_arithmetic_is_named_only_when_the_error_grows():
    findings = check(museum.low_precision_angles(100, 64, precision="float16"))
    only(findings, "errors grow with the angle as rounding angles to")


# ---- torch tensors as they come ------------------------------------------------------


def test_torch_tensors_are_checked_as_they_come():
    torch = pytest.importorskip("torch")
    table = sinusoidal(100, 64, dtype=np.float32)
    tensor = torch.tensor(table, requires_grad=True)
    assert check(tensor) == []
    assert check(tensor[:, [*range(1, 64, 2), *range(0, 64, 2)]].detach()) != []
    assert check(torch.tensor(table).to(torch.bfloat16)) == []  # bfloat16's own rounding
    assert check(torch.tensor(table).half()) == []
    assert check(torch.tensor(table).bfloat16().float()) != []  # stored in bfloat16
    assert check(torch.tensor(table).bfloat16().float(), stored_dtype="bfloat16") == []
    with pytest.raises(TypeError, match="floating-point tensor"):
        check(torch.zeros((3, 4), dtype=torch.int64))


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"positions": np.zeros((3, 1))}, ValueError, "positions must be 1-D"),
        ({"positions": np.arange(4.0)}, ValueError, r"one entry per row \(3\), got 4"),
        ({"positions": np.arange(3.0), "start": 2}, ValueError, "start or positions"),
        ({"positions": [0.0, np.inf, 1.0]}, ValueError, "finite"),
        ({"spacing": "fairseq"}, ValueError, "spacing"),
        ({"first": "cosine"}, ValueError, "first"),
        ({"stored_dtype": "float8"}, ValueError, "stored_dtype"),
        ({"padding_idx": 3}, ValueError, r"padding_idx must be a row of the table, in \[0, 2\]"),
        ({"padding_idx": -1}, ValueError, "padding_idx"),
        ({"odd_column": "none"}, ValueError, "odd_column"),
    ],
)
def test_bad_declarations_raise_and_name_the_argument(kwargs, error, match):
    with pytest.raises(error, match=match):
        check(sinusoidal(3, 4), **kwargs)


# ---- what real tables showed (issue 37) ------------------------------------------------


def test_a_base_is_fitted_in_the_declared_spacing():
    # tensor2tensor's spacing with max_timescale 1e5: not the paper-spaced 144974
    for width in (16, 512):
        t2t = museum.tensor2tensor_signal(200, width, max_timescale=1e5)
        only(check(t2t, layout="concat", spacing="tensor2tensor"), "declare base=100000 ")
    only(check(sinusoidal(300, 64, base=5e5)), "declare base=500000 ")


def test_a_start_one_too_low_is_one_position_early_not_counted_from_one():
    findings = check(museum.relative_table(40, 64), start=-39)
    only(
        findings, "rows start at position -40, not -39: an off-by-one, every row one position early"
    )
    only(check(sinusoidal(101, 64)[:-1], start=1), "one position early")
    only(check(sinusoidal(100, 64, start=1)), "one position late")


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_one_corrupted_entry_is_localized_not_a_precision(dtype):
    table = sinusoidal(300, 64, dtype=dtype)
    table[123, 17] += 0.02
    only(check(table), "row 123 (position 123), column 17 differs by 0.02")
    table[250, 3] -= 0.5
    findings = check(table)
    assert len(findings) == 2 and "row 250 (position 250), column 3" in findings[1]


def test_a_duplicated_row_is_named_not_a_precision():
    table = sinusoidal(300, 64, dtype=np.float32)
    table[200] = table[199]
    only(check(table), "row 200 repeats row 199")
    table = museum.fairseq_table(300, 64, padding_idx=1, dtype=np.float32)
    table[150] = table[149]
    only(check(table, layout="concat", spacing="tensor2tensor", padding_idx=1), "row 150 repeats")


def test_errors_in_many_rows_are_not_a_localized_corruption():
    table = sinusoidal(300, 64, dtype=np.float32)
    table[::3, 5] += 0.02
    only(check(table), "no known bug explains it")


def test_a_growing_error_far_below_a_formats_rounding_is_not_that_format():
    # grows with the angle, but 20 times slower than float16 angles make it grow
    table = sinusoidal(2000, 64)
    signs = np.random.default_rng(1).choice([-1.0, 1.0], table.shape)
    table += 2e-5 * np.arange(2000)[:, None] * 2.0 ** -np.arange(64)[None, :] * signs
    assert all("computed in float16" not in f for f in check(table))


def test_a_transposed_table_is_named():
    table = sinusoidal(200, 64)
    only(check(table.T), "(64, 200): transposed")
    only(check(table.T, positions=np.arange(200.0)), "(64, 200): transposed")
    only(check(sinusoidal(64, 64).T), "(64, 64): transposed")
    findings = check(sinusoidal(200, 64, start=1).T)
    only(findings, "transposed", "one position late")


@pytest.mark.parametrize("shape", [(100, 1, 64), (1, 100, 64)])
def test_singleton_axes_of_a_buffer_are_dropped(shape):
    assert check(sinusoidal(100, 64).reshape(shape)) == []
    only(check(sinusoidal(100, 64, start=1).reshape(shape)), "one position late")
    with pytest.raises(ValueError, match="2-D"):
        check(np.zeros((2, 3, 4)))


def test_the_odd_widths_last_column_can_be_declared():
    # Stable Diffusion's spacing (freq_shift=0) with a zero column for an odd width
    odd = museum.timestep_embedding(np.arange(100), 65, downscale_freq_shift=0)
    assert check(odd, layout="concat", odd_column="zero") == []
    only(check(sinusoidal(100, 65), odd_column="zero"), "declare odd_column='sine'")


# ---- issue 37, round 2: misattributions a practitioner met -------------------------


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_a_dropped_or_repeated_row_is_named_not_bfloat16_angles(dtype):
    table = sinusoidal(301, 512).astype(dtype)
    only(check(np.concatenate([table[:100], table[101:]])), "position 100 is skipped at row 100")
    repeated = np.concatenate([table[:150], table[149:300]])
    only(check(repeated), "position 149 is repeated at row 150")
    assert "1 position early" in check(repeated)[0]


def test_a_duplicated_column_is_named_by_its_columns():
    table = sinusoidal(100, 64)
    table[:, 10] = table[:, 12]
    only(check(table), "column 10 is a copy of column 12")
    table = sinusoidal(100, 64)
    table[:, 60] = table[:, 62]  # a pair whose norm stays near 1: named from the formula
    only(check(table), "column 60 is a copy of column 62")


def test_small_noise_is_never_named_as_a_convention_bug_in_a_table():
    rng = np.random.default_rng(1)
    for layout in ("interleaved", "concat"):
        table = sinusoidal(300, 128, layout=layout)
        findings = check(table + 1e-3 * rng.standard_normal(table.shape), layout=layout)
        assert findings and all("no known bug explains it" in f for f in findings), findings
