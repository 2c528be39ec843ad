"""posenc.checks.rope: a RoPE cos/sin cache checked against float64 angles, and each
mistake that real code makes named: float32 angles, the pairing, partial rotary, a
wrong base, scaled frequencies, an attention scale, storage in a narrow format, shifted
positions, swapped cos and sin, the sign of sin, the 2i exponent bug, a corrupted entry
and an odd width; batch and singleton axes; atol, allow and stored_dtype."""

from __future__ import annotations

import numpy as np
import pytest

from posenc import museum
from posenc.checks import check_rope_cache
from posenc.checks.rope import check_rope_cache as same
from posenc.long_context import scaled_frequencies
from posenc.real_caches import build, real_caches


def cache(
    length, dim, *, base=1e4, start=0, pairing="half", freqs=None, scale=1.0, dtype=np.float32
):
    """cos and sin from float64 angles, rounded once to ``dtype``."""
    theta = base ** (-np.arange(0, dim, 2) / dim) if freqs is None else freqs
    angles = np.arange(start, start + length)[:, None] * theta[None, :]
    cos, sin = scale * np.cos(angles), scale * np.sin(angles)
    if pairing == "half":
        cos, sin = np.concatenate([cos, cos], 1), np.concatenate([sin, sin], 1)
    elif pairing == "interleaved":
        cos, sin = np.repeat(cos, 2, 1), np.repeat(sin, 2, 1)
    return cos.astype(dtype), sin.astype(dtype)


def only(findings, *phrases):
    assert len(findings) == len(phrases), findings
    for finding, phrase in zip(findings, phrases, strict=True):
        assert phrase in finding, (phrase, finding)


def test_the_function_is_reexported_by_posenc_checks():
    assert check_rope_cache is same


@pytest.mark.parametrize("pairing", ["half", "interleaved"])
@pytest.mark.parametrize("start", [0, 100_000])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_caches_from_float64_angles_have_no_findings(pairing, start, dtype):
    cos, sin = cache(2048, 128, start=start, pairing=pairing, dtype=dtype)
    assert check_rope_cache(cos, sin, pairing=pairing, start=start) == []
    per_pair = cache(64, 32, start=start, pairing=None, dtype=dtype)
    assert check_rope_cache(*per_pair, start=start) == []


def test_float32_angles_are_named_far_out_and_even_near_zero():
    cos, sin = museum.float32_rope_cache(2048, 128, start=100_000)
    only(check_rope_cache(cos, sin, start=100_000), "looks like angles computed in float32")
    error = np.abs(cos - cache(2048, 128, start=100_000, dtype=np.float64)[0]).max()
    assert 1e-4 < error < 1e-2  # about 1e-3: the size the finding reports
    only(check_rope_cache(*museum.float32_rope_cache(2048, 128)), "angles computed in float32")


@pytest.mark.parametrize("name", ["bfloat16", "float16"])
def test_angles_in_a_narrower_format_are_named(name):
    theta = (1e4 ** (-np.arange(0, 64, 2) / 64)).astype(np.float32)
    if name == "bfloat16":
        narrow = museum.round_to_bfloat16
    else:

        def narrow(values):
            return np.asarray(values, dtype=np.float32).astype(np.float16).astype(np.float32)

    angles = narrow(np.outer(narrow(np.arange(200, dtype=np.float32)), narrow(theta)))
    cos, sin = np.cos(angles), np.sin(angles)
    findings = check_rope_cache(np.concatenate([cos, cos], 1), np.concatenate([sin, sin], 1))
    only(findings, f"looks like angles computed in {name}")


def test_the_other_pairing_is_named():
    only(
        check_rope_cache(*cache(256, 64, pairing="interleaved")),
        "pairing='interleaved', not pairing='half'",
    )
    only(
        check_rope_cache(*cache(256, 64, pairing="half"), pairing="interleaved"),
        "pairing='half', not pairing='interleaved'",
    )


def test_a_wrong_base_and_ntk_scaling_are_named():
    only(check_rope_cache(*cache(512, 64, base=500000.0)), "base = 500000, not 10000")
    ntk, _ = scaled_frequencies(128, method="ntk", factor=4.0)
    only(
        check_rope_cache(*cache(2048, 128, freqs=ntk)),
        "NTK-aware scaling gives this base for alpha = 4",
    )


def test_partial_rotary_is_named_and_can_be_declared():
    spaced_for_head = 1e4 ** (-np.arange(0, 32, 2) / 128)
    only(check_rope_cache(*cache(512, 32, freqs=spaced_for_head)), "partial rotary")
    assert check_rope_cache(*cache(512, 32), rotary_dim=32) == []


