"""Run every chapter as readers' CPUs would, and compare with the stored outputs.

NumPy, OpenBLAS, PyTorch (ATen and oneDNN) and MKL choose their kernels by the CPU's
features, and the results differ in the last bits from one machine to another. The
book's claims must hold on every machine, and its stored outputs must be what any
reader's run prints. Each configuration below turns off, on the machine at hand, the
kernels that a class of CPUs lacks, through the libraries' own switches:

- ``avx2``: the kernels of an AVX2 CPU without AVX-512 (many laptops and hosted CI
  runners; Colab's and Binder's machines vary);
- ``x86-64-v2``: an older CPU with SSE4.2 and no AVX at all;
- ``other-libm``: the AVX2 kernels with another math library preloaded
  (``tools/other_libm.c``): where a result of exp, log, pow and their kin is not
  exact, it returns the other of the two nearest floats for about half of the inputs,
  as a faithful library other than glibc may (Intel's SVML, which NumPy uses on
  AVX-512 CPUs, does). A digit that depends on which one comes back shows up here,
  on a machine that has no such library.

NumPy's switch names the dispatch targets to turn off, and a name NumPy does not know
is ignored without a word; so the list is not written by hand but derived from the
targets this NumPy was built with (``__cpu_dispatch__``): every target above the
configuration's level is turned off, AVX512_SPR on a Sapphire Rapids Xeon included.

A switch that names a feature the machine lacks changes nothing: on an AVX2 machine
``avx2`` runs the native kernels, while on an AVX-512 machine it runs the AVX2 path, so
each machine checks every path below its own, and the native path is checked by the
plain run (nbval and ``tools.execute_notebooks --check``). ``--describe`` prints what
each configuration turns off here.

``python -m tools.portability notebooks/*.ipynb`` executes every notebook in a fresh
kernel under each configuration (the configurations side by side, one process each)
and exits 1 if a cell raises or an output differs from the stored one under
``tools.compare_outputs``. ``make test`` runs it (tests/test_portability.py).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent

# Instruction sets by the names NumPy's dispatcher gives them: NumPy 2 groups them by
# x86-64 microarchitecture level (X86_V2, X86_V3, X86_V4), NumPy 1 named each one.
_X86_V2 = frozenset({"SSE", "SSE2", "SSE3", "SSSE3", "SSE41", "POPCNT", "SSE42", "X86_V2"})
_X86_V3 = _X86_V2 | {"AVX", "F16C", "FMA3", "AVX2", "X86_V3"}


class Level(NamedTuple):
    """A class of CPUs: the NumPy targets it has, and the other libraries' switches;
    ``other_libm`` preloads tools/other_libm.c."""

    numpy: frozenset[str]
    switches: dict[str, str]
    other_libm: bool = False


_AVX2_SWITCHES = {
    "OPENBLAS_CORETYPE": "Haswell",
    "ATEN_CPU_CAPABILITY": "avx2",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "MKL_ENABLE_INSTRUCTIONS": "AVX2",
}

LEVELS: dict[str, Level] = {
    "avx2": Level(_X86_V3, _AVX2_SWITCHES),
    "x86-64-v2": Level(
        _X86_V2,
        {
            "OPENBLAS_CORETYPE": "Nehalem",
            "ATEN_CPU_CAPABILITY": "default",
            "ONEDNN_MAX_CPU_ISA": "SSE41",
            "MKL_ENABLE_INSTRUCTIONS": "SSE4_2",
        },
    ),
    # On the AVX2 path NumPy's float64 exp, log and pow, and its float32 pow, call the
    # math library (on AVX-512 some call SVML instead), so the preloaded one is used.
    "other-libm": Level(_X86_V3, _AVX2_SWITCHES, other_libm=True),
}

OTHER_LIBM_SOURCE = ROOT / "tools" / "other_libm.c"
OTHER_LIBM = ROOT / "_build" / "portability" / "other_libm.so"


def _numpy_dispatch() -> tuple[list[str], dict[str, bool]]:
    """The dispatch targets this NumPy was built with, and the CPU features it sees."""
    try:
        from numpy._core import _multiarray_umath as umath
    except ImportError:  # NumPy 1.x
        from numpy.core import _multiarray_umath as umath
    return list(umath.__cpu_dispatch__), dict(umath.__cpu_features__)


def numpy_disabled(level: str, dispatch: list[str] | None = None) -> list[str]:
    """NumPy's dispatch targets above ``level``: what NPY_DISABLE_CPU_FEATURES names."""
    targets = _numpy_dispatch()[0] if dispatch is None else dispatch
    return [target for target in targets if target not in LEVELS[level].numpy]


