"""The exhibits of chapter 12: positional-encoding bugs and conventions, rebuilt in NumPy.

Each function reproduces, in the shape it was found, a mistake or a convention of a
published implementation of the sinusoidal table (the chapter cites where). They exist
so that the chapter, the tests of :mod:`posenc.checks` and the reader all look at the
same wrong tables. None of them is meant to be used in a model: :func:`posenc.sinusoidal`
is the table of the paper.

The bugs:

- :func:`double_counted_as_found` and :func:`double_counted` — the exponent ``2i / d_model``
  with ``i`` already stepping by 2 (as published, and with the cosine's exponent fixed).
- :func:`tutorial_table` — the PyTorch tutorial's ``div_term`` construction, which cannot
  fill an odd ``d_model``; :func:`odd_truncated` silently drops the odd column instead.
- :func:`added_tutorial_style` — a ``(max_len, 1, d_model)`` table indexed by the first
  axis of the input: with batch-first input every token of a sequence gets one row.
- :func:`low_precision_angles` — angles computed in float16 or bfloat16.
- :func:`swapped` — cos in the even columns, sin in the odd ones.
- :func:`relative_table` with ``mistake`` — the table of relative offsets with the sign
  of the sine terms lost (``|i - j|``) or flipped (``j - i``).
- :func:`reinitialised` — a fixed table overwritten by a weight initialisation.

The conventions, which are not bugs but differ from the paper:

- :func:`tensor2tensor_signal` — ``[sin | cos]`` halves, frequencies spaced with
  ``num_timescales - 1`` in the denominator, a zero column for odd channels.
- :func:`fairseq_table` and :func:`fairseq_positions` — the same spacing and halves,
  a zero row at ``padding_idx``, positions starting at ``padding_idx + 1`` (M2M100 and
  NLLB build the same table in float32).
- :func:`marian_table` — the paper's frequencies in ``[sin | cos]`` halves.
- :func:`whisper_table` — tensor2tensor's spacing and halves, in float32.
- :func:`timestep_embedding` — diffusers' timestep embedding: scaled positions, a
  choice of spacing (``downscale_freq_shift``), cos first on request, a zero column
  for an odd width.
- :func:`float32_rope_cache` — a RoPE cos/sin cache as Hugging Face's rotary module
  builds it, with the angles computed in float32.
"""

from __future__ import annotations

import math

import numpy as np

from posenc import _validation
from posenc.encoding import MAX_POSITION, sinusoidal

MISTAKES = (None, "absolute", "negated")


def _length_and_width(length, d_model) -> tuple[int, int]:
    length = _validation.integer("length", length, minimum=0)
    d_model = _validation.integer("d_model", d_model, minimum=1)
    return length, d_model


def double_counted(length, d_model, *, base=10000.0) -> np.ndarray:
    """The loop over even columns ``i = 0, 2, 4, ...`` that still writes ``2 * i``.

    Pair ``k`` sits in column ``i = 2k`` and gets ``base**(-2i/d_model) = base**(-4k/d)``:
    its frequencies fall twice as fast as the paper's, as if the base were ``base**2``.
    ``d_model`` must be even, as in the code it reproduces.
    """
    length, d_model = _length_and_width(length, d_model)
    base = _validation.positive_finite("base", base)
    if d_model % 2:
        raise ValueError(f"d_model must be even for this loop, got {d_model}")
    position = np.arange(length, dtype=np.float64)[:, None]
    table = np.zeros((length, d_model))
    for i in range(0, d_model, 2):
        div = base ** (2 * i / d_model)
        table[:, i] = np.sin(position[:, 0] / div)
        table[:, i + 1] = np.cos(position[:, 0] / div)
    return table


def double_counted_as_found(length, d_model, *, base=10000.0) -> np.ndarray:
    """The double-counting loop as it was published: the cosine one column further on.

    Column ``c`` gets ``base**(-2c/d_model)``: the sine of column ``i`` uses ``2 * i`` and
    the cosine of column ``i + 1`` uses ``2 * (i + 1)``. Frequencies fall twice too fast,
    and a pair's sine and cosine no longer share a frequency. :func:`double_counted` is
    the same loop with the cosine given its sine's exponent.
    """
    length, d_model = _length_and_width(length, d_model)
    base = _validation.positive_finite("base", base)
    if d_model % 2:
        raise ValueError(f"d_model must be even for this loop, got {d_model}")
    pe = np.zeros((length, d_model))
    for pos in range(length):
        for i in range(0, d_model, 2):
            pe[pos, i] = math.sin(pos / base ** ((2 * i) / d_model))
            pe[pos, i + 1] = math.cos(pos / base ** ((2 * (i + 1)) / d_model))
    return pe


