"""The PDF of the whole book that `make book` prints (tools/pdf.py): it exists, opens,
has every page of the toc as a bookmark, embeds its fonts and carries the figures."""

from __future__ import annotations

import io
import os

import nbformat
import pytest
from PIL import Image
from pypdf import PdfReader
from tools import pdf
from tools.site_server import chromium_path
from tools.toc import toc_entries

from conftest import NOTEBOOKS, ROOT

PDF = ROOT / "_build" / "html" / pdf.PDF_NAME


@pytest.fixture(scope="module")
def reader() -> PdfReader:
    if not PDF.exists():
        if chromium_path() is None and not os.environ.get("CI"):
            pytest.skip("no Chromium to print the PDF with (apt-get install chromium)")
        pytest.fail(f"{PDF.relative_to(ROOT)} is missing: `make book` prints it")
    return PdfReader(PDF)


def _figures() -> int:
    """The pictures the chapters' cells show (each notebook output PNG)."""
    count = 0
    for path in NOTEBOOKS:
        for cell in nbformat.read(path, as_version=4).cells:
            if "remove-output" in cell.get("metadata", {}).get("tags", []):
                continue
            for output in cell.get("outputs", []):
                count += "image/png" in output.get("data", {})
    return count


def test_the_pdf_opens_with_a_bookmark_for_every_page_of_the_toc(reader):
    assert reader.metadata.title == pdf.TITLE
    titles = [item.title for item in reader.outline if not isinstance(item, list)]
    assert len(titles) == len(toc_entries())
    # Under each page's bookmark, its sections, titled as on the page (spaces kept).
    sections = [item for item in reader.outline if isinstance(item, list)]
    assert len(sections) >= 12  # every chapter has sections
    flat = [x.title for part in sections for x in _walk(part)]
    assert "6.2. The table as a picture" in flat
    assert "6.3. Moving by k positions is a rotation" in flat  # maths kept, as text
    assert not [t for t in flat if t.count(t[:4]) > 1], "a title repeats itself"
    assert titles[0] == pdf.TITLE and titles[1].startswith("1. Why order is invisible")
    assert titles[-1] == "Status"
    # Each chapter takes pages of its own: far more pages than pages of the toc.
    assert len(reader.pages) > 5 * len(titles)


def _walk(items):
    for item in items:
        yield from _walk(item) if isinstance(item, list) else [item]


def test_the_front_matter_lists_every_page_at_the_page_it_starts(reader):
    """The title page, then the contents: each page of the toc with the printed number
    of the page its bookmark leads to."""
    assert " ".join(reader.pages[0].extract_text().split()).startswith(pdf.TITLE)
    contents = " ".join(reader.pages[1].extract_text().split())
    assert contents.startswith("Contents")
    labels = reader.page_labels
    for item in reader.outline:
        if isinstance(item, list):
            continue
        start = labels[reader.get_destination_page_number(item)]
        assert f"{item.title} {start}" in contents, (item.title, start)


def test_every_font_is_embedded(reader):
    fonts = {}
    for page in reader.pages:
        for font in (page.get("/Resources") or {}).get("/Font", {}).values():
            font = font.get_object()
            fonts[id(font)] = font
    assert fonts
    for font in fonts.values():
        if font["/Subtype"] == "/Type3":  # glyphs drawn by the font's own procedures
            continue
        if "/DescendantFonts" in font:  # a composite font: the glyphs are its descendant's
            font = font["/DescendantFonts"][0].get_object()
        files = font["/FontDescriptor"].get_object()
        assert any(key in files for key in ("/FontFile", "/FontFile2", "/FontFile3")), font


def test_the_figures_are_in_it_sharp(reader):
    """At least as many pictures as the chapters have figures, the large ones at the
    resolution they were drawn at (2,000 pixels wide and more is 200 dpi's 10 inches)."""
    sizes = []
    for page in reader.pages:
        for image in page.images:
            with Image.open(io.BytesIO(image.data)) as picture:
                sizes.append(picture.size)
    figures = _figures()
    assert figures >= 30
    assert len(sizes) >= figures
    assert sum(width >= 1200 for width, _ in sizes) >= figures // 2


def test_a_missing_browser_is_an_error_only_under_ci(monkeypatch, tmp_path, capsys):
    (tmp_path / "index.html").write_text("<html></html>")
    monkeypatch.setattr(pdf, "chromium_path", lambda: None)
    monkeypatch.delenv("CI", raising=False)
    assert pdf.main(["--html", str(tmp_path)]) == 0
    monkeypatch.setenv("CI", "true")
    assert pdf.main(["--html", str(tmp_path)]) == 1
    assert "no Chromium" in capsys.readouterr().err
    assert not (tmp_path / pdf.PDF_NAME).exists()


def test_links_stay_in_the_pdf_and_pages_are_numbered_through(reader):
    """Links to the book's own pages lead within the PDF, the rest to the published
    site (never to the local server that printed it); the page labels run on."""
    site = pdf.site_address()
    assert site == "https://posenc-book.github.io/positional-encoding/"
    book_pages = {f"{entry}.html" for entry in toc_entries()}
    uris, within = [], 0
    for page in reader.pages:
        for annotation in page.get("/Annots") or []:
            action = annotation.get_object().get("/A") or {}
            if "/URI" in action:
                uris.append(str(action["/URI"]))
            elif action.get("/S") == "/GoTo" or "/Dest" in annotation.get_object():
                within += 1
    assert not [u for u in uris if "127.0.0.1" in u or u.startswith("file:")], uris[:5]
    into_the_book = [u for u in uris if u.removeprefix(site).split("#")[0] in book_pages]
    assert not into_the_book, into_the_book[:5]
    assert within > 100
    labels = reader.page_labels
    front = labels.index("1")  # the title page and the contents come first: i, ii
    assert labels[:front] == ["i", "ii"][:front] and front >= 1
    assert labels[-1] == str(len(reader.pages) - front)
