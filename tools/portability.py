"""Run every chapter as readers' CPUs would, and compare with the stored outputs.

NumPy, OpenBLAS, PyTorch and MKL choose their kernels by the CPU's features, and the
results differ in the last bits from one machine to another. The book's claims must
hold on every machine, and its stored outputs must be what any reader's run prints.
Each configuration below turns off the kernels that a class of CPUs lacks, on the
machine at hand, through the libraries' own switches:

- ``avx2``: the kernels of an AVX2 CPU without AVX-512 (most laptops, many hosted CI
  runners, Colab's and Binder's machines vary);
- ``x86-64-v2``: an older CPU with SSE4.2 and no AVX at all.

A switch that names a feature the machine lacks changes nothing, so on an AVX2
machine ``avx2`` runs the native kernels, and on any x86-64 machine ``x86-64-v2``
runs kernels other than the native ones.

``python -m tools.portability notebooks/*.ipynb`` executes every notebook in a fresh
kernel under each configuration (the configurations side by side, one process each)
and exits 1 if a cell raises or an output differs from the stored one under
``tools.compare_outputs``. ``make test`` runs it (tests/test_portability.py).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CONFIGURATIONS: dict[str, dict[str, str]] = {
    "avx2": {
        "NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512_ICL",
        "OPENBLAS_CORETYPE": "Haswell",
        "ATEN_CPU_CAPABILITY": "avx2",
        "MKL_ENABLE_INSTRUCTIONS": "AVX2",
    },
    "x86-64-v2": {
        "NPY_DISABLE_CPU_FEATURES": "X86_V3 X86_V4 AVX512_ICL",
        "OPENBLAS_CORETYPE": "Nehalem",
        "ATEN_CPU_CAPABILITY": "default",
        "MKL_ENABLE_INSTRUCTIONS": "SSE4_2",
    },
}


def command(configuration: str, notebooks: list[Path]) -> list[str]:
    """The check of ``notebooks`` under one configuration, as a command line."""
    return [
        sys.executable,
        "-m",
        "tools.execute_notebooks",
        "--check",
        "--cpu",
        configuration,
        *map(str, notebooks),
    ]


def run(configuration: str, notebooks: list[Path]) -> subprocess.CompletedProcess:
    return subprocess.run(
        command(configuration, notebooks),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument(
        "--cpu",
        action="append",
        choices=sorted(CONFIGURATIONS),
        help="a configuration to run (repeatable; default: all)",
    )
    args = parser.parse_args(argv)
    names = args.cpu or list(CONFIGURATIONS)
    with ThreadPoolExecutor(max_workers=len(names)) as pool:
        results = dict(zip(names, pool.map(lambda n: run(n, args.notebooks), names), strict=True))
    failed = 0
    for name, result in results.items():
        print(f"== {name}: {'ok' if result.returncode == 0 else 'FAILED'}")
        print(result.stdout.rstrip())
        if result.returncode != 0:
            failed += 1
            print(result.stderr.rstrip()[-3000:], file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
