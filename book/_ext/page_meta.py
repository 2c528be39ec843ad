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


# LaTeX that a description can show as text; anything else keeps its paragraph out.
_SYMBOLS = {
    r"\pi": "π", r"\omega": "ω", r"\theta": "θ", r"\cdot": "·", r"\times": "×",
    r"\le": "≤", r"\ge": "≥", r"\approx": "≈", r"\infty": "∞", r"\,": " ",
}


def _plain_math(latex: str) -> str | None:
    """Inline LaTeX as plain text where it is simple (``k``, ``2\\pi \\cdot 10000``,
    ``d_\\text{model}``), else None."""
    text = re.sub(r"\\(?:text|mathrm|operatorname)\{([^{}]*)\}", r"\1", latex)
    for command, symbol in _SYMBOLS.items():
        text = text.replace(command, symbol)
    text = re.sub(r"[_^]\{([^{}]*)\}", r"\1", text).replace("_", "").replace("^", "")
    if "\\" in text or "{" in text:
        return None
    return re.sub(r"\s+", " ", text).strip()


def _text(paragraph) -> str | None:
    """A paragraph's text with its simple maths written out, or None."""
    parts = []
    for node in paragraph.findall(lambda n: isinstance(n, (nodes.Text, nodes.math))):
        if isinstance(node, nodes.math):
            plain = _plain_math(node.astext())
            if plain is None:
                return None
            parts.append(plain)
        elif not any(isinstance(a, nodes.math) for a in _ancestors(node, paragraph)):
            parts.append(str(node))
    return re.sub(r"\s+", " ", "".join(parts)).strip()


def _ancestors(node, stop):
    node = node.parent
    while node is not None and node is not stop:
        yield node
        node = node.parent


def first_paragraph(doctree) -> str:
    """The text of the page's first paragraph of prose (of a section itself, at least 80
    characters, its maths simple enough to write as text), on one line, cut at a word
    before DESCRIPTION_CHARS."""
    for paragraph in doctree.findall(nodes.paragraph):
        # The page's own prose: a paragraph of a section, not of a list, a table, a
        # caption, a cell's output, a glossary or a bibliography entry.
        if not isinstance(paragraph.parent, nodes.section):
            continue
        text = _text(paragraph)
        if text is None or len(text) < 80 or text[:1].islower():
            continue  # raw LaTeX, a lead-in ("By the end ..."), a sentence's second half
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
