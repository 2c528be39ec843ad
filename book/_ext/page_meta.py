"""What a page says about itself to browsers, search engines and link previews.

- ``<meta name="description">``: the page's first paragraph, cut at a word near 160
  characters (search results show about that much).
- Open Graph and Twitter card tags (``og:title``, ``og:description``, ``og:url``,
  ``og:image``): a link shared in a chat or a post shows the title, the description and
  the book's cover. Addresses are absolute, on the published site, whose address
  follows from ``repository.url`` in ``_config.yml`` (``https://OWNER.github.io/NAME/``,
  the one place the repository is named).
"""

from __future__ import annotations

import html
import re
from urllib.parse import urlsplit

from docutils import nodes
from sphinx.application import Sphinx

DESCRIPTION_CHARS = 160
COVER = "_static/cover.png"


def site_address(repository_url: str) -> str | None:
    """``https://github.com/OWNER/NAME`` -> ``https://OWNER.github.io/NAME/``."""
    parts = urlsplit(repository_url)
    path = [p for p in parts.path.split("/") if p]
    if parts.netloc != "github.com" or len(path) != 2:
        return None
    owner, name = path
    return f"https://{owner.lower()}.github.io/{name}/"


def first_paragraph(doctree) -> str:
    """The text of the first paragraph of the page's body (not a caption, a table, a
    cell's output or a paragraph with maths in it), on one line, cut at a word before
    DESCRIPTION_CHARS."""
    skipped = (nodes.caption, nodes.table, nodes.admonition, nodes.literal_block)
    for paragraph in doctree.findall(nodes.paragraph):
        parent, inside = paragraph.parent, False
        while parent is not None:
            if isinstance(parent, skipped) or "cell_output" in parent.get("classes", []):
                inside = True
                break
            parent = parent.parent
        text = re.sub(r"\s+", " ", paragraph.astext()).strip()
        if inside or len(text) < 40 or any(paragraph.findall(nodes.math)):
            continue  # too short, or LaTeX that a search result would show raw
        if len(text) <= DESCRIPTION_CHARS:
            return text
        cut = text[: DESCRIPTION_CHARS - 1].rsplit(" ", 1)[0].rstrip(",;:")
        return cut + "…"
    return ""


def _add_meta(app: Sphinx, pagename: str, templatename: str, context: dict, doctree) -> None:
    project = html.unescape(context.get("docstitle") or app.config.html_title or "")
    title = html.unescape(re.sub(r"<[^>]+>", "", context.get("title") or ""))
    if doctree is None:
        return
    description = first_paragraph(doctree)
    theme = app.config.html_theme_options or {}
    site = site_address(theme.get("repository_url", ""))
    tags = []
    if description:
        tags.append(("name", "description", description))
        tags.append(("property", "og:description", description))
        tags.append(("name", "twitter:description", description))
    tags.append(("property", "og:title", title or project))
    tags.append(("property", "og:site_name", project))
    tags.append(("property", "og:type", "book" if pagename == app.config.root_doc else "article"))
    if site:
        tags.append(("property", "og:url", f"{site}{pagename}.html"))
        tags.append(("property", "og:image", site + COVER))
        tags.append(("name", "twitter:card", "summary_large_image"))
    context["metatags"] = context.get("metatags", "") + "".join(
        f'\n<meta {kind}="{key}" content="{html.escape(value, quote=True)}" />'
        for kind, key, value in tags
    )


def setup(app: Sphinx) -> dict:
    app.connect("html-page-context", _add_meta)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
