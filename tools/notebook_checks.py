"""Hygiene rules every chapter notebook must follow (used by tests/test_notebook_hygiene.py).

Each check takes a notebook (an ``nbformat.NotebookNode``) and returns a list of
findings, one readable line per problem; an empty list means the notebook passes.
"""

from __future__ import annotations

import ast
import re

from tools.chapter_metrics import is_hidden, teaching_cells
from tools.compare_outputs import VOLATILE_TAG, is_volatile

MAX_CODE_CELL_LINES = 40
MACHINE_PATH = re.compile(r"(/root/|/home/|/tmp/|/work/|/Users/|/private/var/|[A-Z]:\\\\)")
MEMORY_ADDRESS = re.compile(r"\b0x[0-9a-fA-F]{6,}\b")
TIMESTAMP = re.compile(r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2})?")
IGNORE_OUTPUT = "NBVAL_IGNORE_OUTPUT"
RAISES = "raises-exception"
REMOVE_OUTPUT = "remove-output"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def _code_cells(nb):
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            yield index, cell


def _output_texts(output) -> list[str]:
    texts = []
    if "text" in output:
        texts.append(output["text"])
    for mime, value in output.get("data", {}).items():
        if mime.startswith("text/") or mime.endswith("json"):
            texts.append(value if isinstance(value, str) else str(value))
    texts.extend(output.get("traceback", []))
    if "evalue" in output:
        texts.append(output["evalue"])
    return texts


def check_executed_in_order(nb) -> list[str]:
    findings = []
    counts = []
    for index, cell in _code_cells(nb):
        if not cell.source.strip():
            findings.append(f"cell {index}: empty code cell")
        elif cell.execution_count is None:
            findings.append(f"cell {index}: not executed (no execution count)")
        else:
            counts.append(cell.execution_count)
    if counts != list(range(1, len(counts) + 1)):
        findings.append(
            f"execution counts {counts} are not 1..{len(counts)}: "
            "cells were not run top to bottom in one kernel (refresh with make execute)"
        )
    return findings


def check_errors(nb) -> list[str]:
    findings = []
    for index, cell in _code_cells(nb):
        tagged = RAISES in cell.metadata.get("tags", [])
        errors = [o for o in cell.outputs if o.output_type == "error"]
        if errors and not tagged:
            findings.append(f"cell {index}: stored error output ({errors[0].get('ename')})")
        if tagged and not errors:
            findings.append(f"cell {index}: tagged {RAISES} but raised nothing")
        for output in cell.outputs:
            if output.output_type == "stream" and output.get("name") == "stderr":
                findings.append(f"cell {index}: writes to stderr: {output['text'][:80]!r}")
    return findings


def check_volatile_outputs(nb) -> list[str]:
    findings = []
    for index, cell in _code_cells(nb):
        for output in cell.outputs:
            for text in _output_texts(output):
                for name, pattern in (
                    ("a machine path", MACHINE_PATH),
                    ("a memory address", MEMORY_ADDRESS),
                    ("a timestamp", TIMESTAMP),
                ):
                    match = pattern.search(text)
                    if match:
                        findings.append(f"cell {index}: output shows {name}: {match.group(0)!r}")
    return findings


def check_claims_are_compared(nb) -> list[str]:
    """A cell whose output nbval ignores may not carry a claim (an assert).

    Such a cell is tagged ``nbval-ignore-output``: the comment nbval also reads would
    show in the published code, so it is refused, and so is a marker nbval would not
    read (anything else on its line).
    """
    findings = []
    for index, cell in _code_cells(nb):
        tags = cell.get("metadata", {}).get("tags", [])
        if IGNORE_OUTPUT in cell.source:
            findings.append(
                f"cell {index}: {IGNORE_OUTPUT} written in the code shows on the site: "
                f"tag the cell {VOLATILE_TAG} instead"
            )
        volatile = is_volatile(cell.source, tags)
        if volatile and re.search(r"^\s*assert\b", cell.source, re.M):
            findings.append(f"cell {index}: {VOLATILE_TAG} on a cell that asserts a claim")
    return findings


# An assert that compares a float's printed digits ("5.7e-14") holds only on the CPU
# that printed them: other kernels change the last bits. Assert a bound instead.
PINNED_DIGITS = re.compile(
    r"""^\s*assert\b.*(==|!=)\s*[\[(]?\s*["'][-+]?\d[\d.]*e[-+]?\d+["']""", re.M
)


