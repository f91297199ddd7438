"""The Kol-Zchut question sets held out whole, each written blind and read once (docs/benchmarks.md)."""

from __future__ import annotations

# In the order they were read; a new set is added here once its check has run.
WHOLE_SETS: tuple[str, ...] = ("fresh", *(f"fresh{n}" for n in range(3, 61)))


def set_file(name: str) -> str:
    """A whole set's question file, relative to the repository root."""
    return f"samples/kolzchut/abstention_questions_{name}.json"
