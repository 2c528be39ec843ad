"""Time every construction of the sinusoidal table side by side (chapter 11).

Run by ``make bench``: prints the tables and chapter 11's goals, writes
``data/benchmark.json`` (read by the chapter), and exits 1 if a goal is not met.
``--quick`` measures two small sizes once, in a few seconds. The measuring code is
:mod:`posenc.benchmark`, so that the chapter and the tests use the same functions.
"""

from posenc.benchmark import main

if __name__ == "__main__":
    raise SystemExit(main())