def check_pinned_digits(nb) -> list[str]:
    """No assert pins the printed digits of a float: claims hold on every machine."""
    findings = []
    for index, cell in _code_cells(nb):
        match = PINNED_DIGITS.search(cell.source)
        if match:
            findings.append(
                f"cell {index}: asserts the printed digits of a float "
                f"({match.group(0).strip()[:60]!r}); assert a bound that holds on every CPU"
            )
    return findings


def check_figures(nb) -> list[str]:
    """Every figure needs a caption and alt text (myst-nb cell metadata)."""
    findings = []
    for index, cell in _code_cells(nb):
        if not any("image/png" in o.get("data", {}) for o in cell.outputs):
            continue
        mystnb = cell.metadata.get("mystnb", {})
        if not mystnb.get("figure", {}).get("caption"):
            findings.append(f"cell {index}: figure without a caption (mystnb.figure.caption)")
        if not mystnb.get("figure", {}).get("name"):
            findings.append(f"cell {index}: figure without a label (mystnb.figure.name)")
        if not mystnb.get("image", {}).get("alt"):
            findings.append(f"cell {index}: figure without alt text (mystnb.image.alt)")
        plain = PLAIN_MATHS.findall(_outside_math(mystnb.get("figure", {}).get("caption", "")))
        if plain:
            findings.append(
                f"cell {index}: caption writes maths as plain text {plain[:3]}: "
                "use $...$ (or `...` for code)"
            )
    return findings


# Plain-text maths in a caption, where the body typesets it: a subscript or superscript
# (M_10, 10^4, d_model), a transpose sign, or a Greek letter outside $...$ and `...`.
PLAIN_MATHS = re.compile(r"\w_\w|\w\^\w|[πωθαβΔΣᵀ]")


def _outside_math(text: str) -> str:
    return re.sub(r"\$[^$]*\$|`[^`]*`", " ", text)


# Widgets that do nothing by themselves: they hold or arrange what is shown.
PASSIVE_WIDGETS = {
    "BoxModel",
    "HBoxModel",
    "VBoxModel",
    "StackModel",
    "HTMLModel",
    "HTMLMathModel",
    "LabelModel",
    "LayoutModel",
}
# Controls that work without a kernel when the widget manager links them (jslink).
LINKABLE_CONTROLS = {"PlayModel", "IntSliderModel", "FloatSliderModel", "SelectionSliderModel"}


def _model_tree(state: dict, model_id: str) -> list[str]:
    """The ids of ``model_id`` and of every model its state refers to, depth first."""
    seen: list[str] = []
    todo = [model_id]
    while todo:
        current = todo.pop()
        if current in seen or current not in state:
            continue
        seen.append(current)
        text = str(state[current].get("state", {}))
        todo.extend(re.findall(r"IPY_MODEL_([0-9a-zA-Z_-]+)", text))
    return seen


def needs_a_kernel(state: dict, model_id: str) -> list[str]:
    """What in a stored widget would need Python to respond: [] if the browser alone can run it.

    A widget runs without a kernel when it is built from passive widgets (boxes, a
    stack, HTML, labels, layouts and styles) and controls whose every move is linked
    in the browser by a ``jslink`` stored beside them.
    """
    linked = set()
    for model in state.values():
        if model.get("model_name") == "LinkModel":
            for end in ("source", "target"):
                ref = model.get("state", {}).get(end) or ["", ""]
                linked.add(str(ref[0]).removeprefix("IPY_MODEL_"))
    problems = []
    for node in _model_tree(state, model_id):
        name = state[node].get("model_name", "")
        if name in PASSIVE_WIDGETS or name.endswith("StyleModel"):
            continue
        if name in LINKABLE_CONTROLS and node in linked:
            continue
        problems.append(name if name in LINKABLE_CONTROLS else f"{name} (needs a kernel)")
    return problems


