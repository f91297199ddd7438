"""The one test fake behind the ``PageSource`` port: pages and errors in dicts, fetches counted."""

from __future__ import annotations

from dataclasses import dataclass, field

from ragbot.schemas.pages import Page


@dataclass
class FakeSource:
    """Implements ``ragbot.ports.PageSource``: ``pages`` answers (None: left scope), ``errors`` raise."""

    pages: dict[int, Page | None] = field(default_factory=dict)
    errors: dict[int, Exception] = field(default_factory=dict)
    calls: int = 0

    async def fetch(self, *, page_id: int, callback_url: str) -> Page | None:
        """The page set for ``page_id``, or its error; a page nobody set is out of scope."""
        self.calls += 1
        if page_id in self.errors:
            raise self.errors[page_id]
        return self.pages.get(page_id)
