"""Take the screenshot of the site that the README shows (book/assets/site.png).

Usage, after ``make book``::

    .venv/bin/python -m tools.readme_screenshot              # reads _build/html
    .venv/bin/python -m tools.readme_screenshot SITE_FOLDER  # another built site

It serves the built site on 127.0.0.1, opens one chapter in Chromium (driven by
Playwright, which never downloads a browser of its own here: the executable is
``$CHROMIUM`` or Debian's ``/usr/bin/chromium``), blocks every request to another
host, and saves what a 1280x800 window shows, reduced to a 256-colour palette so the
file stays small.
"""

from __future__ import annotations

import argparse
import io
import sys
import urllib.parse
from pathlib import Path

from PIL import Image

from tools.site_server import CHROMIUM_ARGS, chromium_path, serve

ROOT = Path(__file__).resolve().parent.parent
OUTPUT = ROOT / "book" / "assets" / "site.png"
PAGE = "notebooks/06_properties.html"
VIEWPORT = {"width": 1280, "height": 800}


def _local_only(route):
    """Let requests to the local server through and abort every other one."""
    if urllib.parse.urlsplit(route.request.url).hostname == "127.0.0.1":
        route.continue_()
    else:
        route.abort()


def screenshot(site: Path, page: str = PAGE) -> bytes:
    """The PNG of ``page`` of the built ``site`` as a 1280x800 window shows it."""
    from playwright.sync_api import sync_playwright

    executable = chromium_path()
    if executable is None:
        raise SystemExit("no Chromium found: `apt-get install chromium` or set CHROMIUM")
    with serve(site) as origin, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(viewport=VIEWPORT, color_scheme="light")
            tab = context.new_page()
            tab.route("**/*", _local_only)
            tab.goto(f"{origin}/{page}")
            tab.wait_for_load_state("networkidle")
            # MathJax typesets after the load event, and fonts may arrive late.
            tab.evaluate(
                "async () => { await window.MathJax?.startup?.promise;"
                " await document.fonts.ready; }"
            )
            return tab.screenshot(full_page=False)
        finally:
            browser.close()


def small_png(png: bytes) -> bytes:
    """The same picture with a 256-colour palette, compressed as far as PNG goes."""
    image = Image.open(io.BytesIO(png)).convert("RGB")
    quantized = image.quantize(
        colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE
    )
    out = io.BytesIO()
    quantized.save(out, format="PNG", optimize=True)
    return out.getvalue()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "site",
        nargs="?",
        type=Path,
        default=ROOT / "_build" / "html",
        help="the built site (default: _build/html)",
    )
    parser.add_argument("--page", default=PAGE, help=f"the page to show (default: {PAGE})")
    args = parser.parse_args(argv)
    if not (args.site / args.page).exists():
        print(
            f"{args.site / args.page} is missing: build the site with `make book`", file=sys.stderr
        )
        return 1
    OUTPUT.parent.mkdir(parents=True, exist_ok=True)
    OUTPUT.write_bytes(small_png(screenshot(args.site, args.page)))
    print(f"wrote {OUTPUT.relative_to(ROOT)} ({OUTPUT.stat().st_size // 1024} KB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