def tutorial_table(length, d_model, *, base=10000.0) -> np.ndarray:
    """The PyTorch tutorial's construction, in NumPy: ``div_term`` in log space.

    ``pe[:, 0::2]`` takes ``sin(position * div_term)`` and ``pe[:, 1::2]`` the cosine.
    With an odd ``d_model`` there are ``(d + 1) / 2`` frequencies but only ``(d - 1) / 2``
    odd columns, and the second assignment raises ``ValueError`` (a ``RuntimeError`` in
    PyTorch).
    """
    length, d_model = _length_and_width(length, d_model)
    base = _validation.positive_finite("base", base)
    position = np.arange(length, dtype=np.float64)[:, None]
    div_term = np.exp(np.arange(0, d_model, 2) * (-math.log(base) / d_model))
    pe = np.zeros((length, d_model))
    pe[:, 0::2] = np.sin(position * div_term)
    pe[:, 1::2] = np.cos(position * div_term)
    return pe


def odd_truncated(length, d_model, *, base=10000.0) -> np.ndarray:
    """``d_model // 2`` sin/cos pairs with the exponent ``2i / d_model``: one column short.

    For an odd ``d_model`` the result has ``d_model - 1`` columns and no error is raised;
    the frequencies are still those of ``d_model``, so no table of its own width matches.
    """
    length, d_model = _length_and_width(length, d_model)
    base = _validation.positive_finite("base", base)
    position = np.arange(length, dtype=np.float64)[:, None]
    pairs = np.arange(d_model // 2)
    angle = position * base ** (-2 * pairs / d_model)
    table = np.empty((length, 2 * len(pairs)))
    table[:, 0::2] = np.sin(angle)
    table[:, 1::2] = np.cos(angle)
    return table


def added_tutorial_style(x, table) -> np.ndarray:
    """``x + pe[:x.shape[0]]`` with ``pe`` of shape ``(max_len, 1, d_model)``, as the tutorial.

    The tutorial's module expects ``x`` as ``(seq_len, batch, d_model)``. Given a
    batch-first ``(batch, seq_len, d_model)`` input it indexes the table by the batch
    index and broadcasts that one row over the whole sequence: no error, and every
    token of sequence ``b`` receives the row of position ``b``.
    """
    x = _validation.floating_array("x", x)
    table = _validation.floating_array("table", table)
    if x.ndim != 3 or table.ndim != 2 or table.shape[1] != x.shape[2]:
        raise ValueError(
            f"x must be (n, m, d_model) and table (max_len, d_model), got shapes "
            f"{x.shape} and {table.shape}"
        )
    if x.shape[0] > table.shape[0]:
        raise ValueError(f"table has {table.shape[0]} rows, x needs {x.shape[0]}")
    pe = table[:, None, :]
    return x + pe[: x.shape[0]]


def round_to_bfloat16(values) -> np.ndarray:
    """Round float32 ``values`` to the nearest bfloat16 (ties to even), returned as float32.

    bfloat16 keeps the top 16 bits of a float32: 8 exponent bits and 7 fraction bits.
    NumPy has no bfloat16 type, so the rounding is done on the bits.
    """
    array = np.asarray(values, dtype=np.float32)
    bits = array.view(np.uint32).astype(np.uint64)
    lsb = (bits >> 16) & 1
    rounded = ((bits + 0x7FFF + lsb) >> 16) << 16
    return rounded.astype(np.uint32).view(np.float32).reshape(array.shape)


def low_precision_angles(
    length, d_model, *, base=10000.0, start=0, precision="float16"
) -> np.ndarray:
    """The tutorial's table with positions, ``div_term`` and angles held in half precision.

    This is what running the construction under float16 or bfloat16 does: each operand
    and each product is rounded to the narrow format (float16 keeps 11 significant bits,
    bfloat16 8), and only then is the sine taken. Returned as float32.
    """
    length, d_model = _length_and_width(length, d_model)
    base = _validation.positive_finite("base", base)
    start = _validation.integer("start", start, minimum=0, maximum=MAX_POSITION)
    precision = _validation.choice("precision", precision, ("float16", "bfloat16"))
    if precision == "float16":

        def narrow(v):
            return np.asarray(v, dtype=np.float32).astype(np.float16).astype(np.float32)
    else:
        narrow = round_to_bfloat16
    position = narrow(np.arange(start, start + length, dtype=np.float64))[:, None]
    div_term = narrow(np.exp(np.arange(0, d_model, 2) * (-math.log(base) / d_model)))
    angle = narrow(position * div_term)
    table = np.empty((length, d_model), dtype=np.float32)
    table[:, 0::2] = np.sin(angle)
    table[:, 1::2] = np.cos(angle[:, : d_model // 2])
    return table


def swapped(length, d_model, *, base=10000.0) -> np.ndarray:
    """Cosines in the even columns and sines in the odd ones (even ``d_model``)."""
    table = sinusoidal(length, d_model, base=base)
    if d_model % 2:
        raise ValueError(f"d_model must be even to swap the pairs, got {d_model}")
    return table[:, np.arange(d_model) ^ 1]


def relative_table(max_distance, d_model, *, base=10000.0, mistake=None) -> np.ndarray:
    """Sinusoids of the relative offsets ``k = i - j`` from ``-max_distance`` to ``max_distance``.

    Row ``r`` is offset ``r - max_distance``. Correct, the sine columns are odd in ``k``:
    the past (``k < 0``) has the opposite sign of the future. ``mistake="absolute"``
    uses ``|i - j|``, so past and future get the same row; ``mistake="negated"`` uses
    ``j - i``, which flips the sign of every sine column.
    """
    max_distance = _validation.integer("max_distance", max_distance, minimum=0)
    if mistake is not None:
        mistake = _validation.choice("mistake", mistake, ("absolute", "negated"))
    offsets = np.arange(-max_distance, max_distance + 1)
    if mistake == "absolute":
        offsets = np.abs(offsets)
    elif mistake == "negated":
        offsets = -offsets
    table = sinusoidal(max_distance + 1, d_model, base=base)
    rows = table[np.abs(offsets)]
    sine_columns = np.arange(0, rows.shape[1], 2)
    rows[np.ix_(offsets < 0, sine_columns)] *= -1.0
    return rows


def reinitialised(table, *, std=0.02, padding_idx=None, seed=0) -> np.ndarray:
    """What an ``_init_weights`` pass does to an embedding that held a fixed table.

    Every weight is redrawn from ``normal(0, std)`` and the ``padding_idx`` row, if
    any, is zeroed, as for a learned embedding: the sinusoids are gone.
    """
    table = _validation.floating_array("table", table, min_ndim=2)
    std = _validation.positive_finite("std", std)
    rng = np.random.default_rng(seed)
    weights = rng.normal(0.0, std, size=table.shape).astype(table.dtype)
    if padding_idx is not None:
        padding_idx = _validation.integer(
            "padding_idx", padding_idx, minimum=0, maximum=table.shape[0] - 1
        )
        weights[padding_idx] = 0.0
    return weights


def tensor2tensor_signal(
    length, channels, *, min_timescale=1.0, max_timescale=1.0e4, start_index=0
) -> np.ndarray:
    """tensor2tensor's ``get_timing_signal_1d``, in NumPy.

    ``num_timescales = channels // 2`` frequencies, geometric from ``1/min_timescale``
    to exactly ``1/max_timescale``: the step is ``log(max/min) / (num_timescales - 1)``,
    where the paper divides by ``num_timescales``. Sines fill the first half of the
    columns, cosines the second, and an odd ``channels`` gets a zero last column.
    """
    length = _validation.integer("length", length, minimum=0)
    channels = _validation.integer("channels", channels, minimum=2)
    min_timescale = _validation.positive_finite("min_timescale", min_timescale)
    max_timescale = _validation.positive_finite("max_timescale", max_timescale)
    start_index = _validation.integer("start_index", start_index, minimum=0)
    position = np.arange(start_index, start_index + length, dtype=np.float64)
    num_timescales = channels // 2
    log_timescale_increment = math.log(max_timescale / min_timescale) / max(num_timescales - 1, 1)
    inv_timescales = min_timescale * np.exp(
        np.arange(num_timescales, dtype=np.float64) * -log_timescale_increment
    )
    scaled_time = position[:, None] * inv_timescales[None, :]
    signal = np.concatenate([np.sin(scaled_time), np.cos(scaled_time)], axis=1)
    return np.pad(signal, [[0, 0], [0, channels % 2]])


def fairseq_table(
    num_embeddings, embedding_dim, *, padding_idx=None, dtype=np.float64
) -> np.ndarray:
    """fairseq's ``SinusoidalPositionalEmbedding.get_embedding``, in NumPy.

    ``half_dim = embedding_dim // 2`` frequencies ``exp(-k * log(10000) / (half_dim - 1))``,
    ``[sin | cos]`` halves, a zero column for an odd ``embedding_dim`` and a zero row at
    ``padding_idx``. Row ``r`` is position ``r``; tokens are given positions from
    :func:`fairseq_positions`, which start at ``padding_idx + 1``. With
    ``dtype=np.float32`` every step is computed in float32, as M2M100's and NLLB's
    PyTorch code does.
    """
    num_embeddings = _validation.integer("num_embeddings", num_embeddings, minimum=1)
    embedding_dim = _validation.integer("embedding_dim", embedding_dim, minimum=4)
    dtype = _validation.floating_dtype("dtype", dtype)
    half_dim = embedding_dim // 2
    emb = dtype.type(math.log(10000) / (half_dim - 1))
    emb = np.exp(np.arange(half_dim).astype(dtype) * -emb)
    emb = np.arange(num_embeddings).astype(dtype)[:, None] * emb[None, :]
    emb = np.concatenate([np.sin(emb), np.cos(emb)], axis=1)
    if embedding_dim % 2 == 1:
        emb = np.concatenate([emb, np.zeros((num_embeddings, 1), dtype=dtype)], axis=1)
    if padding_idx is not None:
        padding_idx = _validation.integer(
            "padding_idx", padding_idx, minimum=0, maximum=num_embeddings - 1
        )
        emb[padding_idx, :] = 0.0
    return emb


def fairseq_positions(tokens, padding_idx) -> np.ndarray:
    """fairseq's ``make_positions``: non-pad tokens numbered from ``padding_idx + 1``.

    Padding tokens get ``padding_idx`` itself (the zero row of :func:`fairseq_table`).
    """
    tokens = _validation.integer_array("tokens", tokens, bound=2**62)
    padding_idx = _validation.integer("padding_idx", padding_idx, minimum=0)
    if tokens.ndim != 2:
        raise ValueError(f"tokens must be (batch, seq_len), got shape {tokens.shape}")
    mask = (tokens != padding_idx).astype(np.int64)
    return np.cumsum(mask, axis=1) * mask + padding_idx


def marian_table(n_positions, dim) -> np.ndarray:
    """Marian's table (Hugging Face ``MarianSinusoidalPositionalEmbedding``), in NumPy.

    The angles ``pos / 10000**(2 * (j // 2) / dim)`` are the paper's, computed in float64;
    the sines of the even ``j`` fill the first ``ceil(dim / 2)`` columns and the cosines
    of the odd ``j`` the rest, stored in float32.
    """
    n_positions = _validation.integer("n_positions", n_positions, minimum=0)
    dim = _validation.integer("dim", dim, minimum=2)
    j = np.arange(dim)
    angles = np.arange(n_positions, dtype=np.float64)[:, None] / np.power(
        10000.0, 2 * (j // 2) / dim
    )
    sentinel = (dim + 1) // 2
    out = np.empty((n_positions, dim), dtype=np.float32)
    out[:, :sentinel] = np.sin(angles[:, 0::2])
    out[:, sentinel:] = np.cos(angles[:, 1::2])
    return out


def whisper_table(length, channels, *, max_timescale=10000.0) -> np.ndarray:
    """Whisper's ``sinusoids(length, channels)``, in NumPy, in float32 as in PyTorch.

    ``channels // 2`` frequencies spaced with ``channels // 2 - 1`` in the denominator
    (tensor2tensor's spacing), ``[sin | cos]`` halves. ``channels`` must be even.
    """
    length = _validation.integer("length", length, minimum=0)
    channels = _validation.integer("channels", channels, minimum=4)
    if channels % 2:
        raise ValueError(f"channels must be even, got {channels}")
    max_timescale = _validation.positive_finite("max_timescale", max_timescale)
    increment = np.float32(math.log(max_timescale) / (channels // 2 - 1))
    inv_timescales = np.exp(-increment * np.arange(channels // 2, dtype=np.float32))
    scaled_time = np.arange(length, dtype=np.float32)[:, None] * inv_timescales[None, :]
    return np.concatenate([np.sin(scaled_time), np.cos(scaled_time)], axis=1)


def timestep_embedding(
    timesteps,
    embedding_dim,
    *,
    flip_sin_to_cos=False,
    downscale_freq_shift=1.0,
    scale=1.0,
    max_period=10000.0,
) -> np.ndarray:
    """diffusers' ``get_timestep_embedding``, in NumPy, in float32 as in PyTorch.

    ``half = embedding_dim // 2`` frequencies ``exp(-log(max_period) * k / (half -
    downscale_freq_shift))``: the default shift of 1 is tensor2tensor's spacing, 0 the
    paper's. The angles are ``scale * timestep * frequency`` (so the positions are the
    timesteps times ``scale``), ``[sin | cos]`` halves, ``[cos | sin]`` with
    ``flip_sin_to_cos``, and a zero column for an odd width.
    """
    timesteps = np.asarray(timesteps)
    if timesteps.ndim != 1:
        raise ValueError(f"timesteps must be 1-D, got shape {timesteps.shape}")
    embedding_dim = _validation.integer("embedding_dim", embedding_dim, minimum=4)
    half = embedding_dim // 2
    exponent = np.float32(-math.log(max_period)) * np.arange(half, dtype=np.float32)
    exponent = exponent / np.float32(half - downscale_freq_shift)
    emb = timesteps.astype(np.float32)[:, None] * np.exp(exponent)[None, :]
    emb = np.float32(scale) * emb
    emb = np.concatenate([np.sin(emb), np.cos(emb)], axis=-1)
    if flip_sin_to_cos:
        emb = np.concatenate([emb[:, half:], emb[:, :half]], axis=-1)
    if embedding_dim % 2 == 1:
        emb = np.pad(emb, ((0, 0), (0, 1)))
    return emb


def float32_rope_cache(length, dim, *, base=10000.0, start=0) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin of a RoPE cache as Hugging Face's rotary module builds them.

    ``inv_freq = 1 / base**(arange(0, dim, 2) / dim)`` and the angles
    ``position * inv_freq`` are computed in float32, and the pair values are stored
    twice, in two halves (``cat((freqs, freqs))``): shape ``(length, dim)``, float32.
    At position 100,000 the float32 angles put errors of a few thousandths into cos and
    sin (up to about 7e-3 over 2,048 positions and 64 pairs).

    Each float32 step is correctly rounded (the power, cosine and sine are computed in
    float64 and rounded once), so the cache is the same on every machine. A float32
    ``pow`` or ``cos`` from a library differs from machine to machine by an ulp (NumPy's
    AVX-512 kernels and glibc disagree on some frequencies), and one ulp of a frequency
    moves an angle near position 100,000 by up to about one float32 spacing of the
    angle, 2**-7.
    """
    length = _validation.integer("length", length, minimum=0)
    dim = _validation.integer("dim", dim, minimum=2)
    base = _validation.positive_finite("base", base)
    start = _validation.integer("start", start, minimum=0, maximum=2**24)
    exponents = np.arange(0, dim, 2).astype(np.float32) / np.float32(dim)
    inv_freq = np.float32(1.0) / np.power(base, exponents.astype(np.float64)).astype(np.float32)
    t = np.arange(start, start + length).astype(np.float32)
    freqs = np.outer(t, inv_freq)
    emb = np.concatenate([freqs, freqs], axis=-1).astype(np.float64)
    return np.cos(emb).astype(np.float32), np.sin(emb).astype(np.float32)