def variables(level: str) -> dict[str, str]:
    """The environment variables that run a kernel as a CPU of ``level`` would (the
    library of ``other-libm`` is named, not built: see :func:`environment`)."""
    preload = {"LD_PRELOAD": str(OTHER_LIBM)} if LEVELS[level].other_libm else {}
    return {
        "NPY_DISABLE_CPU_FEATURES": " ".join(numpy_disabled(level)),
        **LEVELS[level].switches,
        **preload,
    }


CONFIGURATIONS: dict[str, dict[str, str]] = {name: variables(name) for name in LEVELS}


def build_other_libm() -> Path:
    """Compile tools/other_libm.c (when its source is newer) with the C compiler ``CC``
    or ``cc``; raise with the compiler's message when it cannot be built."""
    if OTHER_LIBM.exists() and OTHER_LIBM.stat().st_mtime >= OTHER_LIBM_SOURCE.stat().st_mtime:
        return OTHER_LIBM
    OTHER_LIBM.parent.mkdir(parents=True, exist_ok=True)
    partial = OTHER_LIBM.with_suffix(f".{os.getpid()}.so")
    compiler = os.environ.get("CC", "cc")
    flags = ["-O2", "-Wall", "-Werror", "-shared", "-fPIC"]
    try:
        subprocess.run(
            [compiler, *flags, "-o", str(partial), str(OTHER_LIBM_SOURCE), "-ldl", "-lm"],
            check=True,
            capture_output=True,
            text=True,
        )
    except (OSError, subprocess.CalledProcessError) as error:
        detail = getattr(error, "stderr", "") or str(error)
        raise RuntimeError(
            f"the other-libm configuration needs a C compiler ({compiler}): {detail}"
        ) from error
    partial.replace(OTHER_LIBM)
    return OTHER_LIBM


def environment(level: str) -> dict[str, str]:
    """:func:`variables`, with the preloaded library built and any preload kept."""
    values = dict(CONFIGURATIONS[level])
    if "LD_PRELOAD" in values:
        build_other_libm()
        earlier = os.environ.get("LD_PRELOAD")
        if earlier:
            values["LD_PRELOAD"] = f"{values['LD_PRELOAD']} {earlier}"
    return values


def describe(level: str) -> str:
    """What the configuration changes on this machine, in NumPy's terms."""
    _, features = _numpy_dispatch()
    off = [target for target in numpy_disabled(level) if features.get(target)]
    libm = ", with another math library" if LEVELS[level].other_libm else ""
    if not off:
        return f"{level}: this machine's own NumPy kernels (none above the level){libm}"
    return f"{level}: NumPy's {', '.join(off)} kernels turned off here{libm}"


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
    parser.add_argument("notebooks", nargs="*", type=Path)
    parser.add_argument(
        "--cpu",
        action="append",
        choices=sorted(CONFIGURATIONS),
        help="a configuration to run (repeatable; default: all)",
    )
    parser.add_argument(
        "--describe", action="store_true", help="print what each configuration turns off here"
    )
    args = parser.parse_args(argv)
    names = args.cpu or list(CONFIGURATIONS)
    if args.describe:
        print("\n".join(describe(name) for name in names))
        return 0
    if not args.notebooks:
        parser.error("name the notebooks to run")
    if any(LEVELS[name].other_libm for name in names):
        build_other_libm()  # once, before the configurations start side by side
    with ThreadPoolExecutor(max_workers=len(names)) as pool:
        results = dict(zip(names, pool.map(lambda n: run(n, args.notebooks), names), strict=True))
    failed = 0
    for name, result in results.items():
        print(f"== {name}: {'ok' if result.returncode == 0 else 'FAILED'} ({describe(name)})")
        print(result.stdout.rstrip())
        if result.returncode != 0:
            failed += 1
            print(result.stderr.rstrip()[-3000:], file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
