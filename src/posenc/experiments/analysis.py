"""Reading the length-generalization results (chapter 9): intervals, windows, aliases.

- :func:`per_seed` — one column of the rows that match a set of values, one value per
  seed in seed order (the CSVs' rows are strings; numbers are compared as numbers).
- :func:`bootstrap_interval` — the mean over seeds and its percentile-bootstrap 95%
  interval (resampling seeds, the unit that varies between runs).
- :func:`t_interval` — the mean and its Student-t interval, for a handful of seeds, where
  a percentile bootstrap is too narrow (five values resample to at most 126 means).
- :func:`windowed_accuracy` — mean accuracy over windows of positions, in place of a
  single position's value (one position's accuracy is a noisy number).
- :func:`step_sizes` — how much accuracy drops from the ``window`` positions before t
  to the ``window`` positions from t on, for every t.
- :func:`rope_lag_aliases` — from RoPE's frequencies alone, the distances past the
  training length that a head which finds the token ``lag`` back confuses with ``lag``.
- :func:`rope_distance_scores` — a graded version: the score a RoPE head gives each
  distance once content is averaged away, from its queries and keys before rotation.

NumPy only: the chapter and the tests use these on the committed CSVs, no PyTorch.
"""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np

from posenc._validation import integer, positive_finite
from posenc.alternatives import rope_frequencies

__all__ = [
    "RopeAliases",
    "bootstrap_interval",
    "per_seed",
    "rope_distance_scores",
    "rope_lag_aliases",
    "step_sizes",
    "t_interval",
    "t_quantile",
    "windowed_accuracy",
]


def _matches(row: dict, where: dict) -> bool:
    for key, wanted in where.items():
        value = row[key]
        if isinstance(wanted, str):
            if value != wanted:
                return False
        elif value == "" or float(value) != float(wanted):
            return False
    return True


def per_seed(rows, column: str, *, seeds: int, **where) -> np.ndarray:
    """``column`` of the rows matching every ``where`` (strings as strings, numbers as
    numbers: "8.0" matches 8), as floats in seed order. Exactly one row per seed
    0 .. seeds - 1 must match; anything else raises, naming the selection."""
    chosen = {}
    for row in rows:
        if _matches(row, where):
            seed = int(row["seed"])
            if seed in chosen:
                raise ValueError(f"more than one row of seed {seed} matches {where}")
            chosen[seed] = float(row[column])
    if sorted(chosen) != list(range(seeds)):
        raise ValueError(f"{where} matches seeds {sorted(chosen)}, not 0 .. {seeds - 1}")
    return np.array([chosen[s] for s in range(seeds)])


def _per_seed_values(values, level: float) -> np.ndarray:
    """``values`` as a 1-D float64 array of finite numbers, and ``level`` in (0, 1)."""
    x = np.asarray(values, dtype=np.float64)
    if x.ndim != 1 or x.size == 0:
        raise ValueError(f"values must be a non-empty 1-D sequence, got shape {x.shape}")
    if not np.all(np.isfinite(x)):
        raise ValueError("values must be finite (no NaN or inf)")
    if not 0 < level < 1:
        raise ValueError(f"level must lie in (0, 1), got {level}")
    return x


def bootstrap_interval(values, *, level: float = 0.95, resamples: int = 10_000, seed: int = 0):
    """(mean, low, high): the mean of ``values`` and its percentile-bootstrap interval.

    ``values`` holds one number per seed; the interval is the central ``level`` range
    of the means of ``resamples`` resamples drawn with replacement (generator
    ``seed``, so the interval is reproducible). With one value the interval is that
    value; NaNs are refused.
    """
    x = _per_seed_values(values, level)
    integer("resamples", resamples, minimum=1)
    draws = np.random.default_rng(seed).integers(0, x.size, size=(resamples, x.size))
    means = x[draws].mean(axis=1)
    tail = (1 - level) / 2
    low, high = np.quantile(means, [tail, 1 - tail])
    return float(x.mean()), float(low), float(high)


