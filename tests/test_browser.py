"""The site as readers meet it: every page of the toc opened in a real browser.

``make book`` writes ``_build/html``; these tests serve it on localhost and open each
page in Debian's Chromium, driven by Playwright, with every request to another host
blocked, as on a plane. A page passes when it shows no console or page error, asks
for nothing from the network, renders its math with MathJax and its stored widgets,
loads every image (each with alt text), has only internal links that resolve and
the launch and download buttons, and when axe-core finds no serious or critical
accessibility violation. Each page's screenshot goes to ``_build/screenshots/`` and a
summary (page weight, violations of every impact) to ``_build/browser-report.json``.

Without Chromium (``apt-get install chromium``) the tests are skipped with that
message, unless ``CI`` is set: ``.ci/run`` installs it, and there a missing browser
is a failure.
"""

from __future__ import annotations

import functools
import gzip
import json
import os
import re
import urllib.parse
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pytest
from tools.site_server import CHROMIUM_ARGS, SELECTORS, WAIT_FOR_RENDERING, chromium_path, serve
from tools.toc import toc_entries

from conftest import ROOT

HTML = ROOT / "_build" / "html"
SCREENSHOTS = ROOT / "_build" / "screenshots"
REPORT = ROOT / "_build" / "browser-report.json"
AXE = ROOT / "node_modules" / "axe-core" / "axe.min.js"
PAGES = [f"{entry}.html" for entry in toc_entries()]
CHAPTERS = [page for page in PAGES if page.startswith("notebooks/")]
# What axe-core reports at these impacts fails a page; milder ones are only reported.
BLOCKING = ("serious", "critical")
TIMEOUT_MS = 60_000


@pytest.fixture(scope="module")
def origin():
    """The built site, served on a free localhost port for the module's tests."""
    if not (HTML / "index.html").exists():
        pytest.fail("_build/html is missing: build the site with `make book`")
    with serve(HTML) as served:
        yield served


@pytest.fixture(scope="module")
def browser():
    executable = chromium_path()
    if executable is None:
        message = (
            "no Chromium found: `apt-get install chromium` (or set CHROMIUM) "
            "to run the browser tests"
        )
        if os.environ.get("CI"):
            pytest.fail(message + " (CI must run them: .ci/run installs it)")
        pytest.skip(message)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@dataclass
class Visit:
    """What one page did in the browser."""

    page: str
    console_errors: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)
    blocked: list[str] = field(default_factory=list)  # requests to another host
    failed: list[str] = field(default_factory=list)  # local requests that failed or 4xx/5xx
    loaded: list[str] = field(default_factory=list)  # local paths fetched by the page
    dom: dict = field(default_factory=dict)  # facts read from the rendered page
    violations: list[dict] = field(default_factory=list)  # axe-core, every impact
    weight: int = 0  # bytes of every local file the page loaded
    weight_gzip: int = 0  # the same files gzip-compressed, as a server that compresses sends them

    def blocking_violations(self) -> list[dict]:
        return [v for v in self.violations if v["impact"] in BLOCKING]


# Read in the page after it has loaded, MathJax has typeset and the widgets have rendered.
DOM_FACTS = (
    """() => {"""
    + SELECTORS
    + """
  return {
    math: Array.from(document.querySelectorAll('.math')).map(el => ({
      rendered: el.querySelector('mjx-container') !== null,
      error: el.querySelector('mjx-merror') !== null,
      tex: el.textContent.slice(0, 60),
    })),
    images: Array.from(document.images).map(img => ({
      src: img.getAttribute('src').slice(0, 80),
      alt: img.getAttribute('alt'),
      loaded: img.complete && img.naturalWidth > 0,
    })),
    links: Array.from(document.querySelectorAll('a[href]')).map(a => a.href),
    launch: Array.from(document.querySelectorAll('.dropdown-launch-buttons a')).map(a => a.href),
    download: Array.from(document.querySelectorAll(
      '.dropdown-download-buttons a, .dropdown-download-buttons button'
    )).map(el => el.getAttribute('href') ? el.href : (el.title || el.textContent.trim())),
    widget_views: document.querySelectorAll(VIEWS).length,
    widgets_rendered: document.querySelectorAll(RENDERED).length,
  };
}"""
)

RUN_AXE = """async () => {
  const result = await axe.run(document, {resultTypes: ['violations']});
  return result.violations.map(v => ({
    id: v.id, impact: v.impact, help: v.help,
    nodes: v.nodes.slice(0, 5).map(n => n.target.join(' ')),
    count: v.nodes.length,
  }));
}"""


