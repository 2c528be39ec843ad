"""posenc.experiments.analysis: intervals over seeds, windows, steps, RoPE's lag aliases."""

from __future__ import annotations

import math

import numpy as np
import pytest

from posenc.experiments.analysis import (
    bootstrap_interval,
    rope_distance_scores,
    rope_lag_aliases,
    step_sizes,
    t_interval,
    t_quantile,
    windowed_accuracy,
)

SEEDS = [0.91, 0.97, 0.42, 0.88, 1.0, 0.73, 0.95, 0.64, 0.99, 0.81]

# -- t_quantile and t_interval ----------------------------------------------------------


@pytest.mark.parametrize(
    ("p", "df", "printed"),
    # Printed tables of Student's t (two-sided 95% and 90%, one-sided 99%).
    [
        (0.975, 1, 12.706),
        (0.975, 4, 2.776),
        (0.975, 9, 2.262),
        (0.975, 30, 2.042),
        (0.95, 4, 2.132),
        (0.99, 10, 2.764),
        (0.5, 3, 0.0),
    ],
)
def test_t_quantile_matches_the_printed_tables(p, df, printed):
    assert t_quantile(p, df) == pytest.approx(printed, abs=6e-4)


def test_t_quantile_tends_to_the_normal_one():
    assert t_quantile(0.975, 10_000) == pytest.approx(1.95996, abs=1e-3)


def test_t_quantile_of_one_degree_of_freedom_is_the_cauchy_one():
    # t with one degree of freedom is the Cauchy law: quantile tan(pi (p - 1/2)).
    for p in (0.6, 0.9, 0.975):
        assert t_quantile(p, 1) == pytest.approx(math.tan(math.pi * (p - 0.5)), rel=1e-7)


@pytest.mark.parametrize(("p", "df"), [(0.4, 4), (1.0, 4), (0.975, 0)])
def test_t_quantile_refuses_what_it_cannot_answer(p, df):
    with pytest.raises(ValueError):
        t_quantile(p, df)


def test_t_interval_is_mean_plus_minus_t_standard_errors():
    x = np.array([0.2, 0.4, 0.9, 0.5, 0.6])
    mean, low, high = t_interval(x)
    half = 2.776445 * x.std(ddof=1) / math.sqrt(5)
    assert mean == pytest.approx(0.52, abs=1e-15)
    assert (low, high) == pytest.approx((0.52 - half, 0.52 + half), abs=1e-6)


def test_t_interval_is_wider_than_the_bootstrap_for_five_seeds():
    five = SEEDS[:5]
    _, t_low, t_high = t_interval(five)
    _, b_low, b_high = bootstrap_interval(five)
    assert t_low < b_low and b_high < t_high


@pytest.mark.parametrize("values", [[0.5] * 5, [0.25]])
def test_t_interval_of_a_constant_has_zero_width(values):
    assert t_interval(values) == (values[0], values[0], values[0])


@pytest.mark.parametrize("values", [[], [0.1, math.nan], [[0.1, 0.2]]])
def test_t_interval_refuses_bad_values(values):
    with pytest.raises(ValueError):
        t_interval(values)


# -- bootstrap_interval ----------------------------------------------------------------


def test_bootstrap_interval_holds_the_mean():
    mean, low, high = bootstrap_interval(SEEDS)
    assert mean == pytest.approx(sum(SEEDS) / len(SEEDS), abs=1e-15)
    assert min(SEEDS) <= low < mean < high <= max(SEEDS)


@pytest.mark.parametrize("values", [[0.5] * 7, [0.25]])
def test_bootstrap_interval_of_a_constant_has_zero_width(values):
    assert bootstrap_interval(values) == (values[0], values[0], values[0])


def test_bootstrap_interval_widens_with_the_spread():
    mean, low, high = bootstrap_interval(SEEDS)
    spread = [mean + 3 * (v - mean) for v in SEEDS]  # same mean, three times the spread
    mean_3, low_3, high_3 = bootstrap_interval(spread)
    assert mean_3 == pytest.approx(mean, abs=1e-12)
    # The same resamples: every resampled mean moves three times as far from the mean.
    assert high_3 - low_3 == pytest.approx(3 * (high - low), rel=1e-9)
    assert low_3 < low and high < high_3


def test_bootstrap_interval_widens_with_the_level():
    _, low_90, high_90 = bootstrap_interval(SEEDS, level=0.9)
    _, low_99, high_99 = bootstrap_interval(SEEDS, level=0.99)
    assert low_99 < low_90 and high_90 < high_99


def test_bootstrap_interval_is_about_the_normal_one_for_many_values():
    # For n values the mean's standard error is s / sqrt(n): the 95% interval is
    # about mean +- 1.96 s / sqrt(n). 10,000 resamples pin its ends to a few percent.
    x = np.random.default_rng(1).standard_normal(400)
    mean, low, high = bootstrap_interval(x)
    half = 1.96 * x.std() / math.sqrt(x.size)
    assert low == pytest.approx(mean - half, abs=0.1 * half)
    assert high == pytest.approx(mean + half, abs=0.1 * half)


