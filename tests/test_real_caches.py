"""posenc.real_caches and the RoPE checker on them: every real cache (Hugging Face's
rotary types, GPT-NeoX, GPT-J, diffusers) declared correctly gives no finding, and each
corruption is named as what it is.

``python tests/test_real_caches.py`` prints the confusion table.
"""

from __future__ import annotations

import re
import sys

import numpy as np
import pytest

from posenc.checks.rope import check_rope_cache
from posenc.museum import round_to_bfloat16
from posenc.real_caches import CacheSpec, build, real_caches

COLUMNS = ("named correctly", "named as something else", "unexplained", "false alarm")
# A factor of one named in a finding: "factor 1", "multiplied by 1.0", "divided by 1".
FACTOR_ONE = re.compile(r"(factor|multiplied by|divided by|factor s =) 1(\.0*)?(?![\d.])")


def _plain(spec: CacheSpec) -> bool:
    """Whether the cache's frequencies are base**(-2i/d) (no rope scaling)."""
    return spec.kind != "hf" or spec.rope_type == "default"


def _with(cache, **changes):
    return cache.cos, cache.sin, {**cache.declared, **changes}


def corruptions(spec: CacheSpec):
    """(kind, phrase the finding must contain, cos, sin, declaration) for each corruption
    of ``spec`` that applies to it; the phrase is None for the correct cache."""
    good = build(spec)
    yield "correct", None, *_with(good)
    yield "start +1", "one position late", *_with(build(spec, shift=1))
    yield "start -1", "one position early", *_with(build(spec, shift=-1))
    if not spec.positions:
        if spec.start == 0:
            yield "KV-cache offset", "KV-cache offset", *_with(good, start=100)
        else:
            yield "KV-cache offset", "KV-cache offset", *_with(build(spec, shift=-spec.start))
    yield "cos/sin swapped", "swapped", good.sin, good.cos, good.declared
    yield "sin negated", "wrong sign", good.cos, -good.sin, good.declared
    late = build(spec, shift=1)
    yield "swapped and start +1", "swapped", late.sin, late.cos, good.declared
    yield "negated and start +1", "wrong sign", late.cos, -late.sin, good.declared
    if _plain(spec):
        times_ten = build(spec, base=spec.base * 10)
        yield "base x10", "10 times the declared base", *_with(times_ten)
        if spec.base == 1e4:
            yield "base 10e4 for 1e4", "10e4", *_with(times_ten)
        yield "2i exponent", "2i exponent bug", *_with(build(spec, exponent_bug=True))
    if spec.dtype == "float32":
        bf16 = [round_to_bfloat16(x) for x in (good.cos, good.sin)]
        yield "bf16 storage", "stored in bfloat16", *bf16, good.declared
        fp16 = [x.astype(np.float16).astype(np.float32) for x in (good.cos, good.sin)]
        yield "fp16 storage", "stored in float16", *fp16, good.declared
    other = "half" if good.declared["pairing"] == "interleaved" else "interleaved"
    yield "wrong pairing", f"not pairing='{other}'", *_with(good, pairing=other)
    pick = len(spec.name)  # varies the factor and the corrupted entry from cache to cache
    factor = (2.0, 4.0, 8.0)[pick % 3]
    yield "PI factor", "position interpolation", *_with(build(spec, pi_factor=factor))
    if spec.head is not None:
        yield "partial rotary", "partial rotary", *_with(build(spec, spacing=spec.head))
    cos, sin = good.cos.copy(), good.sin.copy()
    target = cos if pick % 2 else sin
    target[..., pick % target.shape[-2], pick % target.shape[-1]] += (0.02, -0.05)[pick % 2]
    yield "corrupted entry", "a local corruption", cos, sin, good.declared
    yield "odd width", "odd width", good.cos[..., :-1], good.sin[..., :-1], good.declared


def contradictions(findings, declared) -> list[str]:
    """Findings that name a factor of 1 or contradict the declaration."""
    bad = [f for f in findings if FACTOR_ONE.search(f)]
    stored = declared.get("stored_dtype")
    if stored is not None:
        bad += [f for f in findings if f"declare stored_dtype={stored!r}" in f]
    pairing = declared.get("pairing", "half")
    bad += [f for f in findings if f"pairing={pairing!r}, not" in f]
    return bad


