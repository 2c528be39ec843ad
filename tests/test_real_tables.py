"""check_sinusoidal_table on the tables libraries really build (posenc.real_tables).

Every real table, declared as it is built, must give no finding; every corruption of it
(an off-by-one, swapped sin and cos, a base typo, a narrow storage, ...) must be named as
what it is. :func:`confusion` counts, for each kind of corruption, the tables on which a
finding names it, names something else, reports an unexplained deviation or says
nothing. ``python tests/test_real_tables.py`` prints that table.
"""

from __future__ import annotations

import re
from collections import Counter

import numpy as np
import pytest

from posenc import museum
from posenc.checks import check_sinusoidal_table as check
from posenc.real_tables import RealTable, real_tables

# Corruptions are made on the first ROWS rows of each table, to keep the suite fast.
ROWS = 200
KINDS = (
    "correct",
    "start +1",
    "start -1",
    "sin/cos swapped",
    "sign (negated positions)",
    "base x10",
    "base 10e4 for 1e4",
    "bf16 storage",
    "fp16 storage",
    "wrong layout",
    "position interpolation x4",
    "2i exponent",
    "transposed",
    "one corrupted entry",
    "duplicated row",
    "repeated position id",
    "dropped row",
    "duplicated column",
)
# Outside the catalogue: two bugs at once (every phrase must show), small noise on every
# entry and conventions the checker does not know (no phrase: "unexplained" is right).
OUT_KINDS = (
    "swapped + base x10",
    "start +1 + bf16 storage",
    "base x10 + wrong layout",
    "noise 1e-3",
    "linear frequencies",
    "random frequencies",
)
OUT_COLUMNS = ("all named", "some named", "named as something else", "unexplained")
SPECIFIC = re.compile(
    r"swapped|wrong sign|position (early|late)|positions (early|late)|base=|base =|"
    r"double counting|stored in|layout|interpolation|computed in|repeated|skipped|"
    r"transposed|padding|is scaled|a copy of"
)
OUTCOMES = ("named correctly", "named as something else", "unexplained", "silent", "false alarm")


def row_positions(real: RealTable) -> np.ndarray:
    """The position of every row of ``real.table``, from its declaration."""
    declared = real.declared
    if "positions" in declared:
        return np.asarray(declared["positions"], dtype=np.float64)
    return declared.get("start", 0) + np.arange(len(real.table), dtype=np.float64)


def pair_columns(width: int, declared: dict) -> tuple[np.ndarray, np.ndarray]:
    """The columns of each pair's first and second member in a declared real table."""
    n = width // 2
    if declared.get("layout", "interleaved") == "interleaved":
        return np.arange(0, 2 * n, 2), np.arange(1, 2 * n, 2)
    second = n + (width % 2 if not _zero_padded(declared) else 0)
    return np.arange(n), np.arange(second, second + n)


def _zero_padded(declared: dict) -> bool:
    """Whether an odd width ends in a zero column (else in the sine of one more pair)."""
    return declared.get("spacing") == "tensor2tensor" or declared.get("odd_column") == "zero"


def _prepared(real: RealTable):
    """``(positions, declared, base, table)``: the first ROWS rows of ``real``, rebuilt."""
    positions = row_positions(real)[:ROWS]
    declared = dict(real.declared)
    if "positions" in declared:
        declared["positions"] = positions
    base = declared.get("base", 10000.0)
    return positions, declared, base, real.rebuild(positions, base)


