"""Compare two executions of a notebook the way the book's checks do, on any CPU.

NumPy, OpenBLAS, PyTorch and MKL pick their kernels by CPU, so a result may differ in
its last bits from one machine to the next. A chapter states only what holds on every
machine, and prints only stable digits. What remains machine-specific is the pixels
of a figure: a curve drawn from values that differ in the last bit may move a line's
anti-aliased edge by a fraction of a pixel. So two executions are *the same* when

- every text output is equal after the project's sanitizer (``tests/nbval_sanitize.cfg``,
  the file strict nbval uses), outputs of cells tagged ``nbval-ignore-output`` (or
  marked ``# NBVAL_IGNORE_OUTPUT``) left out;
- every picture (a PNG output, a PNG inside HTML, a PNG in stored widget state) has the
  same size, and at most ``PIXEL_TOLERANCE`` of its pixels differ.

``differences(stored, fresh)`` returns one readable line per cell that is not the
same; an empty list means the two executions agree. ``make execute`` rewrites a
notebook only when this list is not empty, and ``--check`` fails then, so running
``make execute`` twice changes nothing, on this machine or on another one.
"""

from __future__ import annotations

import base64
import configparser
import difflib
import io
import json
import re
from pathlib import Path

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parent.parent
SANITIZE_FILE = ROOT / "tests" / "nbval_sanitize.cfg"
VOLATILE_MARK = "NBVAL_IGNORE_OUTPUT"
# The cell tag nbval reads as the same marker; unlike the comment, readers never see it.
VOLATILE_TAG = "nbval-ignore-output"


def is_volatile(source: str, tags=()) -> bool:
    """Whether nbval ignores the cell's output: the tag, or a comment line that is the
    marker alone.

    nbval reads ``# NBVAL_IGNORE_OUTPUT`` only as a whole comment; a line such as
    ``# NBVAL_IGNORE_OUTPUT (a timing)`` is an ordinary comment to it.
    """
    return VOLATILE_TAG in tags or any(
        line.strip().startswith("#") and line.strip().lstrip("#").strip() == VOLATILE_MARK
        for line in source.splitlines()
    )


# A PNG in base64 starts with these characters (the PNG signature); JSON may break
# the text into lines.
PNG_BASE64 = re.compile(r"iVBORw0KGgo[A-Za-z0-9+/=\n]*")
# At most this fraction of a picture's pixels may differ: the edges of lines and
# markers drawn from values that differ in the last bits. A changed figure (another
# curve, colour, axis or size) changes far more.
PIXEL_TOLERANCE = 0.002
# The colours of a terminal traceback, left out of a report.
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def sanitize_patterns(path: Path = SANITIZE_FILE) -> list[tuple[re.Pattern, str]]:
    """The (regex, replacement) pairs of an nbval sanitize file, in file order."""
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(path, encoding="utf-8")
    return [
        (re.compile(parser.get(section, "regex")), parser.get(section, "replace"))
        for section in parser.sections()
    ]


def _pictures(value, found: list[bytes], patterns):
    """``value`` with every PNG replaced by a placeholder (collected in ``found``)."""
    if isinstance(value, dict):
        return {key: _pictures(item, found, patterns) for key, item in value.items()}
    if isinstance(value, list):
        return [_pictures(item, found, patterns) for item in value]
    if not isinstance(value, str):
        return value

    def take(match: re.Match) -> str:
        found.append(base64.b64decode(match.group(0).replace("\n", "")))
        return f"<picture {len(found)}>"

    text = PNG_BASE64.sub(take, value)
    for pattern, replacement in patterns:
        text = pattern.sub(replacement, text)
    return text


def _pixels(png: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(png)).convert("RGBA"))


def picture_difference(first: bytes, second: bytes) -> float:
    """The fraction of pixels that differ (1.0 when the sizes differ)."""
    if first == second:
        return 0.0
    a, b = _pixels(first), _pixels(second)
    if a.shape != b.shape:
        return 1.0
    return float(np.mean(np.any(a != b, axis=-1)))


def _view(part, patterns) -> tuple[str, list[bytes]]:
    found: list[bytes] = []
    text = json.dumps(_pictures(part, found, patterns), indent=1, sort_keys=True)
    return text, found


def _parts(nb: dict) -> dict[str, object]:
    """What is compared: each code cell's outputs, the stored widget state, and the rest."""
    rest = json.loads(json.dumps(nb))
    for cell in rest.get("cells", []):
        cell.pop("outputs", None)
        cell.pop("execution_count", None)
    rest.get("metadata", {}).pop("widgets", None)
    parts: dict[str, object] = {"notebook": rest}
    for index, cell in enumerate(nb.get("cells", [])):
        if cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        source = "".join(source) if isinstance(source, list) else source
        tags = cell.get("metadata", {}).get("tags", [])
        outputs = [] if is_volatile(source, tags) else cell.get("outputs", [])
        parts[f"cell {index}"] = {
            "execution_count": cell.get("execution_count"),
            "outputs": outputs,
        }
    parts["widget state"] = nb.get("metadata", {}).get("widgets", {})
    return parts


def differences(stored: dict, fresh: dict, patterns=None) -> list[str]:
    """One line per cell (or the widget state) where ``fresh`` is not the same as ``stored``."""
    patterns = sanitize_patterns() if patterns is None else patterns
    found = []
    old_parts, new_parts = _parts(stored), _parts(fresh)
    for name in sorted(set(old_parts) | set(new_parts), key=_cell_order):
        if name not in old_parts or name not in new_parts:
            found.append(f"{name}: present in one execution only")
            continue
        (old_text, old_pictures), (new_text, new_pictures) = (
            _view(old_parts[name], patterns),
            _view(new_parts[name], patterns),
        )
        error = _new_error(old_parts[name], new_parts[name])
        if error:
            found.append(f"{name}: raised {error}")
            continue
        if old_text != new_text:
            diff = difflib.unified_diff(
                old_text.splitlines(), new_text.splitlines(), "stored", "fresh", lineterm="", n=0
            )
            changed = [line for line in diff if line[:1] in "+-" and line[:3] not in ("+++", "---")]
            found.append(
                f"{name}: output differs: " + " | ".join(line[:160] for line in changed[:4])
            )
            continue
        for number, (old, new) in enumerate(zip(old_pictures, new_pictures, strict=True), 1):
            share = picture_difference(old, new)
            if share > PIXEL_TOLERANCE:
                found.append(
                    f"{name}: picture {number} differs in {share:.2%} of its pixels "
                    f"(tolerance {PIXEL_TOLERANCE:.1%})"
                )
    return found


def _new_error(old: object, new: object) -> str:
    """The error a fresh cell raised that the stored one did not, as 'Name: message'."""
    if not isinstance(new, dict) or not isinstance(old, dict):
        return ""
    kinds = [o.get("output_type") for o in old.get("outputs", [])]
    for output in new.get("outputs", []):
        if output.get("output_type") == "error" and "error" not in kinds:
            traceback = ANSI.sub("", "\n".join(output.get("traceback", [])))
            lines = [line for line in traceback.splitlines() if re.match(r"-+> ", line)]
            where = f" at {' '.join(lines[-1].split())}" if lines else ""
            return f"{output.get('ename')}: {output.get('evalue', '')[:200]}{where}"
    return ""


def _cell_order(name: str) -> tuple[int, str]:
    number = name.removeprefix("cell ")
    return (int(number), "") if number.isdigit() else (1 << 30, name)
