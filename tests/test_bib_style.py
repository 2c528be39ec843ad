"""The bibliography's author-year labels stay distinct however many share a label."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "book" / "_ext"))

from bib_style import _suffix


def test_equal_labels_get_letters_past_z():
    letters = [_suffix(i) for i in range(800)]
    assert letters[:3] == ["a", "b", "c"] and letters[25] == "z"
    assert letters[26:29] == ["aa", "ab", "ac"] and letters[701:703] == ["zz", "aaa"]
    assert len(set(letters)) == len(letters)
