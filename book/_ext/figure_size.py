"""Figures drawn at high resolution, shown at the size of a 100-dpi picture.

The chapters' figures are drawn at 200 dpi (``notebooks/matplotlibrc``): twice the
pixels in each direction, so they stay sharp on high-resolution screens and when a
reader zooms in on a phone. Shown one image pixel per screen pixel they would be twice
as large as intended, so each notebook output picture is given the width it has at
100 dpi, read from the resolution stored in the PNG itself (its pHYs chunk, which
Matplotlib writes). The book's stylesheet then keeps it within the column
(``max-width: 100%``), and its height follows.
"""

from __future__ import annotations

from pathlib import Path

from docutils import nodes
from PIL import Image
from sphinx.application import Sphinx

SHOWN_DPI = 100


def shown_width(path: Path) -> int | None:
    """The width in CSS pixels of a PNG drawn at more than SHOWN_DPI, else None."""
    try:
        with Image.open(path) as image:
            dpi = image.info.get("dpi", (SHOWN_DPI, SHOWN_DPI))[0]
            width = image.width
    except OSError:
        return None
    if dpi <= SHOWN_DPI * 1.05:
        return None
    return round(width * SHOWN_DPI / dpi)


def _size_images(app: Sphinx, doctree, docname: str) -> None:
    for image in doctree.findall(nodes.image):
        uri = image.get("uri", "")
        if image.get("width") or not uri.endswith(".png") or "jupyter_execute" not in uri:
            continue
        width = shown_width(Path(app.srcdir) / uri)
        if width is not None:
            image["width"] = f"{width}px"


def setup(app: Sphinx) -> dict:
    app.connect("doctree-resolved", _size_images)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