@pytest.mark.parametrize(
    ("method", "kwargs", "phrase"),
    [
        ("linear", {}, "position interpolation (rope_scaling 'linear', factor 4)"),
        ("yarn", {"original_length": 4096}, "yarn scaling with factor 4 and original_length 4096"),
        ("llama3", {"original_length": 8192}, "llama3 scaling with factor 4"),
    ],
)
def test_scaled_frequencies_are_named_and_can_be_declared(method, kwargs, phrase):
    freqs, scale = scaled_frequencies(128, method=method, factor=4.0, **kwargs)
    cos, sin = cache(2048, 128, freqs=freqs, scale=scale)
    findings = check_rope_cache(cos, sin)
    assert phrase in findings[-1], findings
    assert check_rope_cache(cos, sin, frequencies=freqs, attention_scale=scale) == []


def test_an_attention_scale_is_named():
    only(check_rope_cache(*cache(256, 64, scale=1.2)), "multiplied by 1.2, not attention_scale=1")
    assert check_rope_cache(*cache(256, 64, scale=1.2), attention_scale=1.2) == []


def test_an_unexplained_difference_is_reported():
    cos, sin = cache(256, 64)
    cos[100:, 3] = np.cos(np.arange(100, 256) * 0.7)  # another angle in one column
    cos[100:, 35] = cos[100:, 3]
    sin[100:, 3] = np.sin(np.arange(100, 256) * 0.7)
    sin[100:, 35] = sin[100:, 3]
    only(check_rope_cache(cos, sin), "no known mistake explains it")


def test_torch_tensors_as_they_come():
    torch = pytest.importorskip("torch")
    cos, sin = cache(512, 64)
    assert check_rope_cache(torch.tensor(cos, requires_grad=True), torch.tensor(sin)) == []
    assert check_rope_cache(torch.tensor(cos).bfloat16(), torch.tensor(sin).bfloat16()) == []
    far = museum.float32_rope_cache(512, 64, start=100_000)
    findings = check_rope_cache(*(torch.tensor(x) for x in far), start=100_000)
    only(findings, "angles computed in float32")


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"sin": np.zeros((4, 6))}, ValueError, "same shape"),
        ({"cos": np.zeros(8), "sin": np.zeros(8)}, ValueError, "2-D"),
        ({"rotary_dim": 7}, ValueError, "rotary_dim must be even"),
        ({"rotary_dim": 12}, ValueError, "the cache has 8 columns"),
        ({"pairing": "neox"}, ValueError, "pairing"),
        ({"positions": np.arange(5)}, ValueError, r"one entry per row \(4\)"),
        ({"positions": np.zeros((4, 1))}, ValueError, "1-D"),
        ({"frequencies": np.ones((2, 2))}, ValueError, "frequencies must be 1-D"),
        ({"attention_scale": 0.0}, ValueError, "attention_scale"),
        ({"cos": np.zeros((4, 8), dtype=int)}, TypeError, "cos"),
    ],
)
def test_bad_arguments_raise_and_name_the_argument(kwargs, error, match):
    arguments = {"cos": np.ones((4, 8)), "sin": np.zeros((4, 8)), **kwargs}
    with pytest.raises(error, match=match):
        check_rope_cache(**arguments)


def bf16(values):
    return museum.round_to_bfloat16(values)


def test_storage_in_bfloat16_or_float16_is_named_as_storage_and_can_be_declared():
    cos, sin = cache(512, 80)
    findings = check_rope_cache(bf16(cos), bf16(sin))
    only(findings, "stored in bfloat16")
    assert "declare stored_dtype='bfloat16'" in findings[0]
    assert not any(word in findings[0] for word in ("multiplied", "divided", "stretch"))
    assert check_rope_cache(bf16(cos), bf16(sin), stored_dtype="bfloat16") == []
    half = cos.astype(np.float16).astype(np.float32), sin.astype(np.float16).astype(np.float32)
    only(check_rope_cache(*half), "stored in float16")
    assert check_rope_cache(*half, stored_dtype=np.float16) == []


def test_storage_and_an_off_by_one_are_both_named():
    cos, sin = cache(512, 64, start=1)
    only(check_rope_cache(bf16(cos), bf16(sin)), "stored in bfloat16", "off-by-one")


def test_float32_angles_can_be_allowed_or_given_a_tolerance():
    cos, sin = museum.float32_rope_cache(2048, 128, start=100_000)
    assert check_rope_cache(cos, sin, start=100_000, allow=("float32_angles",)) == []
    assert check_rope_cache(cos, sin, start=100_000, atol=0.02) == []
    only(check_rope_cache(cos, sin, start=100_000, atol=1e-6), "angles computed in float32")
    with pytest.raises(ValueError, match="allow"):
        check_rope_cache(cos, sin, allow=("bfloat16_angles",))


