"""Execute the book's notebooks in place and store their outputs, deterministically.

``make execute`` runs this over notebooks/*.ipynb. Running it twice leaves the files
byte-identical: cells run top to bottom in a fresh kernel with a fixed hash seed,
no timing metadata is recorded, widget model ids (random UUIDs in Jupyter) are
renamed to ids derived from the notebook's name, and the interpreter's patch
version is dropped from the notebook metadata.

What counts as a change is ``tools.compare_outputs``: text outputs under the
project's sanitizer, and figures up to a few anti-aliased pixels; cells marked
``# NBVAL_IGNORE_OUTPUT`` (timings, and figures drawn from them) are left out. A file
whose fresh run is the same in that sense is left as it is, so running twice changes
nothing, and neither does running on another CPU, whose kernels may change a figure's
pixels in the last bits of its data. When anything else changes, the file is
rewritten whole.

``--check`` executes without writing and exits 1 if any file would change, naming the
cells: the test suite uses it to prove that the committed outputs are what ``make
execute`` produces. ``--cpu NAME`` runs the kernel under one of
``tools.portability.CONFIGURATIONS`` (with ``--check`` only: outputs are stored from
a plain run).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from tools.compare_outputs import VOLATILE_MARK, differences
from tools.notebook_checks import WIDGET_STATE, WIDGET_VIEW
from tools.portability import CONFIGURATIONS, environment

KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
CELL_TIMEOUT_SECONDS = 600
# A kernel that dies before it answers its first request has run no cell, so its
# death says nothing about the notebook (kernels started side by side, as the
# portability check starts three, can for instance collide on a port). Such a start
# is retried; a kernel that dies later, or a cell's error, fails the run at once.
KERNEL_DIED_AT_START = "Kernel died before replying to kernel_info"
KERNEL_STARTS = 3


def _widget_ids(nb) -> list[str]:
    """Model ids in a stable order: the stored state's order, then views in outputs."""
    ids: list[str] = list(nb.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {}))
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            view = output.get("data", {}).get(WIDGET_VIEW)
            if view and view.get("model_id") not in ids:
                ids.append(view["model_id"])
    return ids


def _merge_streams(outputs: list) -> list:
    """Join consecutive stream outputs of the same name (stdout, stderr) into one.

    The kernel flushes a stream on a timer, so one print() can arrive as two outputs
    ("0.63", then a newline) when the machine is busy; the text is the same either way.
    """
    merged: list = []
    for output in outputs:
        previous = merged[-1] if merged else None
        if (
            output.get("output_type") == "stream"
            and previous is not None
            and previous.get("output_type") == "stream"
            and previous.get("name") == output.get("name")
        ):
            previous["text"] = previous["text"] + output["text"]
        else:
            merged.append(output)
    return merged


def normalize(nb, name: str) -> str:
    """Return the notebook as text with every volatile detail made deterministic."""
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
        if cell.cell_type == "code":
            cell.outputs = _merge_streams(cell.outputs)
    language_info = nb.metadata.get("language_info", {})
    language_info.pop("version", None)
    nb.metadata["kernelspec"] = dict(KERNELSPEC)
    text = nbformat.writes(nb, version=4) + "\n"
    for index, model_id in enumerate(_widget_ids(nb)):
        stable = hashlib.sha256(f"{name}:{index}".encode()).hexdigest()[:32]
        text = re.sub(re.escape(model_id), stable, text)
    # Re-parse and re-serialise so the key order and layout are nbformat's own.
    return nbformat.writes(nbformat.reads(text, as_version=4), version=4) + "\n"


def execute(path: Path, *, cpu: str | None = None, allow_errors: bool = False) -> str:
    """Run a notebook top to bottom in a fresh kernel; return its normalized text.

    ``cpu`` names a configuration of ``tools.portability.CONFIGURATIONS`` for the
    kernel; with ``allow_errors`` a failing cell stores its error and the run goes on.
    """
    for attempt in range(1, KERNEL_STARTS + 1):
        nb = nbformat.read(path, as_version=4)
        for cell in nb.cells:
            if cell.cell_type == "code":
                cell.outputs = []
                cell.execution_count = None
        client = NotebookClient(
            nb,
            timeout=CELL_TIMEOUT_SECONDS,
            kernel_name="python3",
            allow_errors=allow_errors,
            record_timing=False,
            store_widget_state=True,
            resources={"metadata": {"path": str(path.parent)}},
        )
        try:
            client.execute(env=_kernel_env(cpu))
        except RuntimeError as error:
            if not str(error).startswith(KERNEL_DIED_AT_START) or attempt == KERNEL_STARTS:
                raise
            print(f"{path}: {error}; starting a fresh kernel", file=sys.stderr)
            continue
        return normalize(nb, path.stem)
    raise AssertionError("unreachable")  # the last attempt returns or raises


def _kernel_env(cpu: str | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONHASHSEED"] = "0"
    env.update(environment(cpu) if cpu else {})
    return env


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 if a file would change"
    )
    parser.add_argument(
        "--cpu", choices=sorted(CONFIGURATIONS), help="run the kernel as this CPU would"
    )
    args = parser.parse_args(argv)
    if args.cpu and not args.check:
        parser.error("--cpu checks stored outputs; it needs --check")
    stale = []
    where = f" ({args.cpu})" if args.cpu else ""
    for path in args.notebooks:
        fresh = execute(path, cpu=args.cpu, allow_errors=args.check)
        current = path.read_text(encoding="utf-8")
        changes = [] if fresh == current else differences(_json(current), _json(fresh))
        if fresh == current:
            print(f"unchanged  {path}{where}")
        elif not changes:
            print(
                f"unchanged  {path}{where}  (only pixels or {VOLATILE_MARK} outputs differ; kept)"
            )
        elif args.check:
            stale.append(path)
            print(f"WOULD CHANGE  {path}{where}")
            print("\n".join(f"  {line}" for line in changes))
        else:
            path.write_text(fresh, encoding="utf-8")
            print(f"updated    {path}")
    if stale:
        print(
            "Stored outputs differ from a fresh run: refresh them with `make execute`.",
            file=sys.stderr,
        )
        return 1
    return 0


def _json(text: str) -> dict:
    return nbformat.reads(text, as_version=4)


if __name__ == "__main__":
    sys.exit(main())
