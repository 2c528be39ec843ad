"""Chapter 6's clocks: each pair of a table row drawn as a hand, played without a kernel.

Row ``p`` of the sinusoidal table holds, for every pair ``i``, the sine and cosine of
one angle, ``omega_i * p``. Drawn as the hand of a clock, pair ``i`` turns by
``omega_i`` radians from one position to the next: the first hand a radian per
position, the last one barely. Moving ``k`` positions turns every hand by its own
``omega_i * k``, which is the rotation of chapter 6 seen rather than written.

- :func:`hands` reads the angles back from a table (``atan2`` of each pair).
- :func:`clock_frames` draws one picture per position, with its alt text.
- :func:`player` shows the pictures behind a play button and a slider. Both are
  linked to the pictures in the browser (``ipywidgets.jslink``), so the animation
  runs from the widget state stored in the notebook: on the static site, with no
  kernel and no network, as well as in Jupyter.

This module needs matplotlib, Pillow and ipywidgets (the ``explorer`` extra).
"""

from __future__ import annotations

import base64
import html
import math
from collections.abc import Sequence
from typing import NamedTuple

import ipywidgets as widgets
import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Circle

from posenc import _validation
from posenc.encoding import frequencies, sinusoidal
from posenc.explorer import png

CLOCK_INCHES = 1.1  # the width of one clock face
INTERVAL_MS = 600  # time between frames while playing


class ClockFrame(NamedTuple):
    """One picture of the clocks: row ``position`` of the table."""

    position: int
    angles: np.ndarray  # the hands, radians in [0, 2*pi), one per pair
    image: bytes  # PNG
    alt: str


def hands(table: np.ndarray) -> np.ndarray:
    """The angle in [0, 2*pi) of every pair of every row of an interleaved table.

    Column ``2i`` is the sine and ``2i + 1`` the cosine of pair ``i``'s angle, so the
    angle is ``atan2(sin, cos)``. An odd last column (a sine without its cosine) is
    left out. Returns an array of shape (rows, d_model // 2).
    """
    table = np.asarray(table)
    if table.ndim != 2 or table.shape[1] < 2:
        raise ValueError(f"table must be 2-D with at least 2 columns, got shape {table.shape}")
    pairs = table.shape[1] // 2
    sines = table[:, 0 : 2 * pairs : 2].astype(np.float64)
    cosines = table[:, 1 : 2 * pairs : 2].astype(np.float64)
    return np.mod(np.arctan2(sines, cosines), 2 * math.pi)


def _alt(position: int, angles: np.ndarray, d_model: int) -> str:
    degrees = np.degrees(angles)
    return (
        f"{len(angles)} clock faces, one per sine-cosine pair of row {position} of the "
        f"sinusoidal table with d_model = {d_model}. Each hand points at its pair's angle, "
        f"measured anticlockwise from three o'clock: pair 0 at {degrees[0]:.0f} degrees, "
        f"pair 1 at {degrees[1]:.0f}, the last pair at {degrees[-1]:.2f}."
    )


class _Clocks:
    """A figure of clock faces drawn once; each frame only turns the hands."""

    def __init__(self, omegas: np.ndarray):
        self.figure = Figure(figsize=(CLOCK_INCHES * len(omegas), 1.5))
        axes = np.atleast_1d(self.figure.subplots(1, len(omegas)))
        self.figure.subplots_adjust(left=0.01, right=0.99, bottom=0.02, top=0.66, wspace=0.15)
        self.hands = []
        for i, ax in enumerate(axes):
            ax.add_patch(Circle((0, 0), 1.0, fill=False, edgecolor="0.45", linewidth=1.0))
            ax.plot([0], [0], "o", color="#0b3c5d", markersize=3)
            (hand,) = ax.plot([0, 1], [0, 0], color="#0b3c5d", linewidth=2.2)
            self.hands.append(hand)
            ax.set_xlim(-1.15, 1.15)
            ax.set_ylim(-1.15, 1.15)
            ax.set_aspect("equal")
            ax.axis("off")
            ax.set_title(f"pair {i}\nω = {omegas[i]:.3g}", fontsize=8)
        self.title = self.figure.suptitle("", fontsize=9, y=0.99)

    def draw(self, position: int, angles: np.ndarray) -> bytes:
        # The (cos, sin) plane: angle 0 at three o'clock, turning anticlockwise, so a hand
        # is the complex number e^{j angle} (chapter 6's convention).
        for hand, angle in zip(self.hands, angles, strict=True):
            hand.set_data([0, math.cos(angle)], [0, math.sin(angle)])
        self.title.set_text(f"position p = {position}")
        return png(self.figure)


def clock_frames(
    d_model: int = 16, positions: Sequence[int] = range(32), *, base: float = 10000.0
) -> list[ClockFrame]:
    """One picture of the ``d_model // 2`` clocks for every position in ``positions``.

    The angles come from the table itself (:func:`posenc.sinusoidal`, read back with
    :func:`hands`), so the pictures show what the table holds.
    """
    d_model = _validation.integer("d_model", d_model, minimum=2)
    if d_model % 2:
        raise ValueError(f"d_model must be even (every column in a pair), got {d_model}")
    positions = [_validation.integer("position", p, minimum=0) for p in positions]
    if not positions:
        raise ValueError("positions must not be empty")
    base = _validation.positive_finite("base", base)
    table = sinusoidal(max(positions) + 1, d_model, base=base)
    angles = hands(table[positions])
    omegas = frequencies(d_model, base=base)
    clocks = _Clocks(omegas)
    return [
        ClockFrame(position, row, clocks.draw(position, row), _alt(position, row, d_model))
        for position, row in zip(positions, angles, strict=True)
    ]


def player(
    frames: Sequence[ClockFrame], *, interval_ms: int = INTERVAL_MS, label: str = "position"
) -> widgets.VBox:
    """The frames behind a play button and a slider, linked in the browser.

    ``Play`` drives the slider and the slider picks the frame shown by a ``Stack``;
    both links are ``jslink``, kept by the widget manager alone. Each frame is an
    ``<img>`` with its alt text.
    """
    if not frames:
        raise ValueError("frames must not be empty")
    interval_ms = _validation.integer("interval_ms", interval_ms, minimum=1)
    last = len(frames) - 1
    # No descriptions: the widget manager would typeset them with MathJax 2's API,
    # which this site's MathJax 3 lacks. The visible label is an HTML widget, and the
    # tooltips name the controls (the site's widgets.js reads them).
    play = widgets.Play(
        value=0, min=0, max=last, step=1, interval=interval_ms, tooltip=f"play the {label}s"
    )
    slider = widgets.IntSlider(value=0, min=0, max=last, step=1, tooltip=label)
    pictures = [
        widgets.HTML(
            f'<img src="data:image/png;base64,{base64.b64encode(f.image).decode("ascii")}" '
            f'alt="{html.escape(f.alt, quote=True)}" style="max-width: 100%">'
        )
        for f in frames
    ]
    stack = widgets.Stack(pictures, selected_index=0)
    widgets.jslink((play, "value"), (slider, "value"))
    widgets.jslink((slider, "value"), (stack, "selected_index"))
    caption = widgets.HTML(html.escape(label))
    return widgets.VBox([widgets.HBox([play, caption, slider]), stack])
