"""The one indexing pipeline: split, optional contextual text, embed in shared batches, write, hooks.

Every path that puts paragraphs into a store goes through ``IndexingPipeline``: the embedder
worker (wiki pings, pushes, uploads, bulk reindex), ``ragbot index`` (a folder of files),
``ragbot eval`` (a BEIR corpus), the kolzchut-ragbot drop-in (``update_docs``) and the benches. So
what ``ragbot eval`` measures is what production stores: the same ``SplitOptions`` (one default),
the same fields, the same embedding calls.

Stages, for a list of pages:

1. **split** every page first (``prepare_paragraphs``: paragraphs, saved and core fields);
2. cut the pages into groups of at most ``batch_max_paragraphs`` paragraphs (``group_by_size``);
3. per group, **contextual text** (``Contextualizer``, optional: prepended to the embedded text only)
   and **embed** the group's distinct texts per (model, field) in shared calls, in a thread;
4. **write** the group with one ``SearchStore.replace_pages`` (atomic per page) while the next
   group is embedded, so the store's round trips overlap the model's work;
5. after each page is written, the caller's ``IndexingHooks.written`` (job record, metrics, events,
   a manifest line, a progress bar).

A page the store refuses goes into ``failed`` when the caller passes it (a batch reports the rest
as written); without it, the first refusal is raised once every group is written. A store that is
down (``DependencyUnavailable``) raises at once. Pages that arrive already split (the drop-in's
documents, a bench's synthetic vectors) enter at stage 3 through ``write_paragraphs``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field

from ragbot.definition import DocumentDefinition
from ragbot.errors import DependencyUnavailable
from ragbot.indexing.contextual import Contextualizer
from ragbot.indexing.embed import (
    EMBED_CALL_TEXTS,
    embed_prepared,
    group_by_size,
    prepare_paragraphs,
    release_memory,
)
from ragbot.indexing.paragraphs import DEFAULT_LINK_TARGETS, DEFAULT_PARAGRAPH_TOKENS, LinkTargets, Strategy
from ragbot.ports import Embedder, PageWrite, SearchStore, StoredParagraph
from ragbot.schemas.pages import Page

__all__ = [
    "ALL_VECTORS",
    "DEFAULT_BATCH_PARAGRAPHS",
    "NO_VECTORS",
    "IndexingHooks",
    "IndexingPipeline",
    "SplitOptions",
    "VectorSelection",
    "write_page",
]

# Most paragraphs embedded together per (model, field) before a group is written.
DEFAULT_BATCH_PARAGRAPHS = 512

# Which vector fields (by name) to embed for one paragraph; the rest keep what the caller set.
VectorSelection = Callable[[StoredParagraph], Collection[str] | None]


def ALL_VECTORS(_: StoredParagraph) -> None:
    """Embed every vector field of the definition (``None`` means all)."""
    return None


def NO_VECTORS(_: StoredParagraph) -> Collection[str]:
    """Embed nothing: the caller's vectors are written as they are."""
    return ()


@dataclass(frozen=True, slots=True)
class SplitOptions:
    """How a page becomes paragraphs, with the one default every caller shares.

    ``link_targets`` defaults to ``drop`` (a Markdown link keeps its text, loses its target): that is
    what the worker has always stored, link targets are about 45% of the characters of Kol-Zchut's
    pages, and what ``ragbot eval`` and ``ragbot index`` store must be what production stores.
    """

    strategy: Strategy = "structure"
    max_tokens: int = DEFAULT_PARAGRAPH_TOKENS
    link_targets: LinkTargets = DEFAULT_LINK_TARGETS


class IndexingHooks:
    """What a caller does around the pipeline's stages; every hook here does nothing."""

    def embedded(self, seconds: float) -> None:
        """A group was split (first group only) and embedded in ``seconds``."""

    async def written(self, page: Page, paragraphs: int) -> None:
        """``page`` is in the store with ``paragraphs`` paragraphs."""


_NO_HOOKS = IndexingHooks()


