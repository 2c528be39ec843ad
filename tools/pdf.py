"""Print the built site into one PDF of the whole book.

``python -m tools.pdf`` (``make pdf``, and ``make book`` after the site) opens every
page of ``_toc.yml`` in reading order from ``_build/html``, served on localhost, in
Debian's Chromium (or the browser ``$CHROMIUM`` names) with every request to another
host blocked, waits for MathJax and the stored widgets, and prints it with the theme's
print stylesheet (no sidebars; book/_static/book.css adds what paper needs). The pages
are joined into ``_build/html/positional-encoding.pdf``, with one bookmark per page of
the toc and page numbers that run on through the book; the landing page links to it.
Links within a page, and links to another page of the book, lead within the PDF (to
that page's start); other links point to the published site, whose address follows
from ``repository.url`` in ``_config.yml``.

Without a browser it says so and writes nothing, unless ``CI`` is set: there the PDF
is part of the site, and a missing browser is an error.
"""

from __future__ import annotations

import argparse
import html
import io
import os
import sys
from pathlib import Path
from urllib.parse import urlsplit

from pypdf import PdfReader, PdfWriter
from pypdf.generic import ArrayObject, DictionaryObject, NameObject, TextStringObject

from tools.install_cell import repository_url
from tools.site_server import CHROMIUM_ARGS, WAIT_FOR_RENDERING, chromium_path, serve
from tools.toc import toc_entries

ROOT = Path(__file__).resolve().parent.parent
HTML = ROOT / "_build" / "html"
PDF_NAME = "positional-encoding.pdf"
TITLE = "Positional Encoding in Transformers"
TIMEOUT_MS = 120_000

# Links to another page of the site become links to the published pages (join() then
# turns those to pages of the book into links within the PDF); links within the page
# stay, and Chromium makes them links within the PDF. The theme's print-only title
# block is left out: the page's own numbered title follows it.
FOR_PRINT = """(site) => {
  for (const a of document.querySelectorAll('a[href]')) {
    const url = new URL(a.getAttribute('href'), location.href);
    if (url.origin !== location.origin) continue;
    if (url.pathname === location.pathname && url.hash) {
      a.setAttribute('href', url.hash);
    } else {
      a.setAttribute('href', site + url.pathname.replace(/^\\//, '') + url.hash);
    }
  }
  const title = document.getElementById('jb-print-docs-body');
  if (title) title.remove();
  // Solutions, other dropdowns and hidden cells print open; a figure is not a link.
  for (const d of document.querySelectorAll('details.sd-dropdown, details.hide')) {
    d.open = true;  // the text speaks of "the collapsed cell below": it is printed
  }
  for (const a of document.querySelectorAll('a.reference.image-reference, a:has(> img)')) {
    a.replaceWith(...a.childNodes);
  }
  for (const label of document.querySelectorAll('.jupyter-widgets .widget-label')) {
    label.remove();
  }
  // The headings' text, for the bookmarks (Chromium drops the space where one wraps).
  return Array.from(document.querySelectorAll(
    'article h1, article h2, article h3, article h4, article h5, article h6'))
    .map(h => h.textContent.replace(/[#\u00b6]/g, '').replace(/\\s+/g, ' ').trim());
}"""

# The first pages: the title, what the book is, and the contents with page numbers.
FRONT = """<!doctype html><html lang="en"><head><meta charset="utf-8"><style>
@page {{ size: A4; margin: 30mm 24mm; }}
body {{ font-family: "DejaVu Sans", sans-serif; color: #222; }}
h1 {{ font-size: 30pt; font-weight: 400; margin: 60mm 0 6mm; }}
.lead {{ font-size: 12pt; line-height: 1.5; max-width: 130mm; }}
.where {{ font-size: 9pt; color: #555; margin-top: 10mm; }}
h2 {{ font-size: 16pt; font-weight: 400; break-before: page; margin-top: 0; }}
ol {{ list-style: none; padding: 0; font-size: 10.5pt; line-height: 1.6; }}
li {{ display: flex; }}
li .dots {{ flex: 1; border-bottom: 1px dotted #999; margin: 0 2mm 1.3em; }}
</style></head><body>
<h1>{title}</h1>
<p class="lead">{lead}</p>
<p class="where">Printed from the book's site, {site}; each chapter is a notebook to
run there, on Binder or on Colab.</p>
<h2>Contents</h2>
<ol>{contents}</ol>
</body></html>"""
LEAD = (
    "How Transformers learn word order: from why attention alone cannot see it, "
    "through the sinusoidal encoding derived, implemented and tested, to the "
    "alternatives (learned tables, relative positions, RoPE, ALiBi and none), with "
    "every number computed by the code beside it and checked by an assertion."
)

# Page numbers run on through the book: each page of the toc is printed with its first
# page numbered after the last page printed before it, and its title at the foot.
PAGE_STYLE = """
@page {{
  margin: 16mm 14mm 18mm 14mm;
  @bottom-left {{ content: "{title}"; font-size: 8px; color: #555; }}
  @bottom-right {{ content: counter(page); font-size: 8px; color: #555; }}
}}
@page :first {{ counter-set: page {first}; }}
"""


def site_address() -> str:
    """The published site: ``https://OWNER.github.io/NAME/`` from ``repository.url``."""
    owner, name = [p for p in urlsplit(repository_url()).path.split("/") if p][:2]
    return f"https://{owner.lower()}.github.io/{name}/"