def test_bootstrap_interval_is_reproducible_from_its_seed():
    assert bootstrap_interval(SEEDS) == bootstrap_interval(np.array(SEEDS))
    assert bootstrap_interval(SEEDS, seed=3) == bootstrap_interval(SEEDS, seed=3)
    assert bootstrap_interval(SEEDS, seed=3) != bootstrap_interval(SEEDS, seed=4)


def test_bootstrap_interval_refuses_bad_input():
    for values in ([], [[0.5, 0.6]], [0.5, math.nan], [0.5, math.inf]):
        with pytest.raises(ValueError, match="values must be"):
            bootstrap_interval(values)
    for level in (0, 1, 1.5, -0.5):
        with pytest.raises(ValueError, match=f"level must lie in \\(0, 1\\), got {level}"):
            bootstrap_interval(SEEDS, level=level)
    with pytest.raises(ValueError, match="resamples must be at least 1, got 0"):
        bootstrap_interval(SEEDS, resamples=0)
    with pytest.raises(TypeError, match="resamples must be an integer"):
        bootstrap_interval(SEEDS, resamples=100.0)


# -- windowed_accuracy -----------------------------------------------------------------


def test_windowed_accuracy_averages_each_window_by_hand():
    positions = [0, 1, 2, 3, 4, 5, 6, 7]
    accuracy = [1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 1.0]
    got = windowed_accuracy(positions, accuracy, [0, 2, 5, 8])
    np.testing.assert_allclose(got, [1.0, 1 / 3, 2 / 3], rtol=0, atol=1e-15)
    # Windows are [lo, hi): position 8 would belong to the next window, not to [5, 8).
    got = windowed_accuracy([*positions, 8], [*accuracy, 0.0], [0, 2, 5, 8])
    np.testing.assert_allclose(got, [1.0, 1 / 3, 2 / 3], rtol=0, atol=1e-15)


def test_windowed_accuracy_does_not_need_sorted_positions():
    got = windowed_accuracy([7, 0, 3, 2, 6], [0.2, 1.0, 0.5, 0.7, 0.4], [0, 3, 8])
    np.testing.assert_allclose(got, [(1.0 + 0.7) / 2, (0.5 + 0.4 + 0.2) / 3], atol=1e-15)


def test_windowed_accuracy_is_nan_for_an_empty_window():
    got = windowed_accuracy([4, 5, 6], [1.0, 0.5, 0.0], [0, 4, 6, 100, 200])
    assert np.isnan(got[0]) and np.isnan(got[3])
    np.testing.assert_allclose(got[1:3], [0.75, 0.0], atol=1e-15)


def test_windowed_accuracy_refuses_bad_input():
    for edges in ([0, 5, 5], [10, 5], [3], [[0, 5], [5, 10]]):
        with pytest.raises(ValueError, match="edges must be increasing"):
            windowed_accuracy([1, 2], [1.0, 0.0], edges)
    for positions, accuracy in (([1, 2, 3], [1.0, 0.0]), ([[1, 2]], [[1.0, 0.0]])):
        with pytest.raises(ValueError, match="positions and accuracy must be 1-D of one length"):
            windowed_accuracy(positions, accuracy, [0, 5])


# -- step_sizes ------------------------------------------------------------------------


def test_step_sizes_peak_at_the_step_with_its_height():
    accuracy = np.array([1.0] * 20 + [0.4] * 20)
    drop = step_sizes(accuracy, 5)
    assert int(np.nanargmax(drop)) == 20
    assert drop[20] == pytest.approx(0.6, abs=1e-12)
    # A triangle around the step: k positions off it, k of the window's 5 straddle it.
    for k in range(-5, 6):
        assert drop[20 + k] == pytest.approx(0.6 * (1 - abs(k) / 5), abs=1e-12), k
    valid = ~np.isnan(drop)
    assert np.all(np.abs(drop[valid][np.abs(np.arange(5, 36) - 20) > 5]) < 1e-12)


def test_step_sizes_are_nan_where_a_window_leaves_the_array():
    drop = step_sizes(np.linspace(1.0, 0.0, 12), 3)
    assert drop.shape == (12,)
    assert np.all(np.isnan(drop[:3])) and np.all(np.isnan(drop[10:]))
    assert not np.any(np.isnan(drop[3:10]))
    # A line falling 1/11 per position: the windows' centres (t - 2, t + 1) are 3 apart.
    np.testing.assert_allclose(drop[3:10], 3 / 11, atol=1e-12)


