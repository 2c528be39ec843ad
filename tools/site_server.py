"""Serve a built site on localhost and find the browser that opens it.

Used by the browser tests (``tests/test_browser.py``) and by
``tools/readme_screenshot.py``. The browser is Debian's Chromium (``apt-get install
chromium``) or whatever ``$CHROMIUM`` names, driven by Playwright; no tool here ever
downloads a browser of its own.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

# Headless, as root, with none of Chromium's own background traffic.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


# A stored widget's view (a script the widget manager replaces) and a rendered top widget.
SELECTORS = """
  const VIEWS = 'script[type="application/vnd.jupyter.widget-view+json"]';
  const RENDERED = '.jupyter-widgets.widget-container, .jupyter-widgets.widget-box';
"""

# Run in a page once it has loaded: resolves when MathJax has typeset, the stored
# widgets have rendered (or 20 s have passed) and every image has loaded.
WAIT_FOR_RENDERING = (
    """async () => {"""
    + SELECTORS
    + """
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
    await MathJax.startup.promise;
  }
  const views = document.querySelectorAll(VIEWS);
  const start = Date.now();
  while (views.length && Date.now() - start < 20000) {
    if (document.querySelectorAll(RENDERED).length >= views.length) break;
    await new Promise(r => setTimeout(r, 100));
  }
  await Promise.all(Array.from(document.images).map(img => img.complete ? null :
    new Promise(r => { img.onload = img.onerror = r; })));
}"""
)


def chromium_path() -> str | None:
    """``$CHROMIUM``, else the ``chromium`` on PATH, else None."""
    return (
        os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    )


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@contextlib.contextmanager
def serve(directory: Path) -> Iterator[str]:
    """Serve ``directory`` on a free 127.0.0.1 port; yields the origin, ``http://127.0.0.1:N``."""
    server = ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(_Quiet, directory=str(directory))
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
