"""The bibliography's style: author-year labels, as the text cites, and titles as written.

pybtex's standard styles give the entries alphabetic labels ("[AYH+24]", "[Pre]") while
the chapters cite author-year ("Vaswani et al. (2017)"), and they put article titles in
sentence case, which lowercases names that were not braced ("Gpt-2: src/model.py").
The book's style, ``book``, labels each entry "Vaswani et al., 2017" (a, b, ... where
two entries would share a label), sorts by author, year and title as printed (an
organisation's name among the persons'), and keeps every title as the .bib file
writes it. ``_config.yml`` selects it with ``bibtex_default_style``.
"""

from __future__ import annotations

import re
from collections import Counter
from string import ascii_lowercase

from pybtex.plugin import register_plugin
from pybtex.style.formatting.unsrt import Style as UnsrtStyle
from pybtex.style.labels import BaseLabelStyle
from pybtex.style.sorting.author_year_title import SortingStyle as AuthorYearTitleSorting
from pybtex.style.template import field, sentence
from sphinx.application import Sphinx

_BRACES = re.compile(r"[{}]")


def _surname(person) -> str:
    """A person's last name as printed (an organisation's whole braced name)."""
    names = person.prelast_names + person.last_names
    return _BRACES.sub("", " ".join(names)) or _BRACES.sub("", " ".join(person.first_names))


def _authors(entry) -> str:
    persons = entry.persons.get("author") or entry.persons.get("editor") or []
    names = [_surname(p) for p in persons]
    if not names:
        return _BRACES.sub("", entry.fields.get("organization", "Anonymous"))
    if len(names) == 1:
        return names[0]
    if len(names) == 2:
        return f"{names[0]} and {names[1]}"
    return f"{names[0]} et al."


def _suffix(index: int) -> str:
    """a, b, ..., z, aa, ab, ...: the letters of the index-th of several equal labels."""
    letters = ""
    index += 1
    while index:
        index, rest = divmod(index - 1, 26)
        letters = ascii_lowercase[rest] + letters
    return letters


class AuthorYearLabels(BaseLabelStyle):
    """'Surname Year', 'A and B Year', 'A et al. Year'; letters tell equal labels apart."""

    def format_labels(self, sorted_entries):
        entries = list(sorted_entries)
        labels = [self.format_label(entry) for entry in entries]
        repeated = Counter(labels)
        seen: Counter = Counter()
        for label in labels:
            if repeated[label] > 1:
                letter = _suffix(seen[label])
                yield label + ("-" if label.endswith(".") else "") + letter
                seen[label] += 1
            else:
                yield label

    def format_label(self, entry) -> str:
        return f"{_authors(entry)}, {entry.fields.get('year', 'n.d.')}"


class AuthorYearTitleOrder(AuthorYearTitleSorting):
    """By author, year and title, as printed: an organisation's braced name sorts by its
    letters, not after every person (a brace sorts after z), and case does not count."""

    def persons_key(self, persons):
        return [_surname(person).lower() for person in persons]

    def sorting_key(self, entry):
        author = entry.persons.get("author") or entry.persons.get("editor") or []
        return (
            self.persons_key(author),
            entry.fields.get("year", ""),
            _BRACES.sub("", entry.fields.get("title", "")).lower(),
        )


class BookStyle(UnsrtStyle):
    """unsrt's entries, with author-year labels and order, and titles kept as written."""

    default_label_style = "authoryear"
    default_sorting_style = "book_order"

    def format_title(self, e, which_field, as_sentence=True):
        title = field(which_field)
        return sentence[title] if as_sentence else title


def setup(app: Sphinx) -> dict:
    register_plugin("pybtex.style.labels", "authoryear", AuthorYearLabels)
    register_plugin("pybtex.style.sorting", "book_order", AuthorYearTitleOrder)
    register_plugin("pybtex.style.formatting", "book", BookStyle)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