def _css_string(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


def print_pages(html: Path, pages: list[str], browser_path: str):
    """The front matter and each page printed by the browser, as (path, title, PDF
    bytes, the page's headings in order)."""
    from playwright.sync_api import sync_playwright

    printed = []
    first = 1
    with serve(html) as origin, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=browser_path, args=CHROMIUM_ARGS)
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        context.set_default_timeout(TIMEOUT_MS)
        context.route(
            "**/*",
            lambda r: (
                r.continue_()
                if r.request.url.startswith(origin + "/")
                else r.abort("blockedbyclient")
            ),
        )
        page = context.new_page()
        for entry in pages:
            page.goto(f"{origin}/{entry}.html", wait_until="load")
            page.evaluate(WAIT_FOR_RENDERING)
            headings = page.evaluate(FOR_PRINT, site_address())
            title = page.title().split(" \u2014 ")[0]
            page.add_style_tag(content=PAGE_STYLE.format(title=_css_string(title), first=first))
            pdf = page.pdf(
                format="A4",
                print_background=True,
                prefer_css_page_size=True,
                outline=True,
                tagged=True,
            )
            printed.append((f"{entry}.html", title, pdf, headings))
            first += len(PdfReader(io.BytesIO(pdf)).pages)
        page.set_content(front_matter([(title, pdf) for _, title, pdf, _ in printed]))
        front = page.pdf(format="A4", print_background=True, prefer_css_page_size=True)
        browser.close()
    return [("front", TITLE, front, []), *printed]


def front_matter(chapters: list[tuple[str, bytes]]) -> str:
    """The title page and the contents, each page of the toc with its first page."""
    entries, first = [], 1
    for title, pdf in chapters:
        entries.append(
            f'<li><span>{html.escape(title)}</span><span class="dots"></span>'
            f"<span>{first}</span></li>"
        )
        first += len(PdfReader(io.BytesIO(pdf)).pages)
    return FRONT.format(
        title=html.escape(TITLE), lead=LEAD, site=site_address(), contents="".join(entries)
    )


def _outline(reader: PdfReader, headings: list[str]) -> list[tuple[int, int, str]]:
    """The sections of one printed page as (depth, page index, title), depth 1 for the
    page's sections (its own title, depth 0, is left out: the page's bookmark is it).

    Chromium's outline, made from the headings, has the pages right but garbles some
    titles (a wrapped heading loses a space, maths drops out, a number repeats); the
    titles are taken from the page's headings, which come in the same order."""
    found: list[tuple[int, int, str]] = []

    def walk(items, depth):
        for item in items:
            if isinstance(item, list):
                walk(item, depth + 1)
            else:
                found.append((depth, reader.get_destination_page_number(item), item.title))

    walk(reader.outline, 0)
    if len(found) == len(headings):
        found = [(d, page, text) for (d, page, _), text in zip(found, headings, strict=True)]
    return [(d, page, title) for d, page, title in found if d > 0]


def join(printed, out: Path) -> int:
    """Join the printed pages into ``out``: the front matter, then each page of the toc
    with a bookmark (its sections below it), links to the book's own pages pointing into
    the PDF (to the page's start), and page labels that match the printed numbers
    (i, ii, ... before the book). Return the page count."""
    writer = PdfWriter()
    starts: dict[str, int] = {}
    for path, title, pdf, headings in printed:
        start = starts[path] = len(writer.pages)
        reader = PdfReader(io.BytesIO(pdf))
        writer.append(reader, import_outline=False)
        if path == "front":  # the title page and the contents: no bookmark of their own
            continue
        parents = [writer.add_outline_item(title=title, page_number=start)]
        for depth, page, section in _outline(reader, headings):
            del parents[depth:]
            parents.append(
                writer.add_outline_item(title=section, page_number=start + page, parent=parents[-1])
            )
    site = site_address()
    for page in writer.pages:
        for annotation in page.get("/Annots") or []:
            annotation = annotation.get_object()
            action = annotation.get("/A")
            uri = str(action.get("/URI", "")) if action is not None else ""
            target = uri.removeprefix(site).split("#")[0] if uri.startswith(site) else None
            if target in starts:
                annotation[NameObject("/A")] = DictionaryObject(
                    {
                        NameObject("/S"): NameObject("/GoTo"),
                        NameObject("/D"): ArrayObject(
                            [writer.pages[starts[target]].indirect_reference, NameObject("/Fit")]
                        ),
                    }
                )
    body = min((start for path, start in starts.items() if path != "front"), default=0)
    if body:  # the title page and the contents are i, ii, ...; the book starts at 1
        writer.set_page_label(0, body - 1, style="/r", start=1)
    writer.set_page_label(body, len(writer.pages) - 1, style="/D", start=1)
    writer.add_metadata({"/Title": TITLE, "/Author": "The posenc book authors"})
    writer.page_mode = "/UseOutlines"  # a reader opens with the bookmarks shown
    writer._root_object[NameObject("/Lang")] = TextStringObject("en")
    with out.open("wb") as handle:
        writer.write(handle)
    return len(writer.pages)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--html", type=Path, default=HTML, help="the built site")
    args = parser.parse_args(argv)
    if not (args.html / "index.html").exists():
        parser.error(f"{args.html} has no built site: run `make book` first")
    browser_path = chromium_path()
    if browser_path is None:
        message = "tools.pdf: no Chromium found (apt-get install chromium): no PDF written"
        print(message, file=sys.stderr)
        return 1 if os.environ.get("CI") else 0
    out = args.html / PDF_NAME
    pages = join(print_pages(args.html, toc_entries(), browser_path), out)
    print(f"wrote {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}: {pages} pages")
    return 0


if __name__ == "__main__":
    sys.exit(main())
