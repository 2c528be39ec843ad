"""Print the built site into one PDF of the whole book.

``python -m tools.pdf`` (``make pdf``, and ``make book`` after the site) opens every
page of ``_toc.yml`` in reading order from ``_build/html``, served on localhost, in
Debian's Chromium (or the browser ``$CHROMIUM`` names) with every request to another
host blocked, waits for MathJax and the stored widgets, and prints it with the theme's
print stylesheet (no sidebars). The pages are joined into
``_build/html/positional-encoding.pdf``, with one bookmark per page of the toc; the
landing page links to it. Links between pages point to the published site, whose
address follows from ``repository.url`` in ``_config.yml``.

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

from tools.install_cell import repository_url
from tools.site_server import CHROMIUM_ARGS, WAIT_FOR_RENDERING, chromium_path, serve
from tools.toc import toc_entries

ROOT = Path(__file__).resolve().parent.parent
HTML = ROOT / "_build" / "html"
PDF_NAME = "positional-encoding.pdf"
TITLE = "Positional Encoding in Transformers"
TIMEOUT_MS = 120_000

# Links inside the site become links to the published pages; the title block the theme
# prints at the top of every page lists that page's sections, which the bookmarks do.
FOR_PRINT = """(site) => {
  for (const a of document.querySelectorAll('a[href]')) {
    const url = new URL(a.getAttribute('href'), location.href);
    if (url.origin === location.origin) {
      a.setAttribute('href', site + url.pathname.replace(/^\\//, '') + url.hash);
    }
  }
  const toc = document.getElementById('jb-print-toc');
  if (toc) toc.remove();
}"""

FOOTER = (
    '<div style="font-size:8px;width:100%;padding:0 12mm;display:flex;'
    'justify-content:space-between;color:#555"><span class="title"></span>'
    '<span><span class="pageNumber"></span> / <span class="totalPages"></span></span></div>'
)


def site_address() -> str:
    """The published site: ``https://OWNER.github.io/NAME/`` from ``repository.url``."""
    owner, name = [p for p in urlsplit(repository_url()).path.split("/") if p][:2]
    return f"https://{owner.lower()}.github.io/{name}/"


def print_pages(html: Path, pages: list[str], browser_path: str) -> list[tuple[str, bytes]]:
    """Each page printed by the browser: (its title, the PDF's bytes)."""
    from playwright.sync_api import sync_playwright

    printed = []
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
            pdf = page.pdf(
                format="A4",
                print_background=True,
                margin={"top": "16mm", "bottom": "18mm", "left": "14mm", "right": "14mm"},
                display_header_footer=True,
                header_template="<span></span>",
                footer_template=FOOTER,
            )
            printed.append((title, pdf))
        browser.close()
    return printed


def join(printed: list[tuple[str, bytes]], out: Path) -> int:
    """Join the printed pages into ``out`` with a bookmark each; return the page count."""
    writer = PdfWriter()
    for title, pdf in printed:
        writer.append(PdfReader(io.BytesIO(pdf)), outline_item=title)
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
