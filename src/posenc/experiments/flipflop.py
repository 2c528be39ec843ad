"""A simplified flip-flop task and three one-head attention models (chapter 26).

The task: random tokens, about 15% of them *writes* of one of :data:`N_VAL` values; the
last token (:data:`QUERY`) asks for the value written last. Token ids: ``0 ..
N_NOISE - 1`` are noise, ``N_NOISE + v`` writes the value ``v``, :data:`QUERY` asks.

Three heads (:func:`make_head`), the same otherwise:

- ``"NoPE"`` (:class:`FlipFlopHead`): content scores only;
- ``"FoX"`` (:class:`FoXHead`): adds ``c_last - c_j``, ``c`` the cumulative sum of
  ``log sigmoid(w . x_t + b)`` over the token embeddings ``x_t``;
- ``"ALiBi"`` (:class:`ALiBiHead`): adds ``-s (last - j)``, one learned slope ``s``.

:func:`train` trains a head at one length; :func:`held_out_batches` builds held-out
sequences whose last write lies exactly ``d`` tokens back; :func:`hits` counts right
answers per batch and :func:`holding` returns the holding distance: the largest tested
``d`` with every tested distance up to it at least 95% right.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from posenc._validation import choice, integer

N_NOISE = 8
"""Noise token ids: ``0 .. N_NOISE - 1``."""
N_VAL = 4
"""Values a write can carry; ``N_NOISE + v`` writes ``v``."""
QUERY = N_NOISE + N_VAL
"""The id of the final token, which asks for the last value written."""
KINDS = ("FoX", "ALiBi", "NoPE")
"""The heads :func:`make_head` builds."""
WRITE_RATE = 0.15
"""The chance that a token (other than the first and the last) is a write."""


def flip_flop(n: int, length: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw ``n`` flip-flop sequences and their targets.

    Parameters
    ----------
    n : int
        Number of sequences, at least 1.
    length : int
        Tokens per sequence, at least 2. Token 0 is always a write, the last token is
        :data:`QUERY`.
    gen : torch.Generator
        The source of randomness (drawn from in a fixed order: noise, writes, values).

    Returns
    -------
    tok : torch.Tensor
        Token ids, shape ``(n, length)``, int64.
    target : torch.Tensor
        The value of each sequence's last write, shape ``(n,)``, in ``0 .. N_VAL - 1``.
    """
    n = integer("n", n, minimum=1)
    length = integer("length", length, minimum=2)
    tok = torch.randint(0, N_NOISE, (n, length), generator=gen)
    write = torch.rand(n, length, generator=gen) < WRITE_RATE
    write[:, 0], write[:, -1] = True, False
    values = torch.randint(0, N_VAL, (n, length), generator=gen)
    tok = torch.where(write, N_NOISE + values, tok)
    tok[:, -1] = QUERY
    last = (torch.arange(length) * write).argmax(1)
    return tok, tok[torch.arange(n), last] - N_NOISE


