"""The one test fake behind the ``SearchStore`` port: paragraphs in a dict, exact cosine, word overlap."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterable, Sequence

import numpy as np

from ragbot.errors import RagbotError, StoreUnavailable
from ragbot.ports import Filters, PageWrite, SearchHit, StoredParagraph, Vector
from ragbot.schemas.pages import PageState

_WORD = re.compile(r"\w+")


def _words(text: str) -> set[str]:
    return set(_WORD.findall(text.lower()))


class MemoryStore:
    """Implements ``ragbot.ports.SearchStore`` in memory, recording what it is asked.

    ``pages`` holds each page's paragraphs; ``states`` holds page states set by a test for pages
    whose paragraphs it does not care about (``page_state``, ``list_pages`` and ``count`` read both).
    ``knn`` scores by exact cosine + 1, ``bm25`` by how many query words a paragraph's title and
    content share. Searches are logged in ``calls`` (``"bm25"``, ``"knn:<vector field>"``) and fail
    with ``StoreUnavailable`` while ``down``, or never return while ``hang``. A page in ``refuse``
    fails its write with that error; ``require_vectors`` asserts every paragraph written has vectors.
    """

    def __init__(
        self,
        paragraphs: Iterable[StoredParagraph] = (),
        *,
        down: bool = False,
        hang: bool = False,
        require_vectors: bool = False,
    ) -> None:
        self.pages: dict[int, list[StoredParagraph]] = {}
        for paragraph in paragraphs:
            self.pages.setdefault(paragraph.page_id, []).append(paragraph)
        self.states: dict[int, PageState] = {}
        self.refuse: dict[int, Exception] = {}
        self.down = down
        self.hang = hang
        self.require_vectors = require_vectors
        self.calls: list[str] = []
        self.writes: list[int] = []  # page ids written, in order
        self.batches: list[list[int]] = []  # page ids of each replace_pages call
        self.deleted: list[int] = []  # page ids asked to be deleted, in order
        self.ready_calls = 0
        self.closed = False

    @property
    def paragraphs(self) -> list[StoredParagraph]:
        """Every paragraph held, page by page."""
        return [p for paragraphs in self.pages.values() for p in paragraphs]

    async def ensure_ready(self) -> None:
        """Count the call; nothing to create."""
        self.ready_calls += 1

    async def ping(self) -> bool:
        """Up unless told to be down or to hang."""
        return not (self.down or self.hang)

    async def warm_up(self) -> None:
        """Nothing to load."""

    async def replace_page(
        self, *, page_id: int, revision_id: int, paragraphs: Sequence[StoredParagraph]
    ) -> None:
        """Hold the new paragraphs in place of the page's old ones, unless the page is refused."""
        if self.require_vectors:
            assert all(p.vectors for p in paragraphs)
        if page_id in self.refuse:
            raise self.refuse[page_id]
        self.states.pop(page_id, None)
        if paragraphs:
            self.pages[page_id] = list(paragraphs)
        else:
            self.pages.pop(page_id, None)
        self.writes.append(page_id)

    async def replace_pages(self, writes: Sequence[PageWrite]) -> dict[int, Exception]:
        """Each page as ``replace_page`` would; a refused page's error comes back, the others are held."""
        self.batches.append([w.page_id for w in writes])
        failed: dict[int, Exception] = {}
        for w in writes:
            try:
                await self.replace_page(page_id=w.page_id, revision_id=w.revision_id, paragraphs=w.paragraphs)
            except RagbotError as exc:
                failed[w.page_id] = exc
        return failed

    async def delete_page(self, *, page_id: int) -> int:
        """Drop the page's paragraphs and state; returns how many paragraphs went."""
        self.deleted.append(page_id)
        removed = len(self.pages.pop(page_id, []))
        state = self.states.pop(page_id, None)
        return removed + (state.paragraphs if state else 0)

    async def page_state(self, *, page_id: int) -> PageState | None:
        """The held paragraphs' revision and count, else the state a test set, else None."""
        paragraphs = self.pages.get(page_id)
        if paragraphs:
            revision_id = paragraphs[0].revision_id
            return PageState(page_id=page_id, revision_id=revision_id, paragraphs=len(paragraphs))
        return self.states.get(page_id)

    async def list_pages(self, *, limit: int = 100, offset: int = 0) -> list[PageState]:
        """Page states by ascending page id."""
        states = [await self.page_state(page_id=p) for p in sorted({*self.pages, *self.states})]
        return [s for s in states if s is not None][offset : offset + limit]

    async def page_revisions(self) -> dict[int, int]:
        """Every held page id with its revision."""
        return {
            s.page_id: s.revision_id for s in await self.list_pages(limit=len(self.pages) + len(self.states))
        }

    async def page_paragraphs(self, *, page_id: int) -> list[SearchHit]:
        """The page's paragraphs in paragraph order (score 0)."""
        paragraphs = sorted(self.pages.get(page_id, []), key=lambda p: p.paragraph)
        return [self._hit(p, 0.0) for p in paragraphs]

    async def knn(
        self, *, vector_field: str, vector: Vector, k: int, filters: Filters | None = None
    ) -> list[SearchHit]:
        """Top-k by exact cosine + 1."""
        await self._gate(f"knn:{vector_field}")
        scored = [
            (float(np.dot(p.vectors[vector_field], vector)) + 1.0, p)
            for p in self._filtered(filters)
            if vector_field in p.vectors
        ]
        scored.sort(key=lambda sp: sp[0], reverse=True)
        return [self._hit(p, s) for s, p in scored[:k]]

    async def bm25(
        self, *, query: str, k: int, fields: Sequence[str] | None = None, filters: Filters | None = None
    ) -> list[SearchHit]:
        """Top-k by the number of query words in a paragraph's title and content."""
        await self._gate("bm25")
        asked = _words(query)
        scored = []
        for p in self._filtered(filters):
            overlap = len(asked & _words(f"{p.fields.get('title', '')} {p.fields.get('content', '')}"))
            if overlap:
                scored.append((float(overlap), p))
        scored.sort(key=lambda sp: sp[0], reverse=True)
        return [self._hit(p, s) for s, p in scored[:k]]

    async def get(self, *, doc_ids: Sequence[str]) -> list[SearchHit]:
        """Paragraphs by id, in the order asked, missing ones left out."""
        by_id = {p.doc_id: p for p in self.paragraphs}
        return [self._hit(by_id[i], 0.0) for i in doc_ids if i in by_id]

    async def count(self) -> int:
        """Paragraphs held, plus those of the states a test set."""
        return len(self.paragraphs) + sum(s.paragraphs for s in self.states.values())

    async def close(self) -> None:
        """Remember it was closed."""
        self.closed = True

    async def _gate(self, what: str) -> None:
        self.calls.append(what)
        if self.down:
            raise StoreUnavailable("memory store is down")
        if self.hang:
            await asyncio.sleep(3600)

    def _filtered(self, filters: Filters | None) -> list[StoredParagraph]:
        if not filters:
            return self.paragraphs
        return [p for p in self.paragraphs if all(p.fields.get(k) == v for k, v in filters.items())]

    @staticmethod
    def _hit(p: StoredParagraph, score: float) -> SearchHit:
        source = {**p.fields, "page_id": p.page_id, "paragraph": p.paragraph, "revision_id": p.revision_id}
        return SearchHit(doc_id=p.doc_id, score=score, source=source)