@dataclass(slots=True)
class IndexingPipeline:
    """The adapters and options of one indexing path; ``index`` runs pages through every stage."""

    definition: DocumentDefinition
    embedders: Mapping[str, Embedder]
    split: SplitOptions = field(default_factory=SplitOptions)
    contextualizer: Contextualizer | None = None
    batch_max_paragraphs: int = DEFAULT_BATCH_PARAGRAPHS

    def prepare(self, page: Page) -> list[StoredParagraph]:
        """Stage 1 for one page: its paragraphs with saved and core fields, not yet embedded."""
        return prepare_paragraphs(
            page,
            definition=self.definition,
            embedders=self.embedders,
            max_tokens=self.split.max_tokens,
            strategy=self.split.strategy,
            link_targets=self.split.link_targets,
        )

    async def index(
        self,
        pages: Sequence[Page],
        *,
        store: SearchStore,
        hooks: IndexingHooks = _NO_HOOKS,
        failed: dict[int, Exception] | None = None,
    ) -> list[int]:
        """Split, (contextualise), embed in shared batches and write ``pages``; paragraphs per page."""
        started = time.perf_counter()
        prepared = [self.prepare(page) for page in pages]
        writes = [
            PageWrite(p.page_id, p.revision_id, paragraphs)
            for p, paragraphs in zip(pages, prepared, strict=True)
        ]
        return await self._embed_and_write(
            writes, pages=pages, store=store, hooks=hooks, failed=failed, select=ALL_VECTORS, started=started
        )

    async def write_paragraphs(
        self,
        writes: Sequence[PageWrite],
        *,
        store: SearchStore,
        select: VectorSelection = ALL_VECTORS,
        failed: dict[int, Exception] | None = None,
    ) -> list[int]:
        """Stages 3 to 5 for pages already split by the caller; ``select`` says what to embed."""
        return await self._embed_and_write(
            writes,
            pages=None,
            store=store,
            hooks=_NO_HOOKS,
            failed=failed,
            select=select,
            started=time.perf_counter(),
        )

    async def _embed_and_write(
        self,
        writes: Sequence[PageWrite],
        *,
        pages: Sequence[Page] | None,
        store: SearchStore,
        hooks: IndexingHooks,
        failed: dict[int, Exception] | None,
        select: VectorSelection,
        started: float,
    ) -> list[int]:
        paragraphs = [list(w.paragraphs) for w in writes]
        counts = [len(p) for p in paragraphs]
        refused: dict[int, Exception] = {}

        async def write(group: Sequence[int]) -> None:
            batch = [PageWrite(writes[i].page_id, writes[i].revision_id, paragraphs[i]) for i in group]
            errors = await store.replace_pages(batch)
            for i in group:
                paragraphs[i] = []  # the vectors are written (or refused): let them go
                if pages is not None and writes[i].page_id not in errors:
                    await hooks.written(pages[i], counts[i])
            down = [e for e in errors.values() if isinstance(e, DependencyUnavailable)]
            if down:
                raise down[0]
            refused.update(errors)

        writing: asyncio.Task[None] | None = None
        try:
            for group in group_by_size(counts, max_items=self.batch_max_paragraphs):
                await self._embed([paragraphs[i] for i in group], pages, group, select)
                hooks.embedded(time.perf_counter() - started)
                started = time.perf_counter()
                if writing is not None:
                    await writing
                writing = asyncio.create_task(write(group))
            if writing is not None:
                await writing
        finally:
            if writing is not None and not writing.done():  # an embedding failed: let the write end
                await asyncio.gather(writing, return_exceptions=True)
        if sum(counts) > EMBED_CALL_TEXTS:
            release_memory()  # a long page or batch: hand its buffers back before the next one
        if failed is not None:
            failed.update(refused)
        elif refused:
            raise next(iter(refused.values()))
        return counts

    async def _embed(
        self,
        groups: Sequence[Sequence[StoredParagraph]],
        pages: Sequence[Page] | None,
        indices: Sequence[int],
        select: VectorSelection,
    ) -> None:
        """Stage 3 for one group: contexts (when configured and the pages are known), then vectors."""
        if select is NO_VECTORS:
            return  # the caller's vectors as they are (benches over synthetic vectors)
        contexts: dict[str, str] = {}
        if self.contextualizer is not None and pages is not None:
            for i, group in zip(indices, groups, strict=True):
                contexts.update(await self.contextualizer.contexts(pages[i], group))
        await asyncio.to_thread(
            embed_prepared,
            groups,
            definition=self.definition,
            embedders=self.embedders,
            contexts=contexts,
            select=select,
        )


async def write_page(
    store: SearchStore, page_id: int, revision_id: int, paragraphs: Sequence[StoredParagraph]
) -> None:
    """The write stage alone, for one page whose vectors the caller made (the benches' synthetic corpora)."""
    await store.replace_page(page_id=page_id, revision_id=revision_id, paragraphs=paragraphs)