def check_widgets(nb) -> list[str]:
    """A displayed ipywidget has its state stored, and the site shows it only if it runs alone.

    Jupyter and Binder rebuild a widget from the state in the notebook's metadata, and
    so does the widget manager on the static site, which has no kernel. A widget whose
    controls call Python would be a control that does nothing there: its cell must
    carry ``remove-output`` (and the page offer a kernel-free version). A widget built
    only from passive parts and controls linked in the browser (``jslink``) may be
    shown: the site's browser tests play it.
    """
    findings = []
    stored = nb.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    for index, cell in _code_cells(nb):
        views = [o["data"][WIDGET_VIEW] for o in cell.outputs if WIDGET_VIEW in o.get("data", {})]
        for view in views:
            if view.get("model_id") not in stored:
                findings.append(f"cell {index}: widget state not stored (make execute stores it)")
            elif REMOVE_OUTPUT not in cell.metadata.get("tags", []):
                problems = needs_a_kernel(stored, view["model_id"])
                if problems:
                    findings.append(
                        f"cell {index}: shows a widget that needs a kernel without the "
                        f"{REMOVE_OUTPUT} tag (on the static site it would do nothing): "
                        f"not linked in the browser: {', '.join(sorted(set(problems)))}"
                    )
    return findings


def check_structure(nb) -> list[str]:
    findings = []
    if not nb.cells or nb.cells[0].cell_type != "markdown":
        findings.append("the first cell must be markdown with the chapter title")
    elif not nb.cells[0].source.startswith("# "):
        findings.append("the first cell must start with '# Title'")
    ids = [cell.get("id") for cell in nb.cells]
    if None in ids or len(set(ids)) != len(ids):
        findings.append("cell ids must be present and unique")
    for index, cell in _code_cells(nb):
        lines = cell.source.count("\n") + 1
        if lines > MAX_CODE_CELL_LINES:
            findings.append(f"cell {index}: {lines} lines, longer than {MAX_CODE_CELL_LINES}")
    if nb.metadata.get("kernelspec", {}).get("name") != "python3":
        findings.append("kernelspec must be python3")
    if "version" in nb.metadata.get("language_info", {}):
        findings.append("language_info.version is machine-specific (refresh with make execute)")
    return findings


# Readers cannot check a source they are not told: a mistake is stated on its own
# ("Common mistakes"), with a citation where one exists, never pinned on an unnamed
# write-up or tutorial.
UNNAMED_SOURCE = re.compile(
    r"\b(errata|write-?ups?|this book grew|(a|one|two|three|several|some|many|other) "
    r"tutorials?)\b",
    re.I,
)


def check_sources_are_named(nb) -> list[str]:
    findings = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "markdown":
            continue
        match = UNNAMED_SOURCE.search(cell.source)
        if match:
            findings.append(
                f"cell {index}: points at an unnamed source ({match.group(0)!r}); state "
                "the mistake on its own in a 'Common mistakes' box and cite it if public"
            )
    return findings


def check_teaching_code_is_visible(nb) -> list[str]:
    """At most half of a chapter's code cells are hidden on the site (remove/hide tags)."""
    cells = teaching_cells(nb)
    hidden = sum(is_hidden(c) for c in cells)
    if 2 * hidden > len(cells):
        return [f"{hidden} of {len(cells)} code cells are hidden on the site; at most half"]
    return []


REMOVED_TAGS = {"remove-input", "remove-cell"}


def _names(source: str) -> tuple[set[str], set[str]]:
    """The names a cell binds anywhere, and the names it reads."""
    code = "\n".join(
        "" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines()
    )
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return set(), set()
    bound, read = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (read if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.alias):
            bound.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    return bound, read


def check_shown_code_stands_alone(nb) -> list[str]:
    """A cell the site shows reads no name that only a removed cell defines.

    A reader copies the code the page shows; a name defined only in a cell the site
    removes (remove-cell, remove-input) is a NameError for that reader.
    """
    findings, shown, removed = [], set(), set()
    for index, cell in _code_cells(nb):
        bound, read = _names(cell.source)
        if REMOVED_TAGS & set(cell.metadata.get("tags", [])):
            removed |= bound
            continue
        missing = sorted((read - bound - shown) & removed)
        if missing:
            findings.append(f"cell {index} reads {missing}, defined only in cells the site removes")
        shown |= bound
    return findings


ALL_CHECKS = (
    check_structure,
    check_executed_in_order,
    check_errors,
    check_volatile_outputs,
    check_claims_are_compared,
    check_pinned_digits,
    check_figures,
    check_widgets,
    check_sources_are_named,
    check_teaching_code_is_visible,
    check_shown_code_stands_alone,
)


def findings(nb) -> list[str]:
    """Every problem the hygiene rules find in ``nb``."""
    return [finding for check in ALL_CHECKS for finding in check(nb)]