@pytest.fixture(scope="module")
def visits(browser, origin):
    """Each page visited once, on first use; the report is written at the end."""
    done: dict[str, Visit] = {}
    context = browser.new_context(viewport={"width": 1280, "height": 900}, service_workers="block")
    context.set_default_timeout(TIMEOUT_MS)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)

    def visit(page_path: str) -> Visit:
        if page_path not in done:
            done[page_path] = _visit(context, origin, page_path)
        return done[page_path]

    yield visit
    context.close()
    loaded = {p for v in done.values() for p in v.loaded}
    report = {
        "pages": [
            asdict(v) | {"dom": None, "loaded": sorted(set(v.loaded))} for v in done.values()
        ],
        "total_page_weight": sum(v.weight for v in done.values()),
        # What a reader who opens every page downloads once, with a browser cache.
        "distinct_weight": sum(f.stat().st_size for f in _files(origin, loaded)),
        "distinct_weight_gzip": sum(_gzip_size(f) for f in _files(origin, loaded)),
        "total_page_weight_gzip": sum(v.weight_gzip for v in done.values()),
        "site_bytes": sum(p.stat().st_size for p in HTML.rglob("*") if p.is_file()),
    }
    REPORT.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")


def _local_path(url: str, origin: str) -> Path | None:
    if not url.startswith(origin + "/"):
        return None
    path = urllib.parse.unquote(urllib.parse.urlsplit(url).path).lstrip("/")
    target = HTML / path
    return target / "index.html" if target.is_dir() else target


def _files(origin: str, paths) -> list[Path]:
    """The distinct files behind the local paths a page requested."""
    files = {_local_path(origin + p, origin) for p in paths}
    return sorted(f for f in files if f is not None and f.is_file())


@functools.cache
def _gzip_size(path: Path) -> int:
    return len(gzip.compress(path.read_bytes(), compresslevel=6, mtime=0))


def _block_other_hosts(page, origin: str, blocked: list[str]) -> None:
    """Let the page reach the local server only; note every other request and abort it."""

    def route(r):
        if r.request.url.startswith(origin + "/"):
            r.continue_()
        else:
            blocked.append(r.request.url[:120])
            r.abort("blockedbyclient")

    page.route("**/*", route)


def _visit(context, origin: str, page_path: str) -> Visit:
    visit = Visit(page_path)
    page = context.new_page()

    _block_other_hosts(page, origin, visit.blocked)
    page.on(
        "console",
        lambda m: visit.console_errors.append(m.text[:300]) if m.type == "error" else None,
    )
    page.on("pageerror", lambda e: visit.page_errors.append(str(e)[:300]))
    page.on("requestfailed", lambda r: visit.failed.append(f"{r.url[:120]}: {r.failure}"))

    def response(r):
        if r.url.startswith(origin + "/"):
            visit.loaded.append(urllib.parse.urlsplit(r.url).path)
            if r.status >= 400:
                visit.failed.append(f"{r.url[:120]}: HTTP {r.status}")

    page.on("response", response)
    page.goto(f"{origin}/{page_path}", wait_until="load")
    page.evaluate(WAIT_FOR_RENDERING)
    page.wait_for_load_state("networkidle")
    visit.dom = page.evaluate(DOM_FACTS)
    page.add_script_tag(content=AXE.read_text(encoding="utf-8"))
    visit.violations = page.evaluate(RUN_AXE)
    name = page_path.removesuffix(".html").replace("/", "__")
    page.screenshot(path=SCREENSHOTS / f"{name}.png", full_page=True)
    page.close()
    files = _files(origin, visit.loaded)
    visit.weight = sum(f.stat().st_size for f in files)
    visit.weight_gzip = sum(_gzip_size(f) for f in files)
    return visit


@pytest.mark.parametrize("page", PAGES)
def test_page_loads_without_errors_or_network(visits, page):
    visit = visits(page)
    assert not visit.page_errors, f"{page}: page errors {visit.page_errors}"
    assert not visit.console_errors, f"{page}: console errors {visit.console_errors}"
    assert not visit.blocked, f"{page} asked another host for {visit.blocked}"
    assert not visit.failed, f"{page}: failed requests {visit.failed}"
    assert (SCREENSHOTS / (page.removesuffix(".html").replace("/", "__") + ".png")).stat().st_size


