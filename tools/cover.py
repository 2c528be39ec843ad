"""Draw the book's cover, the picture on the landing page and in link previews.

``python -m tools.cover`` writes ``book/_static/cover.png``: the sinusoidal table of
the first 96 positions at d_model = 128 (posenc.sinusoidal), one row per position and
one column per entry, in viridis, beside three of its pairs drawn as clocks: as the
position grows, each pair's (sine, cosine) point goes round its circle at its own
speed. ``tests/test_site.py`` checks that the committed picture is what this script
draws (up to anti-aliased pixels).
"""

from __future__ import annotations

import argparse
import io
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

import posenc

ROOT = Path(__file__).resolve().parent.parent
COVER = ROOT / "book" / "_static" / "cover.png"
POSITIONS, D_MODEL = 96, 128
# Three pairs as concentric clocks (pair: radius): pair 19 turns once in 96 positions.
PAIRS = {19: 1.0, 22: 0.72, 26: 0.44}
# The cover is shared as a link preview too: 1200 x 630 pixels, the size those expect.
SIZE_INCHES, DPI = (12.0, 6.3), 100


def draw() -> bytes:
    """The cover as PNG bytes (no date or software version stored in the file)."""
    table = posenc.sinusoidal(POSITIONS, D_MODEL)
    with plt.rc_context({"font.size": 15, "axes.titlesize": 17}):
        fig = plt.Figure(figsize=SIZE_INCHES, dpi=DPI)
        grid = fig.add_gridspec(1, 2, width_ratios=[2.1, 1], wspace=0.18)
        ax = fig.add_subplot(grid[0])
        ax.imshow(table, cmap="viridis", vmin=-1, vmax=1, aspect="auto")
        ax.set_xlabel("entry $j$ of the encoding")
        ax.set_ylabel("position $p$")
        ax.set_title("$PE(p, j)$: one row per position")
        clock = fig.add_subplot(grid[1])
        omega = posenc.encoding.frequencies(D_MODEL)
        for pair, radius in PAIRS.items():
            angle = np.arange(POSITIONS) * omega[pair]
            x, y = radius * np.sin(angle), radius * np.cos(angle)
            clock.plot(x, y, color="0.8", lw=1)
            clock.scatter(x, y, c=np.arange(POSITIONS), cmap="viridis", s=18, zorder=3)
        clock.set_aspect("equal")
        clock.set_xlim(-1.15, 1.15)
        clock.set_ylim(-1.15, 1.15)
        clock.axis("off")
        clock.set_title("pairs 19, 22, 26: each turns\nat its own speed")
        fig.subplots_adjust(left=0.07, right=0.98, bottom=0.13, top=0.9)
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=DPI, metadata={"Software": None})
    return buffer.getvalue()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=COVER)
    args = parser.parse_args(argv)
    args.out.write_bytes(draw())
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
