"""posenc: the reference library of the positional-encoding book.

Each module holds one idea that a chapter teaches; later chapters, the tests and
the benchmarks import these functions instead of re-typing them.

- :mod:`posenc.attention` — scaled dot-product (self-)attention in NumPy (chapter 1).
"""

from posenc import attention

__all__ = ["attention"]
__version__ = "0.1.0"
