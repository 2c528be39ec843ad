"""Maintenance scripts of the book (not part of the posenc library)."""
