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
    row = good.cos.shape[-2] // 2 + pick % 7
    yield "repeated position id", f"is repeated at row {row}", *_repeat_row(good, row)
    if spec.kind != "diffusers":
        rounded = build(spec, inv_freq_bfloat16=True)
        yield "inv_freq in bf16", "rounded to bfloat16", *_with(rounded)
    if spec.rope_type == "llama3":
        undeclared = {k: v for k, v in good.declared.items() if k != "frequencies"}
        yield "llama3 undeclared", "Llama 3 scaling", good.cos, good.sin, undeclared
    if spec.rope_type == "dynamic":
        undeclared = {k: v for k, v in good.declared.items() if k != "frequencies"}
        yield "dynamic NTK undeclared", "dynamic NTK", good.cos, good.sin, undeclared


def _repeat_row(cache, row):
    """The cache with row ``row - 1`` repeated at ``row`` (a position id repeated, as
    chunked prefill or packing can produce), every later row one position early."""
    cos, sin = cache.cos.copy(), cache.sin.copy()
    cos[..., row:, :], sin[..., row:, :] = (
        cache.cos[..., row - 1 : -1, :],
        cache.sin[..., row - 1 : -1, :],
    )
    return cos, sin, cache.declared


# Outside the catalogue: two bugs at once (all their phrases), small noise on every
# entry and conventions the checker does not know (no phrase: "unexplained" is right).
OUT_COLUMNS = ("all named", "some named", "named as something else", "unexplained")
SPECIFIC = re.compile(
    r"swapped|wrong sign|position (early|late)|positions (early|late)|offset|base =|"
    r"exponent|stored in|not pairing=|interpolation|partial rotary|scaling|multiplied by|"
    r"computed in|rounded to|repeated|skipped|corrupted"
)


def _row_grid(cache) -> np.ndarray:
    """The declared position of every row of ``cache``, shaped like its rows."""
    declared = cache.declared
    length = cache.cos.shape[-2]
    if "positions" in declared:
        return np.asarray(declared["positions"], dtype=np.float64)
    return declared.get("start", 0) + np.arange(length, dtype=np.float64)


def _convention(cache, angle, scale=None):
    """A cache of ``cache``'s shape and pairing with ``angle(positions, i)`` (and cos,
    sin multiplied by ``scale(positions, i)``), a convention the checker does not know."""
    width = cache.cos.shape[-1]
    grid = _row_grid(cache)
    i = np.arange(width // 2, dtype=np.float64)
    angles = angle(grid[..., None], i)
    factor = cache.declared.get("attention_scale", 1.0)
    factor = factor * (scale(grid[..., None], i) if scale is not None else 1.0)
    cos, sin = factor * np.cos(angles), factor * np.sin(angles)
    if cache.declared["pairing"] == "interleaved":
        cos, sin = np.repeat(cos, 2, axis=-1), np.repeat(sin, 2, axis=-1)
    else:
        cos, sin = np.concatenate([cos, cos], -1), np.concatenate([sin, sin], -1)
    shape = cache.cos.shape
    cos = np.broadcast_to(cos.reshape((1,) * (len(shape) - cos.ndim) + cos.shape), shape)
    sin = np.broadcast_to(sin.reshape((1,) * (len(shape) - sin.ndim) + sin.shape), shape)
    return cos.astype(np.float32), sin.astype(np.float32), cache.declared


def out_of_catalogue(spec: CacheSpec):
    """(kind, phrases every named bug must show, cos, sin, declaration) for corruptions
    the checker has no explanation of its own for."""
    good = build(spec)
    pick = len(spec.name)
    if _plain(spec):
        wrong = build(spec, base=spec.base * 10)
        yield "swapped + base x10", ("swapped", "10 times"), wrong.sin, wrong.cos, good.declared
    both = build(spec, shift=1, pi_factor=2.0)
    yield "start +1 + PI x2", ("one position late", "interpolation"), *_with(both)
    if spec.dtype == "float32":
        other = "half" if good.declared["pairing"] == "interleaved" else "interleaved"
        bf16 = [round_to_bfloat16(x) for x in (good.cos, good.sin)]
        phrases = ("stored in bfloat16", f"not pairing='{other}'")
        yield "bf16 storage + pairing", phrases, *bf16, {**good.declared, "pairing": other}
    rng = np.random.default_rng(pick)
    noisy = [x + 1e-3 * rng.standard_normal(x.shape) for x in (good.cos, good.sin)]
    yield "noise 1e-3", (), *noisy, good.declared
    d = 2 * (good.cos.shape[-1] // 2)
    yield "linear frequencies", (), *_convention(good, lambda p, i: p * (1 - i / (d / 2)))
    yield (
        "axial 2-D RoPE",
        (),
        *_convention(
            good,
            lambda p, i: (
                np.where(i < d / 4, p // 16, p % 16) * spec.base ** (-4 * (i % (d / 4)) / d)
            ),
        ),
    )
    yield (
        "xPos decay",
        (),
        *_convention(
            good,
            lambda p, i: p * spec.base ** (-2 * i / d),
            lambda p, i: ((2 * i / d + 0.4) / 1.4) ** (p / 512),
        ),
    )


def out_outcome(findings, phrases, specific=SPECIFIC) -> str:
    """The column of the out-of-catalogue table: every phrase named, some, a bug named
    (``specific``) where none was made, or unexplained."""
    if phrases:
        hits = sum(any(ph in f for f in findings) for ph in phrases)
        if hits == len(phrases):
            return "all named"
        if hits:
            return "some named"
    if any(specific.search(f) for f in findings):
        return "named as something else"
    return "unexplained"


def out_confusion(specs=None):
    """The out-of-catalogue table {kind: {column: count}}, and every case's findings."""
    table: dict[str, dict[str, int]] = {}
    cases = []
    for spec in specs if specs is not None else real_caches():
        for kind, phrases, cos, sin, declared in out_of_catalogue(spec):
            findings = check_rope_cache(cos, sin, **declared)
            column = out_outcome(findings, phrases)
            table.setdefault(kind, dict.fromkeys(OUT_COLUMNS, 0))[column] += 1
            cases.append((spec.name, kind, column, findings))
    return table, cases


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


@pytest.fixture(scope="module")
def outside():
    return out_confusion()


def test_out_of_catalogue_noise_is_never_named_as_a_convention_bug(outside):
    table, cases = outside
    print("\n" + "\n".join(f"{kind}: {row}" for kind, row in table.items()))
    assert table["noise 1e-3"]["named as something else"] == 0, [
        c for c in cases if c[1] == "noise 1e-3" and c[2] != "unexplained"
    ]
    assert sum(table["noise 1e-3"].values()) == len(real_caches())


def test_the_out_of_catalogue_counts_fail_when_the_checker_names_anything(monkeypatch):
    import tests.test_real_caches as me

    from posenc.checks.rope import SWAPPED

    monkeypatch.setattr(me, "check_rope_cache", lambda *a, **k: [SWAPPED])
    table, _ = me.out_confusion(real_caches()[:1])
    assert table["noise 1e-3"]["named as something else"] == 1
    assert table["swapped + base x10"]["some named"] == 1


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
    out, cases = out_confusion()
    lines = [f"{'':24}" + "".join(f"{c:>26}" for c in OUT_COLUMNS)]
    lines += [f"{k:24}" + "".join(f"{row[c]:>26}" for c in OUT_COLUMNS) for k, row in out.items()]
    print("\n".join(lines))
    for name, kind, column, findings in cases:
        if column not in ("all named", "unexplained"):
            print(f"- {name} / {kind} / {column}: {findings}")
