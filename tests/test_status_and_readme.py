"""The status page, the README and the publishing workflow agree with the book.

The status page (``book/status.md``, built by ``make book``, which ``make test`` runs
before pytest) must list every chapter of ``_toc.yml`` with a run time and a success
mark. The README's chapter list, screenshot, Binder badge and Pages address, and the
workflow that tests and publishes the site, are checked against ``_toc.yml``,
``_config.yml`` and the notebooks themselves, so none of them drifts.
"""

from __future__ import annotations

import json
import re
import urllib.parse
from html.parser import HTMLParser
from pathlib import Path

import pytest
import yaml
from tools.toc import toc_entries

from conftest import ROOT

STATUS_PAGE = ROOT / "_build" / "html" / "book" / "status.html"
README = ROOT / "README.md"
WORKFLOW = ROOT / ".github" / "workflows" / "book.yml"
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
TOC = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
# MyST-NB's execution table marks a run that succeeded with the emoji WHITE HEAVY CHECK
# MARK (and a failed one with a cross), which book/_ext/site_fixes.py makes this sign.
SUCCEEDED = "\N{CHECK MARK}"


def chapters() -> list[str]:
    """The chapter notebooks of the toc (``notebooks/NN_topic``), in reading order."""
    return [entry for entry in toc_entries() if entry.startswith("notebooks/")]


def notebook_title(entry: str) -> str:
    """The first level-one heading of a notebook's first markdown cell."""
    notebook = json.loads((ROOT / f"{entry}.ipynb").read_text(encoding="utf-8"))
    first = next(c for c in notebook["cells"] if c["cell_type"] == "markdown")
    source = "".join(first["source"])
    headings = [line[2:].strip() for line in source.splitlines() if line.startswith("# ")]
    assert headings, f"{entry}: the first markdown cell has no '# ' title"
    return headings[0]


# The status page


class Tables(HTMLParser):
    """The text of every cell of every <table>, row by row, and each row's links."""

    def __init__(self, text: str):
        super().__init__()
        self.tables: list[list[list[str]]] = []
        self.links: list[list[list[str]]] = []
        self._cell: list[str] | None = None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.tables.append([])
            self.links.append([])
        elif tag == "tr" and self.tables:
            self.tables[-1].append([])
            self.links[-1].append([])
        elif tag in ("td", "th") and self.tables:
            self._cell = []
        elif tag == "a" and self._cell is not None:
            self.links[-1][-1].append(dict(attrs).get("href") or "")

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self.tables[-1][-1].append(" ".join("".join(self._cell).split()))
            self._cell = None


def execution_rows(path: Path) -> dict[str, dict[str, str]]:
    """The execution table of a built status page: document name -> {column: text}."""
    if not path.exists():
        pytest.fail(f"{path} is missing: build the site with `make book`")
    parsed = Tables(path.read_text(encoding="utf-8"))
    for table, links in zip(parsed.tables, parsed.links, strict=True):
        if table and table[0][:1] == ["Document"]:
            header, *rows = table
            return {
                row[0]: {**dict(zip(header, row, strict=True)), "links": links[i + 1]}
                for i, row in enumerate(rows)
            }
    pytest.fail(f"{path.name} has no execution table (a table whose first column is Document)")


def check_status_page(path: Path) -> None:
    rows = execution_rows(path)
    for entry in chapters():
        assert entry in rows, f"the status page has no row for {entry}"
        row = rows[entry]
        runtime = row.get("Run Time (s)", "")
        assert re.fullmatch(r"\d+(\.\d+)?", runtime), f"{entry}: run time {runtime!r}"
        assert float(runtime) > 0, f"{entry}: run time {runtime!r}"
        assert row.get("Status") == SUCCEEDED, f"{entry}: status {row.get('Status')!r}"
        page = f"{entry.split('/')[-1]}.html"
        assert any(link.endswith(page) for link in row["links"]), f"{entry}: no link to it"


def test_status_page_is_in_the_reference_part():
    (reference,) = [part for part in TOC["parts"] if part["caption"] == "Reference"]
    assert reference["chapters"][-1]["file"] == "book/status"


def test_status_page_lists_every_chapter_with_its_run_time():
    check_status_page(STATUS_PAGE)


# The README


def readme() -> str:
    return README.read_text(encoding="utf-8")


def readme_section(title: str) -> str:
    text = readme()
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match, f"the README has no '## {title}' section"
    return match.group(1)


def toc_chapter_list() -> list[tuple[str, list[tuple[int, str, str]]]]:
    """Each toc part that holds chapters: its caption, and (number, title, link) of each."""
    parts, number = [], 0
    for part in TOC["parts"]:
        entries = [c["file"] for c in part["chapters"] if c["file"].startswith("notebooks/")]
        if not entries:
            continue
        listed = []
        for entry in entries:
            number += 1
            listed.append((number, notebook_title(entry), f"{entry}.ipynb"))
        parts.append((part["caption"], listed))
    return parts


def readme_chapter_list(section: str) -> list[tuple[str, list[tuple[int, str, str]]]]:
    """The README's chapter list: bold part captions, each followed by a numbered list."""
    parts: list[tuple[str, list[tuple[int, str, str]]]] = []
    for line in section.splitlines():
        caption = re.fullmatch(r"\*\*(.+)\*\*", line.strip())
        item = re.fullmatch(r"(\d+)\. \[(.+)\]\((notebooks/[^)]+)\)", line.strip())
        if caption:
            parts.append((caption.group(1), []))
        elif item:
            assert parts, f"chapter {line!r} comes before any part caption"
            parts[-1][1].append((int(item.group(1)), item.group(2), item.group(3)))
    return parts


