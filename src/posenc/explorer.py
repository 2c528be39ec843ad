"""Chapter 6's explorer: the sinusoidal table as a heatmap beside its dot product by offset.

Two ways to look at the same pictures:

- :class:`Explorer` — ipywidgets controls (d_model, length, base, dtype) that redraw
  the figure. It needs a running kernel: Jupyter, Binder, or the page's live-code
  button.
- :func:`static_explorer` — the figure drawn in advance for a grid of d_model and
  base values, behind two sliders that a few lines of JavaScript in the page move.
  It needs no kernel and nothing from the network, so it works on the static site.

Both draw with :func:`draw` from a :class:`Frame`, the numbers behind one picture.
This module needs matplotlib and ipywidgets (the ``explorer`` extra), which
``import posenc`` alone does not load.
"""

from __future__ import annotations

import base64
import hashlib
import html
import io
import json
import math
from typing import NamedTuple

import ipywidgets as widgets
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from PIL import Image

from posenc import _validation
from posenc.encoding import sinusoidal
from posenc.properties import offset_dot_product, wavelengths

DTYPES = ("float64", "float32", "float16")
D_MODEL_RANGE = (2, 256)
LENGTH_RANGE = (16, 1024)
LOG10_BASE_RANGE = (1.0, 6.0)
FIGSIZE = (9.0, 3.4)
DPI = 80
PALETTE = 128
COLORMAP = "viridis"


class Frame(NamedTuple):
    """The numbers behind one picture of the explorer."""

    d_model: int
    base: float
    dtype: np.dtype
    table: np.ndarray  # sinusoidal(length, d_model, base=base), rounded to dtype
    reference: int  # the position every other one is compared with: length // 2
    offsets: np.ndarray  # k = p - reference for every row p
    similarity: np.ndarray  # cosine of the angle between rows reference and reference + k
    rounding_error: float  # largest |table - float64 table|
    nearest_rows: float  # smallest distance between two rows of the table (float64)

    @property
    def length(self) -> int:
        return self.table.shape[0]

    @property
    def longest_wavelength(self) -> float:
        return float(wavelengths(self.d_model, base=self.base)[-1])


def _check(d_model, length, base, dtype) -> tuple[int, int, float, np.dtype]:
    d_model = _validation.integer("d_model", d_model, minimum=D_MODEL_RANGE[0])
    if d_model > D_MODEL_RANGE[1] or d_model % 2:
        raise ValueError(f"d_model must be even and at most {D_MODEL_RANGE[1]}, got {d_model}")
    length = _validation.integer("length", length, minimum=LENGTH_RANGE[0])
    if length > LENGTH_RANGE[1]:
        raise ValueError(f"length must be at most {LENGTH_RANGE[1]}, got {length}")
    base = _validation.positive_finite("base", base)
    low, high = (10.0**e for e in LOG10_BASE_RANGE)
    if not low <= base <= high:
        raise ValueError(f"base must lie in [{low:g}, {high:g}], got {base!r}")
    dtype = _validation.floating_dtype("dtype", dtype)
    if dtype.name not in DTYPES:
        raise TypeError(f"dtype must be one of {DTYPES}, got {dtype.name!r}")
    return d_model, length, base, dtype


def frame(d_model=64, length=128, base=10000.0, dtype="float64") -> Frame:
    """Compute one picture's numbers; arguments are checked as the controls limit them."""
    d_model, length, base, dtype = _check(d_model, length, base, dtype)
    exact = sinusoidal(length, d_model, base=base)
    table = exact.astype(dtype)  # the float64 table rounded once, as the text says
    reference = length // 2
    rows = table.astype(np.float64)
    norms = np.linalg.norm(rows, axis=1)
    similarity = rows @ rows[reference] / (norms * norms[reference])
    # |PE(p) - PE(p + k)|^2 = d - 2 S(k), the same for every p (chapter 6).
    squared = d_model - 2 * offset_dot_product(np.arange(1, length), d_model, base=base)
    return Frame(
        d_model=d_model,
        base=base,
        dtype=dtype,
        table=table,
        reference=reference,
        offsets=np.arange(length) - reference,
        similarity=similarity,
        rounding_error=float(np.abs(rows - exact).max()),
        nearest_rows=float(np.sqrt(max(squared.min(), 0.0))),
    )


