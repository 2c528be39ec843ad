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


# At most this many jumps in the rows' positions are a repeated or skipped position id.
MAX_JUMPS = 3


def jumped_positions(found: np.ndarray, declared: np.ndarray) -> np.ndarray | None:
    """The positions the rows really have, when the positions read back (``found``) are
    the declared ones moved by a piecewise-constant amount with 1 to MAX_JUMPS jumps: a
    whole number of positions, or (declared positions increasing by other steps) a whole
    number of rows; else None."""
    if len(declared) < 3 or not np.all(np.isfinite(found)):
        return None
    offset = np.round(found - declared)
    steps = np.diff(declared)
    even = bool(np.all(steps == steps[0]))
    if even and np.all(np.abs(found - declared - offset) <= 0.25):
        jumps = np.count_nonzero(np.diff(offset))
        return declared + offset if 1 <= jumps <= MAX_JUMPS else None
    if np.all(steps < 0):  # decreasing positions (diffusion timesteps): read reversed
        actual = jumped_positions(found[::-1], declared[::-1])
        return None if actual is None else actual[::-1]
    if not np.all(steps > 0):
        return None
    nearest = np.clip(np.searchsorted(declared, found), 1, len(declared) - 1)
    nearest = np.where(
        np.abs(found - declared[nearest - 1]) <= np.abs(found - declared[nearest]),
        nearest - 1,
        nearest,
    )
    if np.any(np.abs(found - declared[nearest]) > 0.25 * steps.min()):
        return None
    moved = nearest - np.arange(len(declared))
    if not 1 <= np.count_nonzero(np.diff(moved)) <= MAX_JUMPS:
        return None
    return declared[nearest]


def jump_rows(declared: np.ndarray, actual: np.ndarray) -> np.ndarray:
    """The rows at which the positions of :func:`jumped_positions` jump: where the whole
    number of positions moved changes (evenly spaced positions), else where the number of
    rows moved does."""
    offset = actual - declared
    steps = np.diff(declared)
    if np.all(offset == np.round(offset)) and np.all(steps == steps[0]):
        return np.flatnonzero(np.diff(offset)) + 1
    order = np.argsort(declared, kind="stable")
    index = order[np.clip(np.searchsorted(declared[order], actual), 0, len(order) - 1)]
    return np.flatnonzero(np.diff(index - np.arange(len(declared)))) + 1


def jump_finding(declared: np.ndarray, actual: np.ndarray, rows: np.ndarray | None = None) -> str:
    """The sentence for rows whose positions jump: ``actual`` from
    :func:`jumped_positions`; ``rows`` the table row of each entry (default 0, 1, ...)."""
    rows = np.arange(len(declared)) if rows is None else rows
    unit = bool(np.all(np.diff(declared) == 1))
    parts = []
    sign = 1 if declared[-1] >= declared[0] else -1
    order = np.argsort(declared, kind="stable")
    index = order[np.clip(np.searchsorted(declared[order], actual), 0, len(order) - 1)]
    for r in jump_rows(declared, actual):
        if sign * (actual[r] - actual[r - 1]) <= 0:
            low, high = sorted((actual[r], actual[r - 1]))[::sign]
            what = "repeated"
        else:
            lo, hi = sorted((actual[r - 1], actual[r]))
            between = np.sort(declared[(declared > lo) & (declared < hi)])[::sign]
            if len(between) == 0:
                between = np.array([actual[r]])
            low, high, what = between[0], between[-1], "skipped"
        which = (
            f"position {number(low)} is {what}"
            if low == high
            else f"positions {number(low)}..{number(high)} are {what}"
        )
        moved = actual[r] - declared[r]
        how = "at their declared positions again"
        if moved and unit:
            k = float(abs(moved))
            how = f"{number(k)} position{'s' if k != 1 else ''} "
            how += "early" if moved < 0 else "late"
        elif moved:
            k = int(index[r] - r)
            how = (
                f"at the positions declared {abs(k)} row{'s' if abs(k) != 1 else ''} "
                f"{'earlier' if k < 0 else 'later'}"
            )
        parts.append(f"rows from {rows[r]} on are {how}: {which} at row {rows[r]}")
    start = "" if actual[0] == declared[0] else f"rows start at position {number(actual[0])}; "
    return (
        f"{start}{'; '.join(parts)} (a repeated or skipped position id, as chunked prefill "
        f"or sequence packing can produce, or a row inserted or dropped); build the rows "
        f"from the position ids each token really has"
    )
