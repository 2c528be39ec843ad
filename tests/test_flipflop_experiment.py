"""Tests for posenc.experiments.flipflop: the task, the heads' biases, the holding test."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from posenc.experiments import flipflop as ff


def _last_write_by_loop(row: torch.Tensor) -> int:
    """The value of the last write in one sequence, found by a plain loop."""
    value = None
    for token in row.tolist():
        if ff.N_NOISE <= token < ff.QUERY:
            value = token - ff.N_NOISE
    return value


class _Oracle(torch.nn.Module):
    """Reads the last write off the tokens; right up to ``reach`` tokens back, else wrong."""

    def __init__(self, reach: int, miss: int = -1) -> None:
        super().__init__()
        self.reach, self.miss = reach, miss

    def forward(self, tok: torch.Tensor) -> torch.Tensor:
        out = torch.zeros(len(tok), ff.N_VAL)
        for i, row in enumerate(tok.tolist()):
            at = max(j for j, t in enumerate(row) if ff.N_NOISE <= t < ff.QUERY)
            value = row[at] - ff.N_NOISE
            back = len(row) - 1 - at
            if back > self.reach or back == self.miss:
                value = (value + 1) % ff.N_VAL  # wrong on purpose
            out[i, value] = 1.0
        return out


def test_target_is_the_last_write():
    tok, target = ff.flip_flop(64, 40, torch.Generator().manual_seed(0))
    assert tok.shape == (64, 40) and target.shape == (64,)
    assert (tok[:, -1] == ff.QUERY).all() and (tok[:, 0] >= ff.N_NOISE).all()
    assert target.tolist() == [_last_write_by_loop(row) for row in tok]
    # not simply the first write: the two differ in some sequence
    firsts = (tok[:, 0] - ff.N_NOISE).tolist()
    assert firsts != target.tolist()


@pytest.mark.parametrize("d", [1, 7, 50, 127])
def test_last_write_at_puts_the_last_write_d_back(d):
    tok, value = ff.last_write_at(d, 30, torch.Generator().manual_seed(d))
    writes = (tok >= ff.N_NOISE) & (tok < ff.QUERY)
    last = 127 - (torch.arange(128) * writes).argmax(1)
    assert (last == d).all()
    assert value.tolist() == [_last_write_by_loop(row) for row in tok]


def test_fox_with_constant_gates_is_alibi():
    s = 0.3
    fox, alibi = ff.FoXHead(), ff.ALiBiHead()
    with torch.no_grad():
        fox.gate.weight.zero_()
        fox.gate.bias.fill_(-math.log(math.expm1(s)))  # sigmoid(b) = e^-s
        alibi.log_slope.fill_(math.log(s))
    tok, _ = ff.flip_flop(3, 20, torch.Generator().manual_seed(1))
    zeros = torch.zeros(3, 20)
    with torch.no_grad():
        from_fox = fox.add_bias(zeros, fox.emb(tok))
        from_alibi = alibi.add_bias(zeros, alibi.emb(tok))
    assert torch.allclose(from_fox, from_alibi, atol=1e-5)
    assert torch.allclose(from_alibi[0, :2], torch.tensor([-19 * s, -18 * s]))
    with torch.no_grad():  # a different gate no longer matches
        fox.gate.bias.fill_(0.0)
        assert not torch.allclose(fox.add_bias(zeros, fox.emb(tok)), from_alibi, atol=1e-3)


def test_nope_adds_nothing():
    scores = torch.randn(2, 5)
    assert ff.make_head("NoPE").add_bias(scores, None) is scores


def test_holding_on_right_wrong_and_partial_heads():
    distances = np.arange(1, 127, 5)
    batches = ff.held_out_batches(distances, n=20)
    assert ff.holding(_Oracle(reach=10**6), batches, distances) == 126
    assert ff.holding(_Oracle(reach=-1), batches, distances) == 0
    assert ff.holding(_Oracle(reach=30), batches, distances) == 26
    # one missed distance ends the hold, even with every farther one right
    assert ff.holding(_Oracle(reach=10**6, miss=16), batches, distances) == 11
    assert ff.hits(_Oracle(reach=30), batches).tolist() == [20] * 6 + [0] * 20


def test_training_is_reproducible_and_learns_something():
    a = ff.train("FoX", 3, length=16, steps=30, batch=32)
    b = ff.train("FoX", 3, length=16, steps=30, batch=32)
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(pa, pb)
    tok, target = ff.flip_flop(256, 16, torch.Generator().manual_seed(99))
    with torch.no_grad():
        right = (a(tok).argmax(1) == target).float().mean().item()
    assert right > 0.4  # chance is 0.25


@pytest.mark.parametrize(
    ("call", "bad"),
    [
        (lambda: ff.make_head("RoPE"), "'RoPE'"),
        (lambda: ff.train("FoX", -1), "-1"),
        (lambda: ff.train("FoX", 0, length=1), "1"),
        (lambda: ff.train("FoX", 0, lr=-0.5), "-0.5"),
        (lambda: ff.flip_flop(0, 8, torch.Generator()), "0"),
        (lambda: ff.last_write_at(128, 4, torch.Generator()), "128"),
        (lambda: ff.held_out_batches([]), "[]"),
        (lambda: ff.holding(_Oracle(0), [], [1]), "0 batches"),
        (lambda: ff.holding(_Oracle(0), [(None, None)], [1], need=1.5), "1.5"),
    ],
)
def test_bad_arguments_raise_naming_the_value(call, bad):
    with pytest.raises((ValueError, TypeError), match=bad.replace("[", r"\[").replace("]", r"\]")):
        call()


class _Scores(Exception):
    """Carries the scores ``forward`` passes to ``add_bias``."""


def test_content_lead_matches_the_scores_forward_computes():
    head = ff.make_head("NoPE")

    def grab(scores, x):
        raise _Scores(scores)

    head.add_bias = grab
    tok = torch.arange(ff.QUERY + 1)[None]  # every token id once, the query last
    with pytest.raises(_Scores) as caught:
        head(tok)
    score = caught.value.args[0][0].detach()
    want = score[ff.N_NOISE : ff.QUERY].mean() - score[: ff.N_NOISE].mean()
    assert math.isclose(ff.content_lead(head), float(want), rel_tol=1e-5, abs_tol=1e-5)
    # the query's own score is not part of the lead
    assert not math.isclose(
        ff.content_lead(head),
        float(score[ff.N_NOISE :].mean() - score[: ff.N_NOISE].mean()),
        abs_tol=1e-5,
    )


def test_distance_price_and_seed_rows():
    s = 0.3
    fox, alibi = ff.FoXHead(), ff.ALiBiHead()
    with torch.no_grad():
        fox.gate.weight.zero_()
        fox.gate.bias.fill_(-math.log(math.expm1(s)))  # every gate e^-s
        alibi.log_slope.fill_(math.log(s))
    assert math.isclose(ff.distance_price(fox), s, rel_tol=1e-5)
    assert math.isclose(ff.distance_price(alibi), s, rel_tol=1e-6)
    assert ff.distance_price(ff.make_head("NoPE")) == 0.0
    distances = [1, 6]
    batches = ff.held_out_batches(distances, n=5)
    rows = ff.seed_rows([{"FoX": fox, "NoPE": ff.make_head("NoPE")}], batches, distances)
    assert [r["head"] for r in rows] == ["FoX", "NoPE"] and math.isnan(rows[1]["bound"])
    want = ff.holding_bound(ff.content_lead(fox), s)
    assert math.isclose(rows[0]["bound"], want, rel_tol=1e-4)
    text = ff.format_rows(rows, ceiling=6).splitlines()
    assert len(text) == 3 and text[2].endswith("< 0.1      -     0")
    assert "   0.3  " in text[1]


def test_holding_bound_matches_the_attention_it_promises():
    lead, price = 20.0, 0.5
    d = ff.holding_bound(lead, price)
    assert 32 < d < 32.5  # (20 - ln 19 - ln(1 / (1 - e^-0.5))) / 0.5 = 32.2
    # at distance d the write's share against infinitely many noise keys is 95%
    noise = 1 / (1 - math.exp(-price))
    write = math.exp(lead - price * d)
    assert math.isclose(write / (write + noise), 0.95, rel_tol=1e-12)
    assert math.isnan(ff.holding_bound(lead, 0.0))