def draw(figure: Figure, data: Frame) -> None:
    """Draw ``data`` on ``figure`` (cleared first): heatmap left, similarity right."""
    figure.clear()
    heat, curve = figure.subplots(1, 2, gridspec_kw={"width_ratios": [1.15, 1]})
    image = heat.imshow(
        data.table.astype(np.float64),
        aspect="auto",
        cmap=COLORMAP,
        vmin=-1,
        vmax=1,
        interpolation="nearest",
    )
    heat.set_xlabel("column (embedding dimension)")
    heat.set_ylabel("position p")
    heat.set_title(f"PE table, d_model={data.d_model}, base={data.base:,.0f}", fontsize=10)
    figure.colorbar(image, ax=heat, label="value")
    curve.plot(data.offsets, data.similarity, color="#1f77b4", linewidth=1.2)
    curve.axvline(0, color="0.6", linewidth=0.8, linestyle=":")
    curve.set_ylim(-1.05, 1.05)
    curve.set_xlabel(f"offset k (position - {data.reference})")
    curve.set_ylabel("cosine similarity")
    curve.set_title(f"PE({data.reference}) vs PE({data.reference} + k)", fontsize=10)
    curve.grid(alpha=0.3)
    figure.tight_layout()


def png(figure: Figure) -> bytes:
    """The figure as a PNG of at most ``PALETTE`` colours, the same bytes every time.

    A figure this size is some 50 kB as drawn; reduced to a palette (median cut, no
    dithering) it is about a quarter of that, which matters for a page that carries
    sixteen of them.
    """
    FigureCanvasAgg(figure)
    drawn = io.BytesIO()
    figure.savefig(drawn, format="png", dpi=DPI, metadata={"Software": None})
    image = Image.open(drawn).convert("RGB")
    reduced = image.quantize(PALETTE, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    buffer = io.BytesIO()
    reduced.save(buffer, format="png", optimize=True)
    return buffer.getvalue()


def describe(data: Frame) -> str:
    """One line of the numbers a reader cannot read off the picture."""
    if data.dtype == np.float64:
        rounding = "entries are float64, as computed"
    else:
        rounding = (
            f"rounding to {data.dtype.name} moved entries by at most {data.rounding_error:.1e}"
        )
    return (
        f"d_model = {data.d_model}, length = {data.length}, base = {data.base:,.0f}, "
        f"{data.dtype.name}: longest wavelength {data.longest_wavelength:,.0f} positions "
        f"(2π·base = {2 * math.pi * data.base:,.0f}); the two closest rows are "
        f"{data.nearest_rows:.3g} apart; {rounding}."
    )


def alt_text(data: Frame) -> str:
    """A description of the picture for readers who cannot see it."""
    # The similarity is symmetric in the offset, so the lowest value may be reached at
    # +k and -k alike; which of the two a CPU finds lower is decided by the last bit.
    lowest = float(np.min(data.similarity))
    near = data.offsets[data.similarity <= lowest + 1e-9]
    closest = near[np.abs(near) == np.abs(near).min()]
    where = f"±{abs(int(closest[0]))}" if len(closest) == 2 else f"{int(closest[0]):+d}"
    return (
        f"Left, a heatmap of the {data.length} by {data.d_model} sinusoidal table with base "
        f"{data.base:,.0f}: stripes alternate fast in the first columns and widen to the "
        f"right. Right, the cosine similarity between position {data.reference} and every "
        f"other position, plotted against the offset: 1 at offset 0, symmetric about it, "
        f"lowest ({lowest:.2f}) at offset {where}."
    )


class Explorer:
    """Sliders for d_model, length and base and a dtype menu, redrawing one figure.

    ``controls`` maps each name to its widget; setting a widget's ``value`` (by hand
    or from code) recomputes :attr:`data` and redraws :attr:`image`. Display the
    explorer as the last expression of a cell.
    """

    def __init__(self, *, d_model=64, length=128, base=10000.0, dtype="float64"):
        d_model, length, base, dtype = _check(d_model, length, base, dtype)
        common = {"continuous_update": False, "style": {"description_width": "initial"}}
        self.controls = {
            "d_model": widgets.IntSlider(
                value=d_model, min=D_MODEL_RANGE[0], max=D_MODEL_RANGE[1], step=2,
                description="d_model", **common,
            ),
            "length": widgets.IntSlider(
                value=length, min=LENGTH_RANGE[0], max=LENGTH_RANGE[1], step=16,
                description="length", **common,
            ),
            "base": widgets.FloatLogSlider(
                value=base, base=10, min=LOG10_BASE_RANGE[0], max=LOG10_BASE_RANGE[1],
                step=0.25, description="base", readout_format=",.0f", **common,
            ),
            "dtype": widgets.Dropdown(
                value=dtype.name, options=DTYPES, description="dtype",
                style={"description_width": "initial"},
            ),
        }  # fmt: skip
        self.image = widgets.Image(format="png", layout=widgets.Layout(max_width="100%"))
        self.readout = widgets.HTML()
        self.widget = widgets.VBox(
            [
                widgets.HBox(list(self.controls.values()), layout={"flex_flow": "row wrap"}),
                self.image,
                self.readout,
            ]
        )
        self.figure = Figure(figsize=FIGSIZE)
        self.data: Frame
        self.update()
        for control in self.controls.values():
            control.observe(self.update, names="value")

    def values(self) -> dict:
        """The controls' current values, as keyword arguments of :func:`frame`."""
        return {name: control.value for name, control in self.controls.items()}

    def update(self, change=None) -> None:
        """Recompute the frame from the controls and redraw (called on every change)."""
        self.data = frame(**self.values())
        draw(self.figure, self.data)
        self.image.value = png(self.figure)
        self.readout.value = f"<p>{html.escape(self.description)}</p>"

    @property
    def description(self) -> str:
        """The line of numbers under the figure, as plain text."""
        return describe(self.data)

    def __repr__(self) -> str:
        arguments = ", ".join(f"{name}={value!r}" for name, value in self.values().items())
        return f"Explorer({arguments})"

    def _repr_mimebundle_(self, **kwargs):
        bundle = self.widget._repr_mimebundle_(**kwargs)
        bundle["text/plain"] = repr(self)
        return bundle


class StaticExplorer(NamedTuple):
    """Pictures drawn in advance for every (d_model, base) pair, shown as HTML sliders."""

    d_models: tuple[int, ...]
    bases: tuple[float, ...]
    length: int
    frames: dict[tuple[int, int], dict[str, str]]  # (i, j) -> src, alt, readout

    @property
    def element_id(self) -> str:
        """An id for the page element, derived from what it shows (stable across runs).

        The pictures' bytes are left out: another CPU may draw a pixel differently.
        """
        described = {
            "d_models": self.d_models,
            "bases": self.bases,
            "length": self.length,
            "frames": {
                key: {name: text for name, text in frame.items() if name != "src"}
                for key, frame in self._frames_json().items()
            },
        }
        digest = hashlib.sha256(json.dumps(described).encode()).hexdigest()
        return f"posenc-explorer-{digest[:12]}"

    def _frames_json(self) -> dict[str, dict[str, str]]:
        return {f"{i},{j}": value for (i, j), value in sorted(self.frames.items())}

    def __repr__(self) -> str:
        return (
            f"StaticExplorer(d_models={self.d_models}, bases={self.bases}, "
            f"length={self.length}, {len(self.frames)} pictures)"
        )

    def _repr_html_(self) -> str:
        return static_html(self)


def static_explorer(
    d_models=(16, 32, 64, 128), bases=(100.0, 1000.0, 10000.0, 100000.0), *, length=128
) -> StaticExplorer:
    """Draw the explorer's figure for every (d_model, base) pair in float64."""
    d_models = tuple(d_models)
    bases = tuple(float(b) for b in bases)
    if not d_models or not bases:
        raise ValueError("static_explorer needs at least one d_model and one base")
    figure = Figure(figsize=FIGSIZE)
    frames = {}
    for i, d_model in enumerate(d_models):
        for j, base in enumerate(bases):
            data = frame(d_model, length, base, "float64")
            draw(figure, data)
            encoded = base64.b64encode(png(figure)).decode("ascii")
            frames[(i, j)] = {
                "src": f"data:image/png;base64,{encoded}",
                "alt": alt_text(data),
                "readout": describe(data),
            }
    return StaticExplorer(d_models, bases, length, frames)


_SCRIPT = """
(function () {
  var root = document.getElementById("%(id)s");
  var frames = JSON.parse(root.querySelector("script[type='application/json']").textContent);
  var image = root.querySelector("img");
  var readout = root.querySelector(".posenc-readout");
  var sliders = root.querySelectorAll("input[type='range']");
  function show() {
    var key = [], i;
    for (i = 0; i < sliders.length; i++) {
      var labels = JSON.parse(sliders[i].dataset.labels);
      var text = labels[Number(sliders[i].value)];
      sliders[i].setAttribute("aria-valuetext", text);
      root.querySelector("output[for='" + sliders[i].id + "']").textContent = text;
      key.push(sliders[i].value);
    }
    var picture = frames[key.join(",")];
    image.src = picture.src;
    image.alt = picture.alt;
    readout.textContent = picture.readout;
  }
  for (var i = 0; i < sliders.length; i++) sliders[i].addEventListener("input", show);
  root.querySelector(".posenc-controls").hidden = false;
  show();
})();
"""


def _slider(element_id: str, name: str, labels: list[str], start: int) -> str:
    slider_id = f"{element_id}-{name}"
    return (
        f'<label for="{slider_id}" style="margin-right:0.5em">{name}</label>'
        f'<input type="range" id="{slider_id}" min="0" max="{len(labels) - 1}" step="1" '
        f"value=\"{start}\" data-labels='{html.escape(json.dumps(labels))}' "
        f'aria-valuetext="{html.escape(labels[start])}" style="vertical-align:middle">'
        f'<output for="{slider_id}" style="margin:0 1.5em 0 0.5em;font-family:monospace">'
        f"{html.escape(labels[start])}</output>"
    )


def static_html(explorer: StaticExplorer) -> str:
    """Self-contained HTML: the pictures, two sliders and the script that switches them.

    The sliders start hidden and the script shows them, so a page without JavaScript
    shows one picture and no control that does nothing.
    """
    element_id = explorer.element_id
    i = _nearest(explorer.d_models, 64)
    j = _nearest(explorer.bases, 10000.0)
    first = explorer.frames[(i, j)]
    frames_json = json.dumps(explorer._frames_json()).replace("</", "<\\/")
    d_labels = [str(d) for d in explorer.d_models]
    base_labels = [f"{b:,.0f}" for b in explorer.bases]
    return (
        f'<div id="{element_id}" class="posenc-explorer">'
        f'<div class="posenc-controls" hidden style="margin-bottom:0.5em">'
        f"{_slider(element_id, 'd_model', d_labels, i)}"
        f"{_slider(element_id, 'base', base_labels, j)}</div>"
        f'<img src="{first["src"]}" alt="{html.escape(first["alt"])}" '
        f'style="max-width:100%;height:auto">'
        f'<p class="posenc-readout" aria-live="polite">{html.escape(first["readout"])}</p>'
        f'<script type="application/json">{frames_json}</script>'
        f"<script>{_SCRIPT % {'id': element_id}}</script>"
        f"</div>"
    )


def _nearest(values: tuple, target: float) -> int:
    """Index of the value closest to ``target`` on a log scale (the default picture)."""
    return int(np.argmin([abs(math.log(v / target)) for v in values]))
