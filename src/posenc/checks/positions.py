"""Positions read back from a table's phases, and how a shift of the positions is
named. Shared by :mod:`posenc.checks.tables` and :mod:`posenc.checks.rope`.
"""

from __future__ import annotations

import numpy as np


def wrap(angle: np.ndarray) -> np.ndarray:
    return (angle + np.pi) % (2 * np.pi) - np.pi


def estimate_position(phases: np.ndarray, freqs: np.ndarray) -> float | None:
    """The position whose angles best explain one row's ``phases``, or None.

    The two lowest frequencies beat against each other: their phase difference turns
    with the small difference of the frequencies, which gives a first estimate over a
    long range (from -0.16 to 1.5 million at d_model = 512). Each frequency, from the lowest
    up, then refines it by the phase it has left over, as the digits of a number are
    read from the most significant down.
    """
    order = np.argsort(freqs[: len(phases)])
    order = order[freqs[order] > 0]
    if len(order) == 0:
        return None
    low = order[0]
    position = phases[low] / freqs[low]
    if len(order) > 1 and freqs[order[1]] > freqs[low]:
        beat = freqs[order[1]] - freqs[low]
        # a turn of the beat read in [-0.1, 0.9) turns: positions from a little below 0
        turn = (phases[order[1]] - phases[low] + 0.2 * np.pi) % (2 * np.pi) - 0.2 * np.pi
        position = turn / beat
    for k in order:
        position += wrap(phases[k] - freqs[k] * position) / freqs[k]
    return float(position) if np.isfinite(position) else None


def shift_finding(begins: float, declared: float) -> str:
    """The sentence for rows that are at other positions than declared."""
    shift = begins - declared
    if shift == 2:
        why = "looks like fairseq's or M2M100's numbering, which starts at padding_idx + 1 = 2"
    elif abs(shift) == 1:
        # told by its direction: a start of -1 is not "positions counted from 1"
        why = (
            f"an off-by-one, every row one position {'early' if shift < 0 else 'late'} "
            f"(positions counted from {number(begins)} where {number(declared)} was meant, "
            f"or a {'+' if shift < 0 else '-'}1 missing from the position index)"
        )
    else:
        why = f"the positions are shifted by {number(shift)} (a start offset added or forgotten?)"
    return f"rows start at position {number(begins)}, not {number(declared)}: {why}"


def number(value: float) -> str:
    """A position as written: whole numbers in full, fractions to six digits."""
    return str(int(value)) if float(value).is_integer() else f"{value:.6g}"


def estimate_positions(phases: np.ndarray, freqs: np.ndarray, *, ratio: float = 2.0) -> np.ndarray:
    """:func:`estimate_position` for every row of ``phases`` at once (NaN where undefined).

    The beat of the two lowest frequencies gives the first estimate, as there; the
    refinement then reads only frequencies at least ``ratio`` apart (and the highest):
    each step leaves an error of about the phase noise over the frequency it read, far
    less than a turn of the next one, so the estimate is as close while a table of 512
    pairs costs about 15 steps instead of 512.
    """
    phases = np.atleast_2d(phases)
    count = phases.shape[1]
    order = np.argsort(freqs[:count])
    order = order[freqs[order] > 0]
    if len(order) == 0:
        return np.full(len(phases), np.nan)
    low = order[0]
    position = phases[:, low] / freqs[low]
    if len(order) > 1 and freqs[order[1]] > freqs[low]:
        beat = freqs[order[1]] - freqs[low]
        turn = (phases[:, order[1]] - phases[:, low] + 0.2 * np.pi) % (2 * np.pi) - 0.2 * np.pi
        position = turn / beat
    steps = [order[0]]
    for k in order[1:]:
        if freqs[k] >= ratio * freqs[steps[-1]]:
            steps.append(k)
    if steps[-1] != order[-1]:
        steps.append(order[-1])
    for k in steps:
        position = position + wrap(phases[:, k] - freqs[k] * position) / freqs[k]
    return np.where(np.isfinite(position), position, np.nan)