def test_step_sizes_of_a_step_up_is_a_negative_peak():
    drop = step_sizes([0.0] * 8 + [1.0] * 8, 4)
    assert int(np.nanargmin(drop)) == 8 and drop[8] == pytest.approx(-1.0, abs=1e-12)


def test_step_sizes_refuse_bad_input():
    with pytest.raises(ValueError, match="window must be at least 1, got 0"):
        step_sizes([1.0, 0.0], 0)
    with pytest.raises(TypeError, match="window must be an integer"):
        step_sizes([1.0, 0.0], 2.0)
    with pytest.raises(ValueError, match=r"accuracy must be 1-D, got shape \(2, 2\)"):
        step_sizes([[1.0, 0.0], [1.0, 0.0]], 1)


# -- rope_lag_aliases ------------------------------------------------------------------


def _deviation(distance, lag, pairs, head_dim, base=10000.0):
    """Largest |angle wrapped into [-pi, pi]| of (distance - lag) * theta_i, i < pairs."""
    return max(
        abs(math.remainder((distance - lag) * base ** (-2 * i / head_dim), 2 * math.pi))
        for i in range(pairs)
    )


def _aliases_by_hand(lag, head_dim, train_len, max_distance):
    """The fewest pairs, the margin and the far distances, one distance at a time."""
    training = [d for d in range(train_len) if abs(d - lag) > 1]
    for pairs in range(1, head_dim // 2 + 1):
        margin = max(_deviation(lag + s, lag, pairs, head_dim) for s in (-1, 1))
        if min(_deviation(d, lag, pairs, head_dim) for d in training) >= margin:
            break
    far = [
        d
        for d in range(train_len + 1, max_distance + 1)
        if _deviation(d, lag, pairs, head_dim) < margin
    ]
    return pairs, margin, tuple(far)


def test_rope_lag_aliases_for_lag_3_head_dim_16_and_length_32():
    got = rope_lag_aliases(3, 16, train_len=32, max_distance=128)
    assert got.pairs == 3
    assert got.margin == pytest.approx(1.0, abs=1e-12)  # the fastest pair turns 1 rad a step
    assert got.distances == (60, 65, 122, 123)
    assert _aliases_by_hand(3, 16, 32, 128)[0] == 3
    assert _aliases_by_hand(3, 16, 32, 128)[1] == pytest.approx(1.0, abs=1e-12)
    assert _aliases_by_hand(3, 16, 32, 128)[2] == (60, 65, 122, 123)
    # No distance sits so close to the margin that rounding could move it across.
    gaps = [abs(_deviation(d, 3, 3, 16) - 1.0) for d in range(129) if abs(d - 3) != 1]
    assert min(gaps) > 1e-3


def test_rope_lag_aliases_deviation_is_the_wrapped_angle_on_the_fastest_pairs():
    got = rope_lag_aliases(3, 16, train_len=32, max_distance=128)
    assert got.deviation.shape == (129,) and got.deviation[3] == 0
    expected = [_deviation(d, 3, got.pairs, 16) for d in range(129)]
    np.testing.assert_allclose(got.deviation, expected, rtol=0, atol=1e-9)


def test_rope_lag_aliases_neighbours_are_the_closest_training_distances():
    got = rope_lag_aliases(3, 16, train_len=32, max_distance=128)
    training = [d for d in range(32) if abs(d - 3) > 1]
    assert min(got.deviation[training]) >= got.margin
    assert max(got.deviation[[2, 4]]) == got.margin
    assert all(got.deviation[d] < got.margin for d in got.distances)
    assert all(d > 32 for d in got.distances)
    # With one pair fewer, distance 22 is within 0.28 rad of the lag on both pairs,
    # closer than the neighbours (1 rad): two pairs cannot tell it from the lag.
    assert _deviation(22, 3, 2, 16) < 0.28 < 1.0 == _deviation(2, 3, 2, 16)


@pytest.mark.parametrize(
    ("lag", "head_dim", "train_len", "max_distance"),
    [(3, 16, 32, 128), (16, 16, 32, 128), (1, 8, 6, 200), (5, 32, 64, 256)],
)
def test_rope_lag_aliases_match_the_computation_by_hand(lag, head_dim, train_len, max_distance):
    got = rope_lag_aliases(lag, head_dim, train_len=train_len, max_distance=max_distance)
    pairs, margin, distances = _aliases_by_hand(lag, head_dim, train_len, max_distance)
    assert (got.pairs, got.distances) == (pairs, distances)
    assert got.margin == pytest.approx(margin, abs=1e-12)


def test_rope_lag_aliases_refuse_when_no_pairs_separate_the_lag():
    # head_dim 8: the second pair turns 0.1 rad a step, so distance lag + 6 (the first
    # pair 6 - 2 pi = -0.28 rad off) deviates 0.6 rad on every pair, less than the
    # neighbours' 1 rad, whatever the number of pairs.
    assert _deviation(7, 1, 4, 8) < 1.0 == _deviation(0, 1, 4, 8)
    with pytest.raises(ValueError, match=r"no set of RoPE pairs \(head_dim=8"):
        rope_lag_aliases(1, 8, train_len=16, max_distance=200)


def test_rope_lag_aliases_refuse_bad_input():
    with pytest.raises(ValueError, match="lag must be at least 1, got 0"):
        rope_lag_aliases(0, 16, train_len=32, max_distance=128)
    with pytest.raises(TypeError, match="lag must be an integer"):
        rope_lag_aliases(3.0, 16, train_len=32, max_distance=128)
    with pytest.raises(ValueError, match="head_dim must be at least 2, got 1"):
        rope_lag_aliases(3, 1, train_len=32, max_distance=128)
    with pytest.raises(ValueError, match="must be even, got d=15"):
        rope_lag_aliases(3, 15, train_len=32, max_distance=128)
    with pytest.raises(ValueError, match="train_len must be at least 5, got 4"):
        rope_lag_aliases(3, 16, train_len=4, max_distance=128)
    with pytest.raises(ValueError, match="max_distance must be at least 32, got 31"):
        rope_lag_aliases(3, 16, train_len=32, max_distance=31)
    for base in (0.0, -1.0, math.nan, math.inf):
        with pytest.raises(ValueError, match="base"):
            rope_lag_aliases(3, 16, train_len=32, max_distance=128, base=base)


def test_rope_distance_scores_are_the_rotated_scores_when_content_is_fixed():
    # One query and one key vector at every position: the score of (t, s) depends on
    # t - s alone, and the profile must give it exactly.
    rng = np.random.default_rng(0)
    pairs, length = 4, 20
    theta = 10000.0 ** (-np.arange(pairs) / pairs)
    q0, k0 = rng.normal(size=(2, 3, pairs)) + 1j * rng.normal(size=(2, 3, pairs))
    queries = np.broadcast_to(q0[None, :, None, :], (2, 3, length, pairs))
    keys = np.broadcast_to(k0[None, :, None, :], (2, 3, length, pairs))
    turn = np.exp(1j * np.arange(length)[:, None] * theta)
    scores = np.einsum("hti,hsi->hts", q0[:, None] * turn, np.conj(k0[:, None] * turn)).real
    scores /= math.sqrt(2 * pairs)
    profile = rope_distance_scores(queries, keys, theta, np.arange(length))
    assert profile.shape == (3, length)
    for t, s in [(0, 0), (5, 2), (19, 0), (12, 11)]:
        np.testing.assert_allclose(profile[:, t - s], scores[:, t, s], atol=1e-12)


def test_rope_distance_scores_average_content_away():
    # Keys that flip sign at random positions have mean zero: no preference is left.
    rng = np.random.default_rng(1)
    q = np.ones((64, 1, 16, 2), complex)
    k = np.ones((64, 1, 16, 2), complex) * rng.choice([-1, 1], size=(64, 1, 16, 1))
    k -= k.mean(axis=2, keepdims=True)
    assert np.abs(rope_distance_scores(q, k, [1.0, 0.1], range(40))).max() < 1e-12


def test_rope_distance_scores_refuse_bad_arguments():
    q = np.ones((1, 1, 4, 2), complex)
    with pytest.raises(ValueError, match="complex arrays"):
        rope_distance_scores(q.real, q.real, [1.0, 0.1], [0])
    with pytest.raises(ValueError, match="complex arrays"):
        rope_distance_scores(q, q[:, :, :3], [1.0, 0.1], [0])
    with pytest.raises(ValueError, match="one frequency per pair"):
        rope_distance_scores(q, q, [1.0], [0])


def test_per_seed_reads_one_value_per_seed_matching_numbers_as_numbers():
    from posenc.experiments.analysis import per_seed

    rows = [
        {"seed": str(s), "method": m, "factor": f, "accuracy": str(s / 10 + k)}
        for k, (m, f) in enumerate((("yarn", "8.0"), ("yarn", "2.0"), ("none", "")))
        for s in (1, 0)
    ]
    got = per_seed(rows, "accuracy", seeds=2, method="yarn", factor=8)
    assert got.tolist() == [0.0, 0.1]  # seed order, "8.0" == 8
    assert per_seed(rows, "accuracy", seeds=2, method="none").tolist() == [2.0, 2.1]
    with pytest.raises(ValueError, match="matches seeds"):
        per_seed(rows, "accuracy", seeds=3, method="yarn", factor=8)
    with pytest.raises(ValueError, match="more than one row of seed"):
        per_seed(rows, "accuracy", seeds=2, method="yarn")
    with pytest.raises(ValueError, match="matches seeds"):
        per_seed(rows, "accuracy", seeds=2, method="none", factor=1)  # "" is no number