@pytest.mark.parametrize("page", PAGES)
def test_math_is_typeset(visits, page):
    math = visits(page).dom["math"]
    source = (HTML / page).read_text(encoding="utf-8")
    if 'class="math' in source:
        assert math, f"{page} has math in its HTML that the browser did not find"
    unrendered = [m["tex"] for m in math if not m["rendered"] or m["error"]]
    assert not unrendered, f"{page}: MathJax did not typeset {unrendered[:3]}"


@pytest.mark.parametrize("page", PAGES)
def test_images_load_and_have_alt_text(visits, page):
    for image in visits(page).dom["images"]:
        assert image["loaded"], f"{page}: image {image['src']} did not load"
        assert image["alt"] and image["alt"].strip(), (
            f"{page}: image {image['src']} has no alt text"
        )


@pytest.mark.parametrize("page", PAGES)
def test_internal_links_resolve_in_the_browser(visits, origin, page):
    visit = visits(page)
    for link in visit.dom["links"]:
        target = _local_path(link.split("#")[0], origin)
        if target is None:
            continue
        assert target.is_file(), f"{page}: link {link} points to no file"
        fragment = urllib.parse.unquote(urllib.parse.urlsplit(link).fragment)
        if fragment and target.suffix == ".html":
            ids = set(re.findall(r'\sid="([^"]+)"', target.read_text(encoding="utf-8")))
            assert fragment in ids, f"{page}: link {link} names an anchor its page lacks"


@pytest.mark.parametrize("page", PAGES)
def test_launch_and_download_buttons(visits, origin, page):
    dom = visits(page).dom
    assert dom["download"], f"{page} has no download button"
    if page in CHAPTERS:
        notebook = page.removeprefix("notebooks/").removesuffix(".html") + ".ipynb"
        sources = [d for d in dom["download"] if d.endswith(notebook)]
        assert sources, f"{page} offers no download of {notebook}: {dom['download']}"
        assert _local_path(sources[0], origin).is_file()
        assert any("mybinder.org" in link and notebook in link for link in dom["launch"]), dom[
            "launch"
        ]
        assert any("colab.research.google.com" in link for link in dom["launch"]), dom["launch"]


@pytest.mark.parametrize("page", PAGES)
def test_stored_widgets_render(visits, page):
    dom = visits(page).dom
    assert dom["widgets_rendered"] >= dom["widget_views"], (
        f"{page}: {dom['widget_views']} stored widgets, {dom['widgets_rendered']} rendered"
    )


@pytest.mark.parametrize("page", PAGES)
def test_no_serious_accessibility_violation(visits, page):
    violations = visits(page).blocking_violations()
    assert not violations, f"{page}: axe-core found " + json.dumps(violations, indent=1)


CLOCKS_PAGE = "notebooks/06_properties.html"
# The widget manager's stack draws only the picture selected: the one <img> in the widget.
VISIBLE_FRAME = """() => Array.from(document.querySelectorAll('.widget-vbox img'))
  .filter(img => img.offsetWidth > 0).map(img => img.getAttribute('alt'))"""


