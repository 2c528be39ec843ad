"""The static site that `make book` writes (make test builds it before running pytest)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import nbformat
import pytest
from tools import install_cell
from tools.notebook_checks import WIDGET_STATE, WIDGET_VIEW, needs_a_kernel
from tools.pdf import PDF_NAME
from tools.site_server import chromium_path
from tools.toc import toc_entries

from conftest import NOTEBOOKS, ROOT, Elements, network_can_be_cut

HTML = ROOT / "_build" / "html"


def can_print() -> bool:
    """Whether `make book` could print the PDF here: a browser, or CI (which needs one)."""
    return chromium_path() is not None or bool(os.environ.get("CI"))


class Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.images: list[dict[str, str | None]] = []
        self.links: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        if tag == "img":
            self.images.append(attributes)
        if tag == "a" and attributes.get("href"):
            self.links.append(attributes["href"])

    def handle_data(self, data):
        self.text.append(data)


def read_page(relative: str) -> Page:
    path = HTML / relative
    if not path.exists():
        pytest.fail(f"{path.relative_to(ROOT)} is missing: build the site with `make book`")
    page = Page()
    page.feed(path.read_text(encoding="utf-8"))
    return page


def toc_pages() -> list[str]:
    return [f"{entry}.html" for entry in toc_entries()]


def test_index_and_every_toc_page_are_built():
    assert (HTML / "index.html").exists(), "run `make book` first"
    for page in toc_pages():
        assert (HTML / page).exists(), f"{page} was not built"


@pytest.mark.parametrize("page", toc_pages())
def test_pages_show_no_error_and_images_have_alt_text(page):
    parsed = read_page(page)
    text = " ".join(parsed.text)
    assert "Traceback (most recent call last)" not in text
    for image in parsed.images:
        assert image.get("alt"), f"{page}: image {image.get('src')} has no alt text"


@pytest.mark.parametrize("page", toc_pages())
def test_internal_links_resolve(page):
    parsed = read_page(page)
    base = (HTML / page).parent
    for href in parsed.links:
        if re.match(r"^[a-z]+:", href) or href.startswith("#"):
            continue
        target = (base / href.split("#")[0]).resolve()
        if target.name == PDF_NAME and not target.exists() and not can_print():
            continue  # no browser to print the PDF with here (tests/test_pdf.py says so)
        assert target.exists(), f"{page}: link {href} points nowhere"


def test_chapter_one_figure_has_caption_number_and_launch_buttons():
    page = read_page("notebooks/01_permutation_invariance.html")
    text = " ".join(" ".join(page.text).split())
    assert "Fig. 1.1" in text or "Figure 1.1" in text, "the figure is not numbered"
    assert "Attention weights of one self-attention head" in text
    figure_images = [i for i in page.images if "heatmap" in (i.get("alt") or "")]
    assert figure_images, "the attention heatmap is missing or lost its alt text"
    assert any("mybinder.org" in link for link in page.links), "no Binder launch button"
    assert any("colab.research.google.com" in link for link in page.links), "no Colab button"


def test_bibliography_lists_what_the_chapters_cite():
    text = " ".join(" ".join(read_page("book/bibliography.html").text).split()).lower()
    for title in ("attention is all you need", "deep sets", "set transformer"):
        assert title in text, f"the bibliography lacks {title!r}"


@pytest.mark.slow
def test_the_book_builds_strictly_with_no_network(tmp_path):
    """Build again in a network namespace that has only loopback (kernels need it).

    The build starts from the execution cache of `make book`, so it re-executes only
    what changed since; the notebooks themselves run with the network cut in the
    portability check (tests/test_portability.py).
    """
    if not network_can_be_cut():
        pytest.skip("`unshare -n` and `ip` are needed to build with the network cut")
    cache = ROOT / "_build" / ".jupyter_cache"
    if cache.is_dir():
        shutil.copytree(cache, tmp_path / "_build" / ".jupyter_cache")
    jupyter_book = Path(sys.executable).parent / "jupyter-book"
    command = (
        f'ip link set lo up && "{jupyter_book}" build . --builder html -n -W --keep-going '
        f'--path-output "{tmp_path}"'
    )
    result = subprocess.run(
        ["unshare", "-n", "sh", "-c", command],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    for page in toc_pages():
        assert (tmp_path / "_build" / "html" / page).exists(), page


CHAPTER_SIX = "notebooks/06_properties.html"


@pytest.mark.parametrize("page", toc_pages())
def test_no_page_shows_a_widget_that_needs_a_kernel(page):
    """An ipywidget on a static page cannot reach Python: a control that calls it would do nothing.

    Such widgets belong in cells whose output the site leaves out (tag ``remove-output``);
    the page may show a widget only when the browser alone runs it (passive parts and
    controls linked with ``jslink``, read from the state stored on the page). The widget
    manager comes from the site itself, never RequireJS or a CDN.
    """
    page_html = Elements((HTML / page).read_text(encoding="utf-8"))
    views = [json.loads(t) for a, t in page_html.scripts if a.get("type") == WIDGET_VIEW]
    states = [json.loads(t) for a, t in page_html.scripts if a.get("type") == WIDGET_STATE]
    state = states[0]["state"] if states else {}
    for view in views:
        assert view["model_id"] in state, f"{page}: a widget is shown without its state"
        problems = needs_a_kernel(state, view["model_id"])
        assert not problems, f"{page} shows a widget that needs a kernel: {problems}"
    sources = [a.get("src", "") for tag, a in page_html.tags if tag == "script"]
    assert not any("embed-amd" in s or "require" in s for s in sources), page
    if views:
        assert any("_static/vendor/jupyter-widgets/embed.js" in s for s in sources), sources


def test_chapter_six_offers_the_static_explorer():
    page = Elements((HTML / CHAPTER_SIX).read_text(encoding="utf-8"))
    assert len(page.with_class("posenc-explorer")) == 1, "chapter 6 should show one explorer"
    sliders = [a for tag, a in page.tags if tag == "input" and a.get("type") == "range"]
    assert [s["id"].rsplit("-", 1)[1] for s in sliders] == ["d_model", "base"]
    controls = page.with_class("posenc-controls")
    assert controls and all("hidden" in c for c in controls), "controls must wait for the script"
    (frames,) = [
        json.loads(text) for a, text in page.scripts if a.get("type") == "application/json"
    ]
    sizes = [int(s["max"]) + 1 for s in sliders]
    assert len(frames) == sizes[0] * sizes[1] == 16
    # The live explorer's code is on the page (for readers who launch a kernel).
    assert "Explorer(d_model=64" in "".join(read_page(CHAPTER_SIX).text)


CHAPTER_PAGES = [page for page in toc_pages() if page.startswith("notebooks/")]


def _section(text: str, section_id: str) -> str:
    """The HTML of the section with this id, up to the next section of the same level."""
    match = re.search(rf'<section id="{section_id}">(.*?)(?=<section id=|</article>)', text, re.S)
    assert match, f"no section {section_id!r}"
    return match.group(1)


@pytest.mark.parametrize("page", CHAPTER_PAGES)
def test_every_chapter_has_overview_exercises_with_hidden_solutions_and_whats_next(page):
    text = (HTML / page).read_text(encoding="utf-8")
    overview = _section(text, "overview") + _section(text, "prerequisites")
    assert "Time to learn" in overview, f"{page}: the overview gives no time to learn"
    exercises = _section(text, "exercises")
    solutions = re.findall(r"<details([^>]*)>\s*<summary[^>]*>(.*?)</summary>", exercises, re.S)
    solutions = [(attrs, summary) for attrs, summary in solutions if "Solution" in summary]
    assert solutions, f"{page}: exercises without solutions in a dropdown"
    assert all(" open" not in attrs for attrs, _ in solutions), f"{page}: a solution is shown"
    # What's next links onwards: the next chapter, or for the last one, back into the book.
    following = CHAPTER_PAGES[CHAPTER_PAGES.index(page) + 1 :]
    links = re.findall(r'href="([^"#]+\.html)', _section(text, "what-s-next"))
    targets = {
        f"notebooks/{link}" if "/" not in link else link.removeprefix("../") for link in links
    }
    if following:
        assert following[0] in targets, f"{page}: what's next does not link {following[0]}"
    else:
        assert targets, f"{page}: what's next links nowhere"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_the_install_cell_is_in_the_notebook_but_not_on_the_page(path):
    page = read_page(f"notebooks/{path.stem}.html")
    assert "invalidate_caches" not in " ".join(page.text)
    source = install_cell.first_code_cell(nbformat.read(path, as_version=4)).source
    assert "invalidate_caches" in source


# ---- the front door, the tab titles, the page descriptions ---------------------------

LANDING = "book/intro.html"


def test_the_landing_page_is_a_front_door():
    """Cover, who the book is for, a button to start, the PDF, reading paths, and no
    contents list repeating the sidebar."""
    text = (HTML / LANDING).read_text(encoding="utf-8")
    page = read_page(LANDING)
    covers = [i for i in page.images if "cover" in (i.get("src") or "")]
    assert covers and "sinusoidal positional encoding" in covers[0]["alt"]
    body = " ".join(" ".join(page.text).split())
    assert "This book is for readers who know Python" in body
    start = re.search(r'<a [^>]*href="([^"]+)"[^>]*>\s*<span>Start reading', text)
    assert start and start.group(1) == "../notebooks/01_permutation_invariance.html"
    assert "../positional-encoding.pdf" in page.links
    assert "RoPE in an afternoon" in body and "The whole story" in body
    article = text.split('<article class="bd-article">', 1)[1].split("</article>", 1)[0]
    listed = re.findall(r'class="toctree-wrapper[^"]*">\s*<(?!/div)', article)
    assert not listed, "the landing page repeats the contents list"


def test_tab_titles_name_each_page_once():
    title = re.compile(r"<title>(.*?)</title>")
    landing = title.search((HTML / LANDING).read_text(encoding="utf-8")).group(1)
    assert landing == "Positional Encoding in Transformers"
    chapter = title.search((HTML / "notebooks/06_properties.html").read_text()).group(1)
    assert (
        chapter == "6. Properties you can see and check &#8212; Positional Encoding in Transformers"
    )


META = re.compile(r'<meta (name|property)="([^"]+)" content="([^"]*)"')


@pytest.mark.parametrize("page", toc_pages())
def test_every_page_describes_itself_for_search_and_link_previews(page):
    tags = {key: value for _, key, value in META.findall((HTML / page).read_text("utf-8"))}
    description = tags.get("description", "")
    assert 80 <= len(description) <= 160, f"{page}: description {description!r}"
    assert "\\" not in description and not description.startswith("By the end"), description
    assert tags["og:description"] == description
    assert tags["og:url"] == f"https://posenc-book.github.io/positional-encoding/{page}"
    assert tags["og:image"].endswith("/_static/cover.png")
    assert (HTML / "_static" / "cover.png").exists()


def test_the_cover_is_what_its_script_draws():
    from tools import compare_outputs, cover

    difference = compare_outputs.picture_difference(cover.COVER.read_bytes(), cover.draw())
    assert difference <= compare_outputs.PIXEL_TOLERANCE, "run `python -m tools.cover`"


# ---- the bibliography ---------------------------------------------------------------

LABEL = re.compile(r'<span class="label"><span class="fn-bracket">\[</span>(.*?)<span')


def test_bibliography_labels_are_author_year_as_the_text_cites():
    html = (HTML / "book/bibliography.html").read_text(encoding="utf-8")
    labels = LABEL.findall(html)
    assert len(labels) == len(re.findall(r"^@", (ROOT / "book/references.bib").read_text(), re.M))
    for label in labels:
        assert re.fullmatch(r".+, (\d{4}|n\.d\.)(-?[a-z]+)?", label), label
    assert "Vaswani et al., 2017" in labels
    # By the first author's surname; entries sharing it follow the style's own order
    # (by full names: Zhang, Aston before Zhang, Biao, so "Zhang et al." first).
    names = [label.rsplit(", ", 1)[0].lower() for label in labels]
    surnames = [re.split(r" and | et al\.", name)[0] for name in names]
    assert surnames == sorted(surnames), "one alphabetical list, organisations among persons"
    text = " ".join(" ".join(read_page("book/bibliography.html").text).split())
    assert "Gpt-2" not in text, "a title was put in sentence case"
    assert not re.search(r"\b(\d{4}), \1\b", text), "a date repeats its year"


# ---- figures: sharp, and shown at the size they were drawn for ------------------------

FIGURE = re.compile(r'<img alt="[^"]*" src="\.\./_images/([0-9a-f]+\.png)" style="width: (\d+)px;"')


@pytest.mark.parametrize("page", CHAPTER_PAGES)
def test_figures_have_twice_the_pixels_of_their_shown_width(page):
    """Drawn at 200 dpi (notebooks/matplotlibrc), shown at the width of 100 dpi
    (book/_ext/figure_size.py): two image pixels per CSS pixel, sharp on a
    high-resolution screen and when zoomed on a phone."""
    from PIL import Image

    html = (HTML / page).read_text(encoding="utf-8")
    figures = FIGURE.findall(html)
    plain = re.findall(r'<img alt="[^"]*" src="\.\./_images/[0-9a-f]+\.png" />', html)
    assert not plain, f"{page}: a figure shown without its width"
    for name, shown in figures:
        with Image.open(HTML / "_images" / name) as image:
            assert image.width >= 1.9 * int(shown), (page, name, image.width, shown)
