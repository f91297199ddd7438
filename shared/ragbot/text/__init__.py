"""Text analysis shared by every store, so BM25 sees the same tokens on Elasticsearch and SQLite."""

from __future__ import annotations

from ragbot.text.analyzer import HEBREW_PREFIX_LETTERS, MAX_PREFIX_LETTERS, MIN_STEM_LETTERS, analyze

__all__ = ["HEBREW_PREFIX_LETTERS", "MAX_PREFIX_LETTERS", "MIN_STEM_LETTERS", "analyze"]
