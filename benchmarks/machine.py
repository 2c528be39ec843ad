"""Measure what the machine allows: the bounds of chapter 11 (thread-matched).

Run by ``make bench``: prints the machine's facts, fill and copy bandwidth on one
thread and on the threads ``posenc.fast`` uses, glibc's and NumPy's allocation costs,
the goal (a new table at most 2x a thread-matched fresh fill) and RoPE's share of an
attention layer; writes ``data/machine.json`` and exits 1 if the goal is not met.
``--quick`` measures small sizes in a few seconds. The measuring code is
:mod:`posenc.machine`, so that the chapter and the tests use the same functions.
"""

from posenc.machine import main

if __name__ == "__main__":
    raise SystemExit(main())
