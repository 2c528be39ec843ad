"""Serve the site's scripts from the site itself, so the book reads the same offline.

MathJax and the Jupyter widget manager would otherwise be fetched by every reader's
browser from a CDN. This extension copies them, at build time, from the npm packages
that ``make book`` installs with ``npm ci`` (pinned in ``package-lock.json``) into
``_static/vendor/``. ``_config.yml`` points the pages at those copies:

- ``mathjax_path`` (Sphinx): ``vendor/mathjax/tex-mml-chtml.js``;
- ``nb_ipywidgets_js`` (MyST-NB): ``vendor/jupyter-widgets/embed.js``, the widget
  manager for the standard widgets, which needs no RequireJS and loads no module
  from elsewhere. MyST-NB adds it only to pages that store widget state.

The build fails, before any notebook runs, if a package is missing or the
configuration points at a file that neither this extension copies nor the book's
``html_static_path`` holds.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from sphinx.application import Sphinx
from sphinx.errors import ExtensionError

ROOT = Path(__file__).resolve().parents[2]
NODE_MODULES = ROOT / "node_modules"
VENDOR = "vendor"

# (package folder under node_modules, what to copy from it, folder under _static/vendor)
ASSETS = (
    (
        "mathjax/es5",
        (
            "tex-mml-chtml.js",  # TeX and MathML in, CommonHTML out, with the menu
            "input",  # TeX extensions that \require or autoload brings in
            "output/chtml.js",
            "output/chtml",  # the fonts
            "ui",  # the right-click menu's parts
            "a11y",  # the accessibility tools the menu can switch on
            "sre",  # the speech rule engine those tools use
            "adaptors",
            "../LICENSE",
            "../package.json",  # the version served
        ),
        "mathjax",
    ),
    (
        "@jupyter-widgets/html-manager",
        (
            "dist/embed.js",
            "dist/embed.js.LICENSE.txt",  # the licences of what embed.js bundles
            "dist/*.woff2",  # the icon and text fonts its stylesheet names
            "dist/*.woff",
            "dist/*.ttf",
            "dist/*.eot",
            "package.json",  # the version served and its licence (BSD-3-Clause)
        ),
        "jupyter-widgets",
    ),
)
MATHJAX = f"{VENDOR}/mathjax/tex-mml-chtml.js"
WIDGETS = f"{VENDOR}/jupyter-widgets/embed.js"


def _sources(package: str, patterns: tuple[str, ...]) -> list[tuple[Path, Path]]:
    """(source, path relative to the package's vendor folder) for every file to copy."""
    base = NODE_MODULES / package
    if not base.is_dir():
        raise ExtensionError(
            f"{base.relative_to(ROOT)} is missing: run `make book` (it installs the site's "
            "scripts with `npm ci`) or `npm ci` in the project's root"
        )
    pairs = []
    for pattern in patterns:
        matches = sorted(base.glob(pattern)) if "*" in pattern else [base / pattern]
        if not matches or not all(m.exists() for m in matches):
            raise ExtensionError(f"{package}: nothing matches {pattern!r}")
        for match in matches:
            files = (
                sorted(p for p in match.rglob("*") if p.is_file()) if match.is_dir() else [match]
            )
            for file in files:
                relative = Path(file.name) if pattern.startswith("..") else file.relative_to(base)
                if pattern.startswith("dist/"):
                    relative = relative.relative_to("dist")
                pairs.append((file, relative))
    return pairs


def _served() -> set[str]:
    """Every path, relative to _static, that the build copies."""
    return {
        f"{VENDOR}/{folder}/{relative.as_posix()}"
        for package, patterns, folder in ASSETS
        for _, relative in _sources(package, patterns)
    }


def _check(app: Sphinx, config) -> None:
    served = _served()
    wanted = [config.mathjax_path, *config.nb_ipywidgets_js]
    own = [Path(app.confdir, folder) for folder in config.html_static_path]
    for path in wanted:
        if path not in served and not any((folder / path).is_file() for folder in own):
            raise ExtensionError(
                f"_config.yml asks the pages to load {path!r}, which the site does not serve "
                f"(offline_assets copies {MATHJAX!r} and {WIDGETS!r}; the book's own scripts "
                "live in html_static_path)"
            )


def _copy(app: Sphinx, exception: Exception | None) -> None:
    if exception is not None or app.builder.format != "html":
        return
    static = Path(app.outdir) / "_static" / VENDOR
    for package, patterns, folder in ASSETS:
        for source, relative in _sources(package, patterns):
            target = static / folder / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)


def setup(app: Sphinx) -> dict:
    app.connect("config-inited", _check)
    app.connect("build-finished", _copy)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