@pytest.mark.parametrize("start", [0, 37])
def test_shifted_positions_are_named(start):
    cos, sin = cache(256, 64, start=start + 1)
    only(check_rope_cache(cos, sin, start=start), "off-by-one")
    cos, sin = cache(256, 64, start=start - 1)
    only(check_rope_cache(cos, sin, start=start), "off-by-one")


def test_a_forgotten_kv_cache_offset_is_named():
    only(check_rope_cache(*cache(64, 64), start=300), "KV-cache offset")


def test_swapped_cos_and_sin_and_the_sign_of_sin_are_named():
    cos, sin = cache(256, 64)
    only(check_rope_cache(sin, cos), "cos and sin are swapped")
    only(check_rope_cache(cos, -sin), "sin has the wrong sign")


@pytest.mark.parametrize("dim", [64, 80, 128])
def test_a_base_typo_is_not_partial_rotary_and_the_2i_bug_is_named(dim):
    findings = check_rope_cache(*cache(512, dim, base=1e5))
    only(findings, "base = 100000, 10 times the declared base 10000")
    assert "10e4" in findings[0]
    only(check_rope_cache(*cache(512, dim, base=5e6), base=5e5), "10 times the declared")
    doubled = 1e4 ** (-2 * np.arange(0, dim, 2) / dim)
    only(check_rope_cache(*cache(512, dim, freqs=doubled)), "2i exponent bug")


def test_one_corrupted_entry_is_named_where_it_is():
    cos, sin = cache(256, 64)
    cos[100, 5] += 0.02
    only(check_rope_cache(cos, sin), "row 100 (position 100), column 5 differs by 0.02")
    assert "divided" not in check_rope_cache(cos, sin)[0]


def test_an_odd_width_is_named():
    cos, sin = cache(64, 8)
    only(check_rope_cache(cos[:, :7], sin[:, :7]), "odd width, 7 columns")
    only(check_rope_cache(cos[:, :7], sin[:, :7], rotary_dim=8), "odd width")


def test_batch_and_singleton_axes():
    cos, sin = cache(128, 64)
    assert check_rope_cache(cos[None, None], sin[None, None]) == []
    assert check_rope_cache(np.stack([cos, cos]), np.stack([sin, sin])) == []
    other = cache(128, 64, start=50)
    both = np.stack([cos, other[0]]), np.stack([sin, other[1]])
    only(check_rope_cache(*both), "batch rows of the cache differ")
    rows = np.stack([np.arange(128), np.arange(50, 178)])
    assert check_rope_cache(*both, positions=rows) == []
    wrong = np.stack([np.arange(128), np.arange(51, 179)])
    only(check_rope_cache(*both, positions=wrong), "batch row 1: rows start at position 50")
    with pytest.raises(ValueError, match="batch, positions"):
        check_rope_cache(*both, positions=rows[:, :5])


def test_an_attention_scale_within_storage_rounding_is_no_finding():
    cos, sin = cache(256, 64, scale=1.2)
    assert (
        check_rope_cache(bf16(cos), bf16(sin), attention_scale=1.2, stored_dtype="bfloat16") == []
    )
    findings = check_rope_cache(*cache(256, 64, scale=1.0001))
    only(findings, "multiplied by 1.0001, not attention_scale=1")


def test_an_odd_slice_of_a_wider_cache_is_an_odd_width_and_pairs_are_not():
    cos, sin = cache(256, 64)
    only(check_rope_cache(cos[:, :7], sin[:, :7]), "odd width, 7 columns")
    assert check_rope_cache(*cache(64, 14, pairing=None)) == []  # 7 pairs, one column each


def test_a_mistake_in_a_cache_with_float32_angles_is_named_with_a_note():
    cos, sin = museum.float32_rope_cache(512, 64, start=1)
    findings = check_rope_cache(cos, sin)
    only(findings, "off-by-one", "float32 rounding")
    only(check_rope_cache(cos, sin, allow="float32_angles"), "off-by-one")


@pytest.mark.parametrize("row", [7, 300, 500])
def test_one_entry_corrupted_far_out_in_float32_angles_is_local_not_float16(row):
    # Without allow=, float32 angles (as Hugging Face computes them) put many entries
    # past the tolerance far out; the one bad entry must still be named as such, not
    # read as float16 arithmetic.
    llama = next(build(s) for s in real_caches() if s.name == "hf default d128 1e4")
    strict = {k: v for k, v in llama.declared.items() if k != "allow"}
    cos = llama.cos.copy()
    cos[..., row, 5] += 0.02
    findings = check_rope_cache(cos, llama.sin, **strict)
    assert len(findings) == 2, findings
    assert f"row {row} (position {row}), column 5 differs by 0.02" in findings[0]
    assert "allow=('float32_angles',)" in findings[1]
    assert not any("float16" in f for f in findings)


# ---- issue 37, round 2: misattributions a practitioner met -------------------------