class FlipFlopHead(nn.Module):
    """One attention head read out at the last token, with no position signal (NoPE).

    Parameters
    ----------
    d : int
        Embedding and head size, at least 1.

    Notes
    -----
    Subclasses add a position bias by overriding :meth:`add_bias`.
    """

    def __init__(self, d: int = 16) -> None:
        super().__init__()
        d = integer("d", d, minimum=1)
        self.emb = nn.Embedding(QUERY + 1, d)
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, N_VAL)

    def add_bias(self, scores: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """Return ``scores`` (the last query's, shape ``(n, length)``) with the bias added."""
        return scores

    def forward(self, tok: torch.Tensor) -> torch.Tensor:
        """Logits over the :data:`N_VAL` values, shape ``(n, N_VAL)``, for tokens ``tok``."""
        x = self.emb(tok)
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        scores = (k @ q[:, -1, :, None])[..., 0]  # the last token's query
        scores = self.add_bias(scores, x)
        return self.out((scores.softmax(-1)[..., None] * v).sum(1))


class FoXHead(FlipFlopHead):
    """A head with FoX's bias: forget gates ``f_t = sigmoid(w . x_t + b)`` per token."""

    def __init__(self, d: int = 16) -> None:
        super().__init__(d)
        self.gate = nn.Linear(self.emb.embedding_dim, 1)

    def add_bias(self, scores: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """Add ``c_last - c_j`` with ``c = cumsum(log f)``."""
        c = nn.functional.logsigmoid(self.gate(x))[..., 0].cumsum(1)
        return scores + c[:, -1:] - c


class ALiBiHead(FlipFlopHead):
    """A head with ALiBi's bias and one learned slope, starting at 1/16."""

    def __init__(self, d: int = 16) -> None:
        super().__init__(d)
        self.log_slope = nn.Parameter(torch.tensor(math.log(1 / 16)))

    def add_bias(self, scores: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """Add ``-s (last - j)`` with ``s = exp(log_slope)``."""
        back = torch.arange(scores.shape[1] - 1, -1, -1.0)
        return scores - self.log_slope.exp() * back


def make_head(kind: str, d: int = 16) -> FlipFlopHead:
    """Build the head ``kind``, one of :data:`KINDS`, of size ``d``."""
    kind = choice("kind", kind, KINDS)
    return {"FoX": FoXHead, "ALiBi": ALiBiHead, "NoPE": FlipFlopHead}[kind](d)


def train(
    kind: str,
    seed: int,
    length: int = 32,
    *,
    steps: int = 400,
    batch: int = 128,
    lr: float = 1e-2,
) -> FlipFlopHead:
    """Train a head ``kind`` on flip-flop sequences of one length.

    Parameters
    ----------
    kind : str
        One of :data:`KINDS`.
    seed : int
        Seeds the weights (``torch.manual_seed(seed)``) and the data (a generator seeded
        ``seed + 1``), so every kind sees the same sequences.
    length : int
        Training length, at least 2.
    steps, batch : int
        Adam steps and sequences per step, each at least 1.
    lr : float
        Adam's learning rate, finite and > 0.

    Returns
    -------
    FlipFlopHead
        The trained head.
    """
    seed = integer("seed", seed, minimum=0)
    length = integer("length", length, minimum=2)
    steps = integer("steps", steps, minimum=1)
    batch = integer("batch", batch, minimum=1)
    if not (isinstance(lr, float) and math.isfinite(lr) and lr > 0):
        raise ValueError(f"lr must be a finite float > 0, got {lr!r}")
    torch.manual_seed(seed)
    data = torch.Generator().manual_seed(seed + 1)
    head = make_head(kind)
    opt = torch.optim.Adam(head.parameters(), lr=lr)
    for _ in range(steps):
        tok, target = flip_flop(batch, length, data)
        loss = nn.functional.cross_entropy(head(tok), target)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return head


def last_write_at(
    d: int, n: int, gen: torch.Generator, length: int = 128
) -> tuple[torch.Tensor, torch.Tensor]:
    """Flip-flop sequences whose last write lies exactly ``d`` tokens before the query.

    Parameters
    ----------
    d : int
        Distance from the query back to the last write, in ``1 .. length - 1``.
    n : int
        Number of sequences, at least 1.
    gen : torch.Generator
        The source of randomness.
    length : int
        Tokens per sequence, at least 2.

    Returns
    -------
    tok, value : torch.Tensor
        Tokens ``(n, length)`` and the forced last write's value ``(n,)``.
    """
    length = integer("length", length, minimum=2)
    d = integer("d", d, minimum=1, maximum=length - 1)
    tok, _ = flip_flop(n, length, gen)
    late = (tok >= N_NOISE) & (torch.arange(length) > length - 1 - d)
    noise_ids = torch.randint(0, N_NOISE, tok.shape, generator=gen)
    tok = torch.where(late, noise_ids, tok)  # no write after the forced one
    value = torch.randint(0, N_VAL, (n,), generator=gen)
    tok[:, length - 1 - d], tok[:, -1] = N_NOISE + value, QUERY
    return tok, value


def held_out_batches(
    distances: Sequence[int], n: int = 200, seed: int = 2, length: int = 128
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """One :func:`last_write_at` batch per distance, drawn in order from one generator."""
    seed = integer("seed", seed, minimum=0)
    if len(distances) == 0:
        raise ValueError(f"distances must not be empty, got {distances!r}")
    gen = torch.Generator().manual_seed(seed)
    return [last_write_at(int(d), n, gen, length) for d in distances]


def hits(head: nn.Module, batches: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> np.ndarray:
    """Right answers of ``head`` in each batch, as an int array."""
    with torch.no_grad():
        return np.array([int((head(t).argmax(1) == y).sum()) for t, y in batches])


def holding(
    head: nn.Module,
    batches: Sequence[tuple[torch.Tensor, torch.Tensor]],
    distances: Sequence[int],
    need: float = 0.95,
) -> int:
    """The largest tested distance with every tested distance up to it ``need`` right.

    Parameters
    ----------
    head : torch.nn.Module
        Maps tokens ``(n, length)`` to logits ``(n, N_VAL)``.
    batches : sequence of (tokens, values)
        One batch per distance, from :func:`held_out_batches`.
    distances : sequence of int
        The distances, increasing, one per batch.
    need : float
        The fraction right required, in ``(0, 1]``.

    Returns
    -------
    int
        0 when the first distance already fails; ``distances[-1]`` (the test's
        ceiling) when none fails.
    """
    if len(batches) != len(distances) or not len(distances):
        raise ValueError(
            f"give one batch per distance, got {len(batches)} batches "
            f"and {len(distances)} distances"
        )
    if not 0 < need <= 1:
        raise ValueError(f"need must lie in (0, 1], got {need!r}")
    sizes = np.array([len(y) for _, y in batches])
    fine = np.cumprod(hits(head, batches) >= need * sizes).astype(bool)
    return int(np.asarray(distances)[fine].max(initial=0))


def content_lead(head: FlipFlopHead) -> float:
    """The final query's mean key score on writes minus its mean key score on noise.

    Scores are ``k_tok . q_QUERY`` over the token embeddings, the raw scores the head adds
    its bias to; with no position in the embeddings they depend on the token id alone.
    """
    with torch.no_grad():
        _, k, _ = head.qkv(head.emb.weight).chunk(3, dim=-1)
        q = head.qkv(head.emb.weight[QUERY])[: k.shape[1]]
        score = k @ q
    return float(score[N_NOISE:QUERY].mean() - score[:N_NOISE].mean())


def distance_price(head: FlipFlopHead) -> float:
    """What one noise token between a write and the query costs the write's score.

    ALiBi: the slope ``s``; FoX: the mean of ``-log f`` over the noise tokens; NoPE: 0.
    """
    with torch.no_grad():
        if isinstance(head, ALiBiHead):
            return float(head.log_slope.exp())
        if isinstance(head, FoXHead):
            log_f = nn.functional.logsigmoid(head.gate(head.emb.weight[:N_NOISE]))
            return float(-log_f.mean())
    return 0.0


def holding_bound(lead: float, price: float, need: float = 0.95) -> float:
    """The distance a head with one ``price`` per token holds at least (``nan`` at 0).

    A write ``d`` tokens back scores ``lead - price * d`` above a noise key at distance 0;
    the noise keys together weigh at most ``1 / (1 - e^-price)`` such keys. The write takes
    ``need`` of the attention once its lead over that sum reaches ``ln(need / (1 - need))``
    (``ln 19`` for 95%), so ``d <= (lead - ln 19 - ln(1 / (1 - e^-price))) / price``.
    """
    if not price > 0:
        return math.nan
    noise = -math.log1p(-math.exp(-price))  # ln(1 / (1 - e^-price))
    return (lead - math.log(need / (1 - need)) - noise) / price


def seed_rows(
    heads: Sequence[dict[str, FlipFlopHead]],
    batches: Sequence[tuple[torch.Tensor, torch.Tensor]],
    distances: Sequence[int],
) -> list[dict[str, float | int | str]]:
    """One row per seed and head: lead, price, :func:`holding_bound` and measured distance.

    ``heads[seed]`` maps a name to a trained head.
    """
    rows = []
    for seed, named in enumerate(heads):
        for name, head in named.items():
            lead, price = content_lead(head), distance_price(head)
            rows.append(
                {
                    "seed": seed,
                    "head": name,
                    "lead": lead,
                    "price": price,
                    "bound": holding_bound(lead, price),
                    "held": holding(head, batches, distances),
                }
            )
    return rows


def format_rows(rows: Sequence[dict[str, float | int | str]], ceiling: int) -> str:
    """A plain-text table of :func:`seed_rows`: price, bound and measured distance.

    The price prints to one decimal (``< 0.1`` below 0.1) and the bound rounded down
    (``> ceiling`` past the test's ceiling, ``-`` where there is none): digits a re-run on
    another CPU reproduces.
    """
    lines = ["seed  head      price  bound  held"]
    for r in rows:
        bound = r["bound"]
        if math.isnan(bound):
            text = "-"
        else:
            text = f"> {ceiling}" if bound > ceiling else str(math.floor(bound))
        name = f"{r['seed']:4}  {r['head']:<8}"
        price = "< 0.1" if r["price"] < 0.1 else f"{r['price']:.1f}"
        lines.append(f"{name} {price:>6}  {text:>5}  {r['held']:4}")
    return "\n".join(lines)
