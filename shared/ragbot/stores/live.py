"""``LiveStore``: a ``SearchStore`` that reads whichever index generation is live right now.

For processes that only read pages and need no models (ingest's page state): the pointer is looked
up at most every ``poll_s``; when it moved, the new generation's store is opened with that
generation's own definition and the old one is closed a little later (requests in flight finish).
The retriever, which also embeds queries, follows generations itself (``ragbot_retriever.generations``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping, Sequence

from ragbot.definition import DocumentDefinition
from ragbot.errors import RagbotError
from ragbot.ports import Filters, Generations, PageWrite, SearchHit, SearchStore, StoredParagraph, Vector
from ragbot.schemas.pages import PageState
from ragbot.settings import StoreSettings
from ragbot.stores.generations import OpenedGeneration, open_generation

CLOSE_AFTER_S = 30.0


class LiveStore:
    """Every ``SearchStore`` call goes to the live generation's store; see the module docstring."""

    def __init__(
        self,
        *,
        settings: StoreSettings,
        generations: Generations,
        configured: DocumentDefinition,
        configured_dimensions: Mapping[str, int] | None = None,
        poll_s: float = 2.0,
    ) -> None:
        self._settings = settings
        self._generations = generations
        self._configured = configured
        self._dimensions = dict(configured_dimensions or {})
        self._poll_s = poll_s
        self._opened: OpenedGeneration | None = None
        self._checked = -float("inf")
        self._lock = asyncio.Lock()
        self._retiring: set[asyncio.Task[None]] = set()

    async def current(self) -> SearchStore:
        """The live generation's store (the pointer re-read when ``poll_s`` has passed)."""
        if self._opened is not None and time.monotonic() - self._checked < self._poll_s:
            return self._opened.store
        async with self._lock:
            if self._opened is None or time.monotonic() - self._checked >= self._poll_s:
                live = await self._generations.live()
                self._checked = time.monotonic()
                if self._opened is None or self._opened.generation.generation_id != live.generation_id:
                    old, self._opened = (
                        self._opened,
                        open_generation(
                            settings=self._settings,
                            generation=live,
                            configured=self._configured,
                            configured_dimensions=self._dimensions,
                        ),
                    )
                    if old is not None:
                        task = asyncio.create_task(self._retire(old.store))
                        self._retiring.add(task)
                        task.add_done_callback(self._retiring.discard)
            assert self._opened is not None
            return self._opened.store

    @staticmethod
    async def _retire(store: SearchStore) -> None:
        await asyncio.sleep(CLOSE_AFTER_S)
        await store.close()

    async def ensure_ready(self) -> None:
        """Prepare the live generation's store."""
        await (await self.current()).ensure_ready()

    async def ping(self) -> bool:
        """True when the pointer and the live store answer."""
        try:
            return await (await self.current()).ping()
        except RagbotError:  # the pointer cannot be read: not ready
            return False

    async def warm_up(self) -> None:
        """Warm the live generation's store."""
        await (await self.current()).warm_up()

    async def replace_page(
        self, *, page_id: int, revision_id: int, paragraphs: Sequence[StoredParagraph]
    ) -> None:
        """Write to the live generation (writers normally use the worker's per-generation stores)."""
        store = await self.current()
        await store.replace_page(page_id=page_id, revision_id=revision_id, paragraphs=paragraphs)

    async def replace_pages(self, writes: Sequence[PageWrite]) -> dict[int, Exception]:
        """Write to the live generation."""
        return await (await self.current()).replace_pages(writes)

    async def delete_page(self, *, page_id: int) -> int:
        """Delete from the live generation."""
        return await (await self.current()).delete_page(page_id=page_id)

    async def page_state(self, *, page_id: int) -> PageState | None:
        """The page as the live generation holds it."""
        return await (await self.current()).page_state(page_id=page_id)

    async def list_pages(self, *, limit: int = 100, offset: int = 0) -> list[PageState]:
        """The live generation's pages."""
        return await (await self.current()).list_pages(limit=limit, offset=offset)

    async def page_revisions(self) -> dict[int, int]:
        """Every page of the live generation with its newest revision (what reconcile compares)."""
        return await (await self.current()).page_revisions()

    async def page_paragraphs(self, *, page_id: int) -> list[SearchHit]:
        """The page's paragraphs in the live generation."""
        return await (await self.current()).page_paragraphs(page_id=page_id)

    async def knn(
        self, *, vector_field: str, vector: Vector, k: int, filters: Filters | None = None
    ) -> list[SearchHit]:
        """kNN on the live generation (the vector must come from its definition's model)."""
        store = await self.current()
        return await store.knn(vector_field=vector_field, vector=vector, k=k, filters=filters)

    async def bm25(
        self, *, query: str, k: int, fields: Sequence[str] | None = None, filters: Filters | None = None
    ) -> list[SearchHit]:
        """BM25 on the live generation."""
        return await (await self.current()).bm25(query=query, k=k, fields=fields, filters=filters)

    async def get(self, *, doc_ids: Sequence[str]) -> list[SearchHit]:
        """Paragraphs by id from the live generation."""
        return await (await self.current()).get(doc_ids=doc_ids)

    async def count(self) -> int:
        """Paragraphs in the live generation."""
        return await (await self.current()).count()

    async def close(self) -> None:
        """Close the open store and the pointer's connections."""
        for task in list(self._retiring):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._opened is not None:
            await self._opened.store.close()
        await self._generations.close()