def corruptions(real: RealTable):
    """``(kind, table, declared, phrase)`` for each corruption that applies to ``real``:
    the table as the bug makes it, the (unchanged) declaration, and a phrase the finding
    that names the bug must contain."""
    positions, declared, base, table = _prepared(real)
    width = table.shape[1]
    stored = declared.get("stored_dtype")
    out = [("correct", table, declared, None)]
    first = 2 if "padding_idx" in declared else 0  # the first row that is a position
    out.append(("start +1", real.rebuild(positions + 1, base), declared, "one position late"))
    out.append(("start -1", real.rebuild(positions - 1, base), declared, "one position early"))
    a, b = pair_columns(width, declared)
    swapped = table.copy()
    swapped[:, a], swapped[:, b] = table[:, b], table[:, a]
    if width % 2 and not _zero_padded(declared):  # Marian's lone sine becomes a cosine
        lone = (width + 1) // 2 - 1
        swapped[:, lone] = np.cos(positions * base ** (-2 * (width // 2) / width))
    out.append(("sin/cos swapped", swapped, declared, "swapped"))
    if np.any(positions != 0):
        out.append(
            ("sign (negated positions)", real.rebuild(-positions, base), declared, "wrong sign")
        )
    out.append(
        ("base x10", real.rebuild(positions, 10 * base), declared, f"declare base={10 * base:g}")
    )
    if base == 10000.0:
        out.append(
            ("base 10e4 for 1e4", real.rebuild(positions, 10e4), declared, "10e4, which is 100000")
        )
    if stored is None:
        bf16 = museum.round_to_bfloat16(table)
        out.append(("bf16 storage", bf16, declared, "stored in bfloat16"))
        fp16 = table.astype(np.float16).astype(np.float32)
        out.append(("fp16 storage", fp16, declared, "stored in float16"))
    interleaved = table.copy()
    interleaved[:, 0 : 2 * len(a) : 2], interleaved[:, 1 : 2 * len(a) : 2] = (
        table[:, a],
        table[:, b],
    )
    if width % 2:
        lone = np.setdiff1d(np.arange(width), np.concatenate([a, b]))[0]
        interleaved[:, -1] = table[:, lone]
    out.append(("wrong layout", interleaved, declared, "in the interleaved layout"))
    if np.ptp(positions) > 0:
        interpolated = real.rebuild(positions / 4, base)
        out.append(("position interpolation x4", interpolated, declared, "0.25 times"))
    out.append(("2i exponent", real.rebuild(positions, base**2), declared, "double counting"))
    out.append(("transposed", table.T.copy(), declared, "transposed"))
    r = _changing_row(positions, first)
    corrupted = table.copy()
    corrupted[r, width // 3] += 0.02
    out.append(("one corrupted entry", corrupted, declared, f"row {r} (position"))
    duplicated = table.copy()
    duplicated[r] = table[r - 1]
    out.append(("duplicated row", duplicated, declared, f"row {r} repeats row {r - 1}"))
    repeated = table.copy()
    repeated[r:] = table[r - 1 : -1]
    out.append(("repeated position id", repeated, declared, f"repeated at row {r}"))
    dropped = table.copy()
    dropped[r:-1] = table[r + 1 :]
    out.append(("dropped row", dropped, declared, f"skipped at row {r}"))
    column = width // 3
    copied = table.copy()
    copied[:, column] = table[:, column + 2]
    out.append(("duplicated column", copied, declared, f"column {column} is a copy of column"))
    return out


def _convention(real: RealTable, table, positions, declared, freqs):
    """``table`` with every full pair at the angles ``positions * freqs`` (a convention
    the checker does not know), in the table's own layout and order."""
    a, b = pair_columns(table.shape[1], declared)
    first, second = np.sin, np.cos
    if declared.get("first") == "cos":
        first, second = second, first
    angles = positions[:, None] * freqs[None, : len(a)]
    made = table.copy()
    made[:, a], made[:, b] = first(angles), second(angles)
    if "padding_idx" in declared:
        made[declared["padding_idx"]] = 0
    return made


def out_of_catalogue(real: RealTable):
    """``(kind, table, declared, phrases)`` for corruptions outside the catalogue."""
    positions, declared, base, table = _prepared(real)
    width = table.shape[1]
    a, b = pair_columns(width, declared)
    wrong = real.rebuild(positions, 10 * base)
    swapped = wrong.copy()
    swapped[:, a], swapped[:, b] = wrong[:, b], wrong[:, a]
    out = []
    if not width % 2:
        out.append(("swapped + base x10", swapped, declared, ("swapped", "base=")))
    if declared.get("stored_dtype") is None:
        late = museum.round_to_bfloat16(real.rebuild(positions + 1, base))
        out.append(("start +1 + bf16 storage", late, declared, ("one position late", "bfloat16")))
    if not width % 2:
        interleaved = wrong.copy()
        interleaved[:, 0::2], interleaved[:, 1::2] = wrong[:, a], wrong[:, b]
        phrases = ("base=", "in the interleaved layout")
        if declared.get("layout", "interleaved") != "interleaved":
            out.append(("base x10 + wrong layout", interleaved, declared, phrases))
    noisy = table + 1e-3 * np.random.default_rng(width).standard_normal(table.shape)
    if "padding_idx" in declared:
        noisy[declared["padding_idx"]] = 0
    out.append(("noise 1e-3", noisy, declared, ()))
    n = max(len(a), 1)
    linear = 1 - np.arange(n) / n
    out.append(
        ("linear frequencies", _convention(real, table, positions, declared, linear), declared, ())
    )
    random = np.sort(np.random.default_rng(n).uniform(1e-4, 1, n))[::-1]
    out.append(
        ("random frequencies", _convention(real, table, positions, declared, random), declared, ())
    )
    return out


def out_outcome(findings: list[str], phrases) -> str:
    from test_real_caches import out_outcome as classify  # tests/ is on sys.path

    return classify(findings, phrases, SPECIFIC)


def out_confusion(tables=None):
    """``(counts, cases)`` for the corruptions outside the catalogue."""
    counts = {kind: Counter() for kind in OUT_KINDS}
    cases = []
    for real in tables if tables is not None else real_tables():
        for kind, table, declared, phrases in out_of_catalogue(real):
            findings = check(table, **declared)
            result = out_outcome(findings, phrases)
            counts[kind][result] += 1
            cases.append((kind, real.name, result, findings))
    return counts, cases


def _changing_row(positions: np.ndarray, first: int) -> int:
    """A row in the middle of the table whose position differs from the row before."""
    r = max(len(positions) // 2, first + 1)
    while positions[r] == positions[r - 1]:
        r += 1
    return r


def outcome(findings: list[str], phrase: str | None) -> str:
    if phrase is None:
        return "named correctly" if not findings else "false alarm"
    if not findings:
        return "silent"
    if any(phrase in f for f in findings):
        return "named correctly"
    if any("no known bug explains" in f or "not sine-cosine pairs" in f for f in findings):
        return "unexplained"
    return "named as something else"


FACTOR_ONE = re.compile(
    r"(factor 1\b(?!\.\d)|multiplied by 1\b(?!\.\d)|divided by 1\b(?!\.\d)"
    r"|\(1 times|base = ([\d.e+]+), not \2\b)"
)
DECLARE = re.compile(r"declare (\w+)=('?[\w.+-]+'?)")


def contradictions(findings: list[str], declared: dict) -> list[str]:
    """Findings that name a factor of 1 or tell to declare what was declared."""
    bad = []
    for finding in findings:
        if FACTOR_ONE.search(finding):
            bad.append(finding)
        for key, value in DECLARE.findall(finding):
            if key in declared and not isinstance(declared[key], np.ndarray):
                given = declared[key]
                same = (
                    float(value) == float(given)
                    if isinstance(given, float | int) and not isinstance(given, bool)
                    else value.strip("'") == str(given)
                )
                if same:
                    bad.append(finding)
    return bad


def confusion(tables=None):
    """``(counts, examples)``: outcomes per kind, and the findings of every miss and
    every contradiction (kind, table name, findings)."""
    counts = {kind: Counter() for kind in KINDS}
    examples = []
    for real in tables if tables is not None else real_tables():
        for kind, table, declared, phrase in corruptions(real):
            findings = check(table, **declared)
            result = outcome(findings, phrase)
            counts[kind][result] += 1
            wrong = contradictions(findings, declared)
            if result != "named correctly" or wrong:
                examples.append((kind, real.name, result, findings, wrong))
    return counts, examples


def format_confusion(counts) -> str:
    lines = [f"{'':28}" + "".join(f"{o:>26}" for o in OUTCOMES)]
    for kind in KINDS:
        lines.append(f"{kind:28}" + "".join(f"{counts[kind][o]:>26}" for o in OUTCOMES))
    return "\n".join(lines)


@pytest.fixture(scope="module")
def suite():
    return confusion()


def test_the_suite_has_at_least_thirty_tables_of_several_widths_and_formats():
    tables = real_tables()
    assert len(tables) >= 30
    widths = {real.table.shape[1] for real in tables}
    assert len(widths) >= 6 and any(w % 2 for w in widths)
    stored = {real.declared.get("stored_dtype") for real in tables}
    assert {None, "bfloat16"} <= stored
    assert all(real.table.dtype == np.float32 for real in tables)


def test_no_false_alarm_on_any_real_table_declared_as_built():
    for real in real_tables():
        assert check(real.table, **real.declared) == [], real.name


def test_at_least_95_percent_of_corruptions_are_named_correctly(suite):
    counts, examples = suite
    assert counts["correct"]["false alarm"] == 0, examples
    corrupted = [counts[kind] for kind in KINDS if kind != "correct"]
    total = sum(sum(c.values()) for c in corrupted)
    named = sum(c["named correctly"] for c in corrupted)
    assert total >= 300
    assert named >= 0.95 * total, format_confusion(counts) + "\n" + "\n".join(map(str, examples))


def test_no_finding_names_a_factor_of_one_or_contradicts_the_declaration(suite):
    _counts, examples = suite
    assert [e for e in examples if e[4]] == []


def test_out_of_catalogue_noise_is_never_named_as_a_convention_bug():
    tables = real_tables()[::3]  # a third of the suite keeps the module fast
    counts, cases = out_confusion(tables)
    print("\n" + "\n".join(f"{kind}: {dict(counts[kind])}" for kind in OUT_KINDS))
    assert counts["noise 1e-3"]["named as something else"] == 0, [
        c for c in cases if c[0] == "noise 1e-3" and c[2] != "unexplained"
    ]
    assert sum(counts["noise 1e-3"].values()) == len(tables)


def test_the_out_of_catalogue_counts_can_fail():
    assert out_outcome(["sin and cos are swapped"], ()) == "named as something else"
    assert out_outcome(["no known bug explains it"], ()) == "unexplained"
    assert out_outcome(["swapped", "declare base=1e5"], ("swapped", "base=")) == "all named"
    assert out_outcome(["swapped"], ("swapped", "base=")) == "some named"


def test_contradictions_are_caught():
    # the classifier itself must be able to fail
    assert contradictions(["declare layout='concat'"], {"layout": "concat"})
    assert contradictions(["frequencies fit base = 10000, not 10000"], {})
    assert contradictions(["position interpolation (factor 1)"], {})
    assert not contradictions(["declare layout='interleaved'"], {"layout": "concat"})
    assert outcome(["rows start at position 1, not 0"], "one position early") != "named correctly"


def test_the_tables_bf16_tensors_need_no_declaration():
    torch = pytest.importorskip("torch")
    for real in real_tables()[:6]:
        if "stored_dtype" in real.declared:
            continue
        tensor = torch.tensor(real.table).to(torch.bfloat16)
        assert check(tensor, **real.declared) == [], real.name


@pytest.mark.parametrize("shape", [(1, 200, 64), (200, 1, 64)])
def test_singleton_axes_of_a_registered_buffer_are_dropped(shape):
    real = next(r for r in real_tables() if r.name.startswith("1-D sin-cos embedding 64"))
    table = real.rebuild(np.arange(200.0), 10000.0)
    assert check(table.reshape(shape), layout="concat") == []
    findings = check(real.rebuild(np.arange(1.0, 201.0), 10000.0).reshape(shape), layout="concat")
    assert len(findings) == 1 and "one position late" in findings[0]


if __name__ == "__main__":
    import sys

    sys.path.insert(0, ".")
    counts, examples = confusion()
    print(format_confusion(counts))
    for kind, name, result, findings, wrong in examples:
        print(f"\n{kind} | {name} | {result}\n  " + "\n  ".join(findings))
        if wrong:
            print("  CONTRADICTS:", wrong)
    out, cases = out_confusion()
    print(f"\n{'':28}" + "".join(f"{o:>26}" for o in OUT_COLUMNS))
    for kind in OUT_KINDS:
        print(f"{kind:28}" + "".join(f"{out[kind][o]:>26}" for o in OUT_COLUMNS))
    for kind, name, result, findings in cases:
        if result not in ("all named", "unexplained"):
            print(f"\n{kind} | {name} | {result}\n  " + "\n  ".join(findings))
