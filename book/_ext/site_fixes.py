"""Small corrections to the HTML the theme and extensions write, found by the browser tests.

``tests/test_browser.py`` opens every page in Chromium and runs axe-core on it. What it
found in the pinned versions of the theme and extensions is corrected here, each fix
with the rule it answers:

- sphinx-thebe declares its settings (``const THEBE_JS_URL = ...``) in an inline
  script that reaches each page twice (so does sphinx-togglebutton's selector); the
  second ``const`` is a SyntaxError in the console. Repeated scripts are dropped.
- axe ``label-content-name-mismatch`` (WCAG 2.5.3, serious): a control's accessible
  name must contain the text it shows.

  - The search field shows "Search Ctrl+K" but is named "Search": the label goes,
    and the visible text names it.
  - The colour-mode button is named "Color mode", but its three icons carry titles
    ("Light", "Dark", "System Settings") that become visible text: the icons lose
    their titles and are decoration inside a named button.
  - A hidden cell's toggle shows "Show code cell source" but is named "Toggle
    hidden content": the label goes.

- The status page marks each chapter with the emoji \u2705, which the print fonts lack
  (a missing-glyph box in the PDF): it becomes a check mark, \u2713, named for screen
  readers.
- axe ``aria-required-children`` (critical) and ``aria-deprecated-role``: the
  bibliography is a ``role="list"`` whose entries have the deprecated role
  ``doc-biblioentry``; they become ``listitem``.

The fixes are applied to each page as it is rendered. When a build writes every page,
every fix must have applied somewhere: one that no longer matches anything (a theme
upgrade changed the markup) fails the build, so the list stays true.
"""

from __future__ import annotations

import re

from sphinx.application import Sphinx
from sphinx.errors import ExtensionError

# (what it answers, pattern, replacement)
FIXES = (
    (
        "search field named by its visible text",
        re.compile(
            r'(<button class="btn search-button-field [^"]*" title="Search") aria-label="Search"'
        ),
        r"\1",
    ),
    (
        "colour-mode icons are decoration",
        re.compile(r'(<i class="theme-switch [^"]*" data-mode="[a-z]+")\s+title="[^"]*"'),
        r"\1",
    ),
    (
        "cell toggles named by their visible text",
        re.compile(r'<summary aria-label="Toggle hidden content">'),
        "<summary>",
    ),
    (
        "status marks in a font every reader and printer has",
        re.compile(r"<td><p>\u2705</p></td>"),
        '<td><p><span role="img" aria-label="succeeded">\u2713</span></p></td>',
    ),
    (
        "bibliography entries are list items",
        re.compile(r'(<div class="citation" id="[^"]+") role="doc-biblioentry"'),
        r'\1 role="listitem"',
    ),
)


def drop_repeated_scripts(context: dict) -> None:
    scripts = context.get("script_files")
    if not scripts:
        return
    seen, kept = set(), []
    for script in scripts:
        # The same file or inline body, whatever priority each copy was given (an
        # inline script's filename is None from one extension and "" from another).
        key = (
            str(getattr(script, "filename", script) or ""),
            tuple(sorted(getattr(script, "attributes", {}).items())),
        )
        if key not in seen:
            seen.add(key)
            kept.append(script)
    context["script_files"] = kept


def fix_text(text: str, counts: dict[str, int]) -> str:
    for name, pattern, replacement in FIXES:
        text, n = pattern.subn(replacement, text)
        counts[name] = counts.get(name, 0) + n
    return text


def _wrap_rendering(app: Sphinx) -> None:
    if app.builder.format != "html":
        return
    render = app.builder.templates.render
    counts: dict[str, int] = {}
    app.site_fix_counts = counts
    app.site_fix_pages = set()

    def render_fixed(template: str, context: dict) -> str:
        app.site_fix_pages.add(context.get("pagename"))
        # Here, just before the template runs: extensions add scripts until then.
        drop_repeated_scripts(context)
        return fix_text(render(template, context), counts)

    app.builder.templates.render = render_fixed


def _check_all_applied(app: Sphinx, exception: Exception | None) -> None:
    counts = getattr(app, "site_fix_counts", None)
    if exception is not None or counts is None or not app.env.found_docs <= app.site_fix_pages:
        return
    unused = [name for name, _, _ in FIXES if counts.get(name, 0) == 0]
    if unused:
        raise ExtensionError(f"site_fixes: these fixes matched nothing, update them: {unused}")


def setup(app: Sphinx) -> dict:
    app.connect("builder-inited", _wrap_rendering)
    app.connect("build-finished", _check_all_applied)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
