"""posenc: the reference library of the positional-encoding book.

Each module holds one idea that a chapter teaches; later chapters, the tests and
the benchmarks import these functions instead of re-typing them.

- :mod:`posenc.attention` — scaled dot-product (self-)attention in NumPy (chapter 1).
- :mod:`posenc.encoding` — the sinusoidal table, :func:`sinusoidal`, and its column
  layouts, :func:`layout_permutation` (chapters 2-5).
- :mod:`posenc.implementations` — the chapters' variants: naive loops, vectorized,
  log-space ``div_term`` (chapters 3-5) and angle addition (chapter 11).
- :mod:`posenc.fast` — the table by angle addition, what :func:`sinusoidal` uses: exact
  sines only for the digits of each position, every row one complex product
  (chapter 11).
- :mod:`posenc.benchmark` — chapter 11's side-by-side timings (``make bench``).
- :mod:`posenc.checks` — :func:`~posenc.checks.check_sinusoidal_table`: compare a table
  with the formula and name the likely bug when it differs (chapter 12).
- :mod:`posenc.museum` — chapter 12's exhibits: published positional-encoding bugs and
  conventions (tensor2tensor, fairseq) rebuilt in NumPy.
- :mod:`posenc.reference` — exact values from mpmath, the yardstick for all of them.
- :mod:`posenc.properties` — wavelengths, the rotation ``M_k`` and the offset dot
  product of the sinusoidal table (chapter 6).
- :mod:`posenc.explorer` — chapter 6's interactive figure, live (ipywidgets) and
  static (HTML sliders). Import it by name: it needs matplotlib and ipywidgets.
- :mod:`posenc.animation` — chapter 6's clocks: each pair of a row as a hand, played
  by linked widgets that need no kernel. Import it by name, like the explorer.
- :mod:`posenc.alternatives` — the alternatives that act inside
  attention: RoPE, ALiBi, T5 buckets, Shaw et al.'s clipped offsets, and NoPE's
  causal mask (chapter 8).
- :mod:`posenc.long_context` — RoPE's frequencies scaled for longer contexts: position
  interpolation, NTK-aware and dynamic NTK, YaRN, Llama 3.
- :mod:`posenc.multidim` — positions in two and three dimensions: the 2-D sine-cosine
  table of vision Transformers, the (row, col) of a grid for axial RoPE, and Qwen2-VL's
  M-RoPE position ids for images and video inside text.
- :mod:`posenc.block` — a Transformer encoder block in NumPy and the encoding added to
  its input, on the right axis (chapter 7).
- :mod:`posenc.torch` — the sinusoidal and learned encodings as PyTorch modules and a
  small encoder that uses them (chapter 7). Import it by name: it needs PyTorch.
- :mod:`posenc.experiments` — the length-generalization experiment of chapter 9, its
  small causal model and the analysis of its results. Import it by name: it needs
  PyTorch and tqdm.
"""

from posenc import (
    alternatives,
    attention,
    block,
    checks,
    implementations,
    long_context,
    multidim,
    museum,
    properties,
)
from posenc.encoding import layout_permutation, sinusoidal

__all__ = [
    "alternatives",
    "attention",
    "block",
    "checks",
    "implementations",
    "layout_permutation",
    "long_context",
    "multidim",
    "museum",
    "properties",
    "sinusoidal",
]
__version__ = "0.1.0"
