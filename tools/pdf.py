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
import io
import os
import sys
from pathlib import Path
from urllib.parse import urlsplit

from pypdf import PdfReader, PdfWriter
from pypdf.generic import ArrayObject, DictionaryObject, NameObject

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
}"""

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


def print_pages(html: Path, pages: list[str], browser_path: str) -> list[tuple[str, str, bytes]]:
    """Each page printed by the browser: (its path, its title, the PDF's bytes)."""
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
            page.evaluate(FOR_PRINT, site_address())
            title = page.title().split(" \u2014 ")[0]
            page.add_style_tag(content=PAGE_STYLE.format(title=_css_string(title), first=first))
            pdf = page.pdf(format="A4", print_background=True, prefer_css_page_size=True)
            printed.append((f"{entry}.html", title, pdf))
            first += len(PdfReader(io.BytesIO(pdf)).pages)
        browser.close()
    return printed


def join(printed: list[tuple[str, str, bytes]], out: Path) -> int:
    """Join the printed pages into ``out`` with a bookmark each, links to the book's own
    pages pointing into the PDF (to the page's start), and page labels that match the
    printed numbers; return the page count."""
    writer = PdfWriter()
    starts: dict[str, int] = {}
    for path, title, pdf in printed:
        starts[path] = len(writer.pages)
        writer.append(PdfReader(io.BytesIO(pdf)), outline_item=title)
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
    writer.set_page_label(0, len(writer.pages) - 1, style="/D", start=1)
    writer.add_metadata({"/Title": TITLE, "/Author": "The posenc book authors"})
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