def outcome(findings, phrase) -> str:
    """The column of the confusion table a result falls in."""
    if phrase is None:
        return "named correctly" if findings == [] else "false alarm"
    if any(phrase in f for f in findings):
        return "named correctly"
    if not findings or any("no known mistake" in f for f in findings):
        return "unexplained"
    return "named as something else"


def confusion(specs=None):
    """The confusion table: {kind: {column: count}}, and the misnamed cases and the
    contradictions as (cache, kind, findings)."""
    table: dict[str, dict[str, int]] = {}
    wrong, contradicting = [], []
    for spec in specs if specs is not None else real_caches():
        for kind, phrase, cos, sin, declared in corruptions(spec):
            findings = check_rope_cache(cos, sin, **declared)
            column = outcome(findings, phrase)
            table.setdefault(kind, dict.fromkeys(COLUMNS, 0))[column] += 1
            if column != "named correctly":
                wrong.append((spec.name, kind, findings))
            if contradictions(findings, declared):
                contradicting.append((spec.name, kind, findings))
    return table, wrong, contradicting


def format_table(table) -> str:
    lines = [f"{'':20}" + "".join(f"{c:>26}" for c in COLUMNS)]
    for kind, row in table.items():
        lines.append(f"{kind:20}" + "".join(f"{row[c]:>26}" for c in COLUMNS))
    return "\n".join(lines)


@pytest.fixture(scope="module")
def results():
    return confusion()


def test_the_suite_has_at_least_16_caches_across_sizes_bases_and_formats():
    specs = real_caches()
    assert len(specs) >= 16
    assert {64, 80, 128, 256} <= {s.dim for s in specs} | {s.head for s in specs}
    assert {1e4, 5e5, 1e6} <= {s.base for s in specs}
    assert {"float32", "bfloat16"} <= {s.dtype for s in specs}
    assert {"hf", "neox", "gptj", "diffusers"} == {s.kind for s in specs}
    types = {s.rope_type for s in specs if s.kind == "hf"}
    assert {"default", "linear", "dynamic", "yarn", "llama3", "longrope"} <= types


def test_real_caches_declared_correctly_give_no_finding(results):
    table, wrong, _ = results
    assert table["correct"]["false alarm"] == 0, [w for w in wrong if w[1] == "correct"]


def test_at_least_95_percent_of_corruptions_are_named(results):
    table, wrong, _ = results
    rows = [row for kind, row in table.items() if kind != "correct"]
    named = sum(row["named correctly"] for row in rows)
    total = sum(sum(row.values()) for row in rows)
    assert named >= 0.95 * total, (named, total, wrong)


def test_no_finding_names_a_factor_of_one_or_contradicts_the_declaration(results):
    _, _, contradicting = results
    assert contradicting == []


def test_the_table_counts_fail_when_the_checker_is_blind(monkeypatch):
    """The confusion table can fail: a checker that finds nothing names nothing."""
    import tests.test_real_caches as me

    monkeypatch.setattr(me, "check_rope_cache", lambda *a, **k: [])
    table, _, _ = me.confusion(real_caches()[:1])
    assert table["correct"]["named correctly"] == 1
    assert table["start +1"]["unexplained"] == 1
    assert FACTOR_ONE.search("every frequency is divided by 1: position interpolation")
    assert FACTOR_ONE.search("multiplied by 1.00 here")
    assert not FACTOR_ONE.search("multiplied by 1.14, not attention_scale=1")


def test_a_wrong_declaration_of_a_real_cache_is_a_finding():
    cache = build(real_caches()[0])
    declared = {**cache.declared, "allow": ()}
    findings = check_rope_cache(cache.cos, cache.sin, **declared)
    assert len(findings) == 1 and "angles computed in float32" in findings[0], findings


if __name__ == "__main__":
    sys.path.insert(0, ".")
    table, wrong, contradicting = confusion()
    print(format_table(table))
    for name, kind, findings in wrong:
        print(f"- {name} / {kind}: {findings}")
    print("contradictions:", contradicting)
