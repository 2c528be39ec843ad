"""Time RoPE applied to queries and keys, side by side (chapter 11).

Run by ``make bench``: prints the table and the goals, writes
``data/rope_benchmark.json`` (read by the chapter), and exits 1 if a goal is not met.
``--quick`` measures a small shape once. The measuring code is
:mod:`posenc.rope_benchmark`.
"""

from posenc.rope_benchmark import main

if __name__ == "__main__":
    raise SystemExit(main())