def _t_cdf(x: float, df: int) -> float:
    """P(T <= x) for Student's t with ``df`` degrees of freedom, x >= 0: one half plus
    the density integrated from 0 to x (Simpson's rule on 4,000 panels; the density is
    smooth, so the error is far below the 1e-9 the quantile search needs)."""
    log_norm = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    t = np.linspace(0.0, x, 4001)
    density = np.exp(log_norm - (df + 1) / 2 * np.log1p(t * t / df))
    h = x / 4000
    simpson = density[0] + density[-1] + 4 * density[1:-1:2].sum() + 2 * density[2:-1:2].sum()
    return 0.5 + h / 3 * simpson


def t_quantile(p: float, df: int) -> float:
    """The p quantile of Student's t with ``df`` degrees of freedom, for 0.5 <= p < 1."""
    df = integer("df", df, minimum=1)
    if not 0.5 <= p < 1:
        raise ValueError(f"p must lie in [0.5, 1), got {p}")
    low, high = 0.0, 1.0
    while _t_cdf(high, df) < p:
        high *= 2
    for _ in range(60):  # bisection: 60 halvings leave far less than 1e-12 of the bracket
        middle = (low + high) / 2
        low, high = (middle, high) if _t_cdf(middle, df) < p else (low, middle)
    return (low + high) / 2


def t_interval(values, *, level: float = 0.95):
    """(mean, low, high): the mean of ``values`` and its Student-t interval,
    mean ± t(level, n - 1) · sd / √n, with sd the sample standard deviation.

    ``values`` holds one number per seed. With few seeds this is the honest interval
    (a percentile bootstrap of five values undercovers); it assumes the seeds' values
    scatter roughly normally, so where they split into groups report the groups too.
    With one value the interval is that value; NaNs are refused.
    """
    x = _per_seed_values(values, level)
    mean = float(x.mean())
    if x.size == 1:
        return mean, mean, mean
    half = t_quantile(0.5 + level / 2, x.size - 1) * float(x.std(ddof=1)) / math.sqrt(x.size)
    return mean, mean - half, mean + half


def windowed_accuracy(positions, accuracy, edges):
    """Mean of ``accuracy`` over positions in each window [edges[i], edges[i+1]).

    ``positions`` and ``accuracy`` are 1-D and of one length; a window with no
    position gives NaN.
    """
    p = np.asarray(positions)
    a = np.asarray(accuracy, dtype=np.float64)
    if p.shape != a.shape or p.ndim != 1:
        raise ValueError(f"positions and accuracy must be 1-D of one length: {p.shape}, {a.shape}")
    edges = np.asarray(edges)
    if edges.ndim != 1 or edges.size < 2 or np.any(np.diff(edges) <= 0):
        raise ValueError(f"edges must be increasing, at least two of them, got {edges}")
    out = np.full(edges.size - 1, np.nan)
    for i, (lo, hi) in enumerate(itertools.pairwise(edges)):
        inside = (p >= lo) & (p < hi)
        if inside.any():
            out[i] = a[inside].mean()
    return out


def step_sizes(accuracy, window: int):
    """drop[t] = mean(accuracy[t - window : t]) - mean(accuracy[t : t + window]).

    ``accuracy`` is indexed by consecutive positions; drop[t] is NaN where either
    window would leave the array. A step down at t (accuracy falling from one level to
    a lower one) is a positive peak of drop at t.
    """
    a = np.asarray(accuracy, dtype=np.float64)
    window = integer("window", window, minimum=1)
    if a.ndim != 1:
        raise ValueError(f"accuracy must be 1-D, got shape {a.shape}")
    drop = np.full(a.size, np.nan)
    c = np.concatenate([[0.0], np.cumsum(a)])
    for t in range(window, a.size - window + 1):
        drop[t] = (c[t] - c[t - window]) / window - (c[t + window] - c[t]) / window
    return drop


@dataclasses.dataclass(frozen=True)
class RopeAliases:
    """What :func:`rope_lag_aliases` predicts.

    pairs: how many of the fastest pairs the head needs (the fewest that make the lag's
        neighbours, lag - 1 and lag + 1, the training distances most like the lag).
    margin: the neighbours' deviation in radians (the largest of the pairs' angle
        differences from the lag's); every other training distance deviates more.
    distances: the distances in (train_len, max_distance] that deviate less than the
        margin: they look more like the lag than anything the head had to reject in
        training.
    deviation: the deviation of every distance 0 .. max_distance (index = distance).
    """

    pairs: int
    margin: float
    distances: tuple[int, ...]
    deviation: np.ndarray