def test_readme_lists_the_chapters_of_the_toc_in_order():
    assert readme_chapter_list(readme_section("Chapters")) == toc_chapter_list(), (
        "the README's chapter list should be _toc.yml's parts and chapters, in order,"
        " with each notebook's title"
    )
    for _, listed in toc_chapter_list():
        for _, _, link in listed:
            assert (ROOT / link).exists(), link


def test_readme_shows_the_screenshot_with_alt_text():
    images = re.findall(r"!\[([^\]]*)\]\(([^)\s]+)\)", readme())
    shots = [(alt, src) for alt, src in images if src == "book/assets/site.png"]
    assert len(shots) == 1, "the README should show book/assets/site.png once"
    ((alt, src),) = shots
    assert len(alt.split()) >= 3, f"the screenshot's alt text says too little: {alt!r}"
    picture = ROOT / src
    assert picture.exists(), f"{src} is missing: run `python -m tools.readme_screenshot`"
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", f"{src} is not a PNG"
    assert picture.stat().st_size < 300_000, f"{src} is larger than 300 KB"
    # The README's other badges aside, its pictures are files of the repository.
    for _, other in images:
        if not other.startswith("https://"):
            assert (ROOT / other).exists(), other


def repository() -> tuple[str, str, str]:
    """(owner, name, branch) of the repository that _config.yml names."""
    url = urllib.parse.urlsplit(CONFIG["repository"]["url"])
    assert url.netloc == "github.com", url
    owner, name = url.path.strip("/").removesuffix(".git").split("/")
    return owner, name, CONFIG["repository"]["branch"]


def test_readme_binder_badge_points_at_the_configured_repository():
    owner, name, branch = repository()
    badge = (
        "[![Launch on Binder](https://mybinder.org/badge_logo.svg)]"
        f"(https://mybinder.org/v2/gh/{owner}/{name}/{branch}?urlpath=lab/tree/notebooks)"
    )
    top = readme().split("\n## ", 1)[0]
    assert badge in top, f"the README's top should carry the Binder badge {badge}"
    assert readme().count("mybinder.org/v2/gh/") == 1, "one Binder link, the badge"


def test_readme_gives_the_pages_address_of_the_configured_repository():
    owner, name, _ = repository()
    section = readme_section("Publishing")
    assert str(WORKFLOW.relative_to(ROOT)) in section, "the Publishing section names the workflow"
    address = f"https://{owner}.github.io/{name}/"
    assert address in section, f"the Publishing section should give the address {address}"
    others = set(re.findall(r"https://[\w.-]+\.github\.io/[^\s>)]*", readme())) - {address}
    assert not others, f"the README names other Pages addresses: {sorted(others)}"


# The publishing workflow


def workflow() -> dict:
    assert WORKFLOW.exists(), f"{WORKFLOW.relative_to(ROOT)} is missing"
    parsed = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))
    # YAML 1.1 reads the key `on` as the boolean true.
    parsed["on"] = parsed.pop(True, parsed.get("on"))
    return parsed


def steps(job: dict) -> list[dict]:
    return job.get("steps", [])


def uses(step: dict, action: str) -> bool:
    return step.get("uses", "").split("@")[0] == action


def test_workflow_runs_on_pushes_to_main_pull_requests_and_on_demand():
    triggers = workflow()["on"]
    assert triggers["push"]["branches"] == [repository()[2]], "test pushes to main"
    assert "pull_request" in triggers and "workflow_dispatch" in triggers


def test_workflow_runs_make_test_and_uploads_the_site():
    test = workflow()["jobs"]["test"]
    runs = [step.get("run", "").strip() for step in steps(test)]
    assert "make test" in runs, "the test job must run the README's test command"
    assert not any("playwright install" in run for run in runs), "never download a browser"
    environment = test.get("env", {})
    assert environment.get("CHROMIUM"), "the browser tests need CHROMIUM on the runner"
    assert str(environment.get("CI")).lower() == "true"
    index = environment.get("PIP_EXTRA_INDEX_URL") or environment.get("PIP_INDEX_URL") or ""
    assert index == "${{ vars.TORCH_CPU_INDEX_URL }}", "torch must come from the CPU wheels"
    (upload,) = [s for s in steps(test) if uses(s, "actions/upload-pages-artifact")]
    assert upload["with"]["path"] == "_build/html", "the site is _build/html"
    assert steps(test).index(upload) > runs.index("make test"), "upload only a tested site"


def test_workflow_deploys_only_from_main_after_the_tests():
    deploy = workflow()["jobs"]["deploy"]
    needs = deploy.get("needs", [])
    assert "test" in ([needs] if isinstance(needs, str) else needs), "deploy before the tests"
    condition = deploy.get("if", "").replace(" ", "")
    branch = repository()[2]
    assert f"github.ref=='refs/heads/{branch}'" in condition, f"deploy from {branch} only"
    assert "github.event_name=='push'" in condition, "deploy on pushes only"
    assert deploy.get("permissions") == {"pages": "write", "id-token": "write"}, (
        "deploying to Pages needs pages: write and id-token: write, and no more"
    )
    assert deploy["environment"]["name"] == "github-pages"
    (step,) = [s for s in steps(deploy) if uses(s, "actions/deploy-pages")]
    assert deploy["environment"]["url"] == f"${{{{ steps.{step['id']}.outputs.page_url }}}}"
    assert deploy["concurrency"]["group"] == "pages"