def _repeat_row(cos, sin, row):
    cos, sin = cos.copy(), sin.copy()
    cos[row:], sin[row:] = cos[row - 1 : -1].copy(), sin[row - 1 : -1].copy()
    return cos, sin


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_a_repeated_position_id_is_named_not_bfloat16_angles(dtype):
    cos, sin = _repeat_row(*cache(512, 128, dtype=dtype), 300)
    only(check_rope_cache(cos, sin), "position 299 is repeated at row 300")
    assert "1 position early" in check_rope_cache(cos, sin)[0]
    dropped = [np.concatenate([x[:100], x[101:]]) for x in cache(513, 128, dtype=dtype)]
    only(check_rope_cache(*dropped), "position 100 is skipped at row 100")


def test_inv_freq_held_in_bfloat16_is_named_with_its_fix():
    theta = museum.round_to_bfloat16(10000.0 ** (-np.arange(0, 128, 2) / 128))
    cos, sin = cache(512, 128, freqs=theta.astype(np.float64))
    only(check_rope_cache(cos, sin), "rounded to bfloat16")
    assert "keep inv_freq in float32" in check_rope_cache(cos, sin)[0]
    only(check_rope_cache(sin, cos), "swapped", "rounded to bfloat16")


def test_undeclared_llama3_and_dynamic_ntk_are_named():
    freqs, _ = scaled_frequencies(128, base=5e5, method="llama3", factor=8.0, original_length=8192)
    angles = np.arange(0, 131072, 256)[:, None] * freqs[None, :]
    cos, sin = (np.concatenate([f(angles)] * 2, 1) for f in (np.cos, np.sin))
    grid = np.arange(0, 131072, 256)
    only(check_rope_cache(cos, sin, base=5e5, positions=grid), "Llama 3 scaling")
    only(check_rope_cache(cos, sin, base=5e5, positions=grid, frequencies=freqs))
    grown = 10000 * (2.0 * 6000 / 4096 - 1) ** (128 / 126)
    cos, sin = cache(600, 128, base=grown, dtype=np.float64)
    only(check_rope_cache(cos, sin), "dynamic NTK scaling")


def test_two_slips_at_once_are_both_named():
    cos, sin = cache(256, 64, base=1e5)
    only(check_rope_cache(sin, cos), "swapped", "10 times the declared base")
    cos, sin = cache(256, 64, start=1, freqs=10000.0 ** (-np.arange(0, 64, 2) / 64) / 4)
    only(check_rope_cache(cos, sin), "one position late", "position interpolation")


def test_small_noise_is_never_named_as_a_convention_bug():
    rng = np.random.default_rng(0)
    for dim in (64, 128):
        cos, sin = cache(512, dim, dtype=np.float64)
        noisy = [x + 1e-3 * rng.standard_normal(x.shape) for x in (cos, sin)]
        findings = check_rope_cache(*noisy)
        assert findings and not any(
            word in f
            for f in findings
            for word in ("computed in", "attention scale", "swapped", "base =", "repeated")
        ), findings


@pytest.mark.parametrize("pairing", ["half", "interleaved"])
def test_one_copy_of_a_pair_changed_is_named_by_its_columns(pairing):
    cos, sin = cache(1000, 128, pairing=pairing, dtype=np.float64)
    column = 70 if pairing == "half" else 71
    twin = 6 if pairing == "half" else 70
    cos[:200, column] += 1e-3
    findings = check_rope_cache(cos, sin, pairing=pairing)
    assert len(findings) == 1, findings
    assert (
        f"differ by up to 0.001 in 200 rows; column {twin} matches the declared angles"
        in (findings[0])
    )
    assert f"column {column} does not" in findings[0]


def test_a_single_row_of_ones_and_zeros_is_no_evidence_of_storage():
    # one decoded token rotated at position 0 instead of 200: every value is 0 or 1,
    # on every grid, so no storage finding, only the missing offset
    findings = check_rope_cache(np.ones((1, 128)), np.zeros((1, 128)), start=200)
    assert len(findings) == 1 and "KV-cache offset" in findings[0], findings


def test_noise_on_a_half_paired_cache_is_unexplained_with_its_own_size():
    # noise breaks the two copies' equality; the cache is still read in its declared
    # form, so the size and place reported are the noise's, not a misreading's
    cos, sin = cache(1000, 128, dtype=np.float64)
    rng = np.random.default_rng(0)
    noisy = cos + rng.normal(0, 1e-3, cos.shape), sin + rng.normal(0, 1e-3, sin.shape)
    findings = check_rope_cache(*noisy)
    assert len(findings) == 1 and "no known mistake" in findings[0], findings
    size = float(findings[0].split("by up to ")[1].split(" ")[0])
    assert 1e-3 < size < 1e-2