def test_the_clocks_play_in_the_page_without_a_kernel(browser, origin):
    """Chapter 6's stored widget runs in the browser alone: play moves slider and picture."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    blocked: list[str] = []
    _block_other_hosts(page, origin, blocked)
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(f"{origin}/{CLOCKS_PAGE}")
    page.evaluate(WAIT_FOR_RENDERING)
    handle = page.locator(".widget-slider .noUi-handle")
    assert handle.count() == 1, "the clocks' slider did not render"
    assert handle.get_attribute("aria-label") == "position"
    (first,) = page.evaluate(VISIBLE_FRAME)
    assert "row 0 " in first
    play = page.get_by_role("button", name="Play or pause")
    play.click()
    page.wait_for_function(
        "() => Number(document.querySelector('.widget-slider .noUi-handle')"
        ".getAttribute('aria-valuenow')) >= 2",
        timeout=20_000,
    )
    play.click()
    value = int(float(handle.get_attribute("aria-valuenow")))
    page.wait_for_timeout(1500)  # paused: the slider stays where it is
    assert int(float(handle.get_attribute("aria-valuenow"))) == value
    (shown,) = page.evaluate(VISIBLE_FRAME)
    assert f"row {value} " in shown, (value, shown)
    # The keyboard moves the slider, and the picture follows.
    handle.focus()
    page.keyboard.press("End")
    page.wait_for_function(
        "() => document.querySelector('.widget-slider .noUi-handle')"
        ".getAttribute('aria-valuenow').startsWith('31')"
    )
    (last,) = page.evaluate(VISIBLE_FRAME)
    assert "row 31 " in last
    assert not errors and not blocked, (errors, blocked)
    context.close()


# ---- reading at every width ----------------------------------------------------------

MENU_PAGE = "notebooks/06_properties.html"


def _open(browser, origin, page_path: str, width: int):
    context = browser.new_context(viewport={"width": width, "height": 844})
    context.set_default_timeout(TIMEOUT_MS)
    page = context.new_page()
    blocked: list[str] = []
    _block_other_hosts(page, origin, blocked)
    page.goto(f"{origin}/{page_path}")
    page.evaluate(WAIT_FOR_RENDERING)
    return context, page, blocked


SIDEBAR_RIGHT = "() => document.getElementById('pst-primary-sidebar').getBoundingClientRect().right"


@pytest.mark.parametrize("width", [390, 900])
def test_the_chapter_menu_opens_on_phones_and_tablets_and_its_links_work(browser, origin, width):
    """Below 992 px the chapters' menu is a drawer that the page's one menu button opens
    (a second, hidden button once took the theme's handler and the menu never opened)."""
    context, page, blocked = _open(browser, origin, MENU_PAGE, width)
    toggle = page.locator(".primary-toggle")
    assert toggle.count() == 1, "one menu button, the one the theme's script binds"
    assert page.evaluate(SIDEBAR_RIGHT) <= 0, "the menu is closed at first"
    toggle.click()
    # The theme moves the menu into a modal dialog while it is open.
    assert page.evaluate("() => document.getElementById('pst-primary-sidebar-modal').open")
    link = page.locator('#pst-primary-sidebar-modal a[href="10_long_context.html"]')
    assert link.count() == 1, "chapter 10 listed once in the menu"
    link.click()
    page.wait_for_url("**/notebooks/10_long_context.html")
    assert "Stretching RoPE" in page.title()
    assert not blocked, blocked
    context.close()


def test_the_menu_button_hides_the_sidebar_on_a_desktop(browser, origin):
    context, page, _ = _open(browser, origin, MENU_PAGE, 1366)
    assert page.evaluate(SIDEBAR_RIGHT) > 200, "the sidebar shows beside the text"
    page.locator(".primary-toggle").click()
    page.wait_for_function(f"() => ({SIDEBAR_RIGHT})() <= 0")
    context.close()


def test_no_top_bar_repeats_the_search(visits, origin):
    """The theme's empty navbar (a second search box, 64 px on every page) is gone."""
    html = (HTML / MENU_PAGE).read_text(encoding="utf-8")
    header = re.search(r'<header id="pst-header"([^>]*)>(.*?)</header>', html, re.S)
    assert header and " hidden" in header.group(1) and not header.group(2).strip()
    assert html.count("search-button-field") == 1


PAGE_FITS = """() => ({
  page: document.documentElement.scrollWidth,
  screen: document.documentElement.clientWidth,
  outputs: Array.from(document.querySelectorAll('div.cell_output div.output pre'))
    .filter(p => p.scrollWidth > p.clientWidth + 1)
    .map(p => p.textContent.slice(0, 60)),
})"""


@pytest.fixture(scope="module")
def phone(browser):
    context = browser.new_context(viewport={"width": 390, "height": 844})
    context.set_default_timeout(TIMEOUT_MS)
    yield context
    context.close()


@pytest.mark.parametrize("page_path", PAGES)
def test_nothing_is_wider_than_a_phone(phone, origin, page_path):
    """At 390 px no page scrolls sideways: outputs wrap, long inline code breaks, wide
    equations and tables scroll inside their own box."""
    page = phone.new_page()
    _block_other_hosts(page, origin, [])
    page.goto(f"{origin}/{page_path}")
    page.evaluate(WAIT_FOR_RENDERING)
    fits = page.evaluate(PAGE_FITS)
    page.close()
    assert fits["page"] <= fits["screen"], f"{page_path} is {fits['page']} px wide at 390"
    assert not fits["outputs"], fits["outputs"]


@pytest.mark.parametrize("page_path", CHAPTERS)
def test_text_outputs_need_no_sideways_scroll_on_a_desktop(browser, origin, page_path):
    context, page, _ = _open(browser, origin, page_path, 1366)
    fits = page.evaluate(PAGE_FITS)
    context.close()
    assert not fits["outputs"], f"{page_path}: outputs wider than the column {fits['outputs']}"