def rope_lag_aliases(
    lag: int, head_dim: int, *, train_len: int, max_distance: int, base: float = 10000.0
) -> RopeAliases:
    """Distances past ``train_len`` that RoPE's fastest pairs confuse with ``lag``.

    A head that finds the key ``lag`` positions back must score distance ``lag`` above
    every other distance it meets in training, 0 .. train_len - 1. Pair i turns the
    query-key angle by (D - lag) * theta_i at distance D; its deviation from the lag is
    that angle wrapped into (-pi, pi], and the deviation of D over the k fastest pairs
    is the largest of theirs. With k = 1 or 2 some far training distance is about as
    close to the lag as its neighbours (for lag 3, d = 16: distance 22 is within 0.28
    rad on both of the two fastest pairs), so the head needs more pairs; the function
    takes the fewest, k, for which the neighbours lag +- 1 are the closest training
    distances. Past ``train_len`` the head has never seen a distance that deviates less
    than the neighbours; those distances are the predicted aliases.
    """
    lag = integer("lag", lag, minimum=1)
    head_dim = integer("head_dim", head_dim, minimum=2)
    train_len = integer("train_len", train_len, minimum=lag + 2)
    max_distance = integer("max_distance", max_distance, minimum=train_len)
    theta = rope_frequencies(head_dim, base=positive_finite("base", base))
    distance = np.arange(max_distance + 1)
    angles = (distance[:, None] - lag) * theta[None, :]
    wrapped = np.abs(np.angle(np.exp(1j * angles)))  # (-pi, pi] -> [0, pi]
    training = (distance < train_len) & (np.abs(distance - lag) > 1)
    for pairs in range(1, theta.size + 1):
        deviation = wrapped[:, :pairs].max(axis=1)
        margin = max(deviation[lag - 1], deviation[lag + 1])
        if deviation[training].min() >= margin:
            break
    else:
        raise ValueError(
            f"no set of RoPE pairs (head_dim={head_dim}, base={base}) makes lag {lag}'s "
            f"neighbours the closest of the training distances 0 .. {train_len - 1}"
        )
    far = distance > train_len
    distances = tuple(int(d) for d in distance[far & (deviation < margin)])
    return RopeAliases(pairs, float(margin), distances, deviation)


def rope_distance_scores(queries, keys, frequencies, distances) -> np.ndarray:
    """Each head's attention score at each distance, with content averaged away.

    ``queries`` and ``keys`` are a RoPE layer's, *before* the rotation, as complex pairs
    (pair i = features 2i, 2i + 1): arrays (batch, heads, length, pairs). The score of
    query t and key s is Re sum_i q_t,i conj(k_s,i) e^{i (t - s) theta_i} / sqrt(2 pairs).
    Averaged over every (t, s) of a sequence, then over sequences, q and k enter only
    through C_i = mean_t q_t,i · conj(mean_s k_s,i): the head's preferred angle and
    strength for pair i. The result, (heads, len(distances)), is
    Re sum_i C_i e^{i D theta_i} / sqrt(2 pairs) at each D: measured at one length, it
    predicts the head's preference at any distance.
    """
    q, k = np.asarray(queries), np.asarray(keys)
    if q.shape != k.shape or q.ndim != 4 or not np.iscomplexobj(q):
        raise ValueError(
            f"queries and keys must be complex arrays (batch, heads, length, pairs) of one "
            f"shape, got {q.shape} and {k.shape}"
        )
    theta = np.asarray(frequencies, dtype=np.float64)
    if theta.shape != (q.shape[-1],):
        raise ValueError(f"need one frequency per pair ({q.shape[-1]}), got {theta.shape}")
    d = np.asarray(distances, dtype=np.float64)
    c = (q.mean(axis=2) * np.conj(k.mean(axis=2))).mean(axis=0)  # (heads, pairs)
    turns = np.exp(1j * d[:, None] * theta[None, :])  # (distances, pairs)
    return (c @ turns.T).real / math.sqrt(2 * theta.size)
