"""A small real corpus for chat tests: sample Kol-Zchut pages embedded with multilingual-e5-small
(packaged, numpy only, loads in about a second) into an embedded store file.

``build_sample_store`` writes the file; ``open_engine`` opens a ``RetrievalEngine`` over it (the same
store and model the retriever service would use with ``SAMPLE_DEFINITION``).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import lru_cache
from pathlib import Path
from typing import Any

from ragbot.definition import DocumentDefinition, parse_definition
from ragbot.embedders import build_embedders
from ragbot.indexing.pipeline import IndexingPipeline, SplitOptions
from ragbot.ports import Embedder
from ragbot.retrieval import RetrievalDefaults, RetrievalEngine
from ragbot.schemas.pages import Page
from ragbot.settings import ModelSettings
from ragbot.stores.embedded import EmbeddedStore
from support.fake_wiki import load_pages

MODEL = "multilingual-e5-small"
SAMPLE_DEFINITION_JSON: dict[str, Any] = {
    "identifier_field": "page_id",
    "saved_fields": {"title": "text", "page_id": "integer", "url": "keyword", "content": "text"},
    "field_for_llm": "content",
    "models": {MODEL: "content"},
}
# Short pages first keep indexing fast; they cover distinct topics.
SAMPLE_PAGES = 4
MAX_TOKENS = 256


def sample_definition() -> DocumentDefinition:
    """The definition every chat test store uses."""
    return parse_definition(SAMPLE_DEFINITION_JSON)


def write_definition(path: Path) -> Path:
    """The definition as a file (for service processes)."""
    path.write_text(json.dumps(SAMPLE_DEFINITION_JSON), encoding="utf-8")
    return path


@lru_cache(maxsize=1)
def e5() -> Embedder:
    """The e5 embedder, loaded once per test process."""
    embedder = build_embedders(settings=ModelSettings(device="cpu"), definition=sample_definition())[MODEL]
    embedder.warm_up()
    return embedder


def sample_pages(count: int = SAMPLE_PAGES) -> list[Page]:
    """The ``count`` shortest sample pages."""
    records = sorted(load_pages(), key=lambda r: len(str(r.get("content", ""))))
    return [Page.from_wiki_content(r) for r in records[:count]]


async def build_sample_store(
    path: Path, *, count: int = SAMPLE_PAGES, pages: list[Page] | None = None
) -> list[Page]:
    """Index the sample pages (or ``pages``) into an embedded store file; returns the pages written."""
    definition = sample_definition()
    embedder = e5()
    store = EmbeddedStore(
        path=path, definition=definition, dimensions={f"content_{MODEL}_vectors": embedder.dimension}
    )
    await store.ensure_ready()
    written = pages if pages is not None else sample_pages(count)
    # Link targets kept: the browser tests' English queries find these Hebrew pages by the English
    # words of their links' targets (what a deployment with RAGBOT_WORKER_LINK_TARGETS=keep stores).
    split = SplitOptions(max_tokens=MAX_TOKENS, link_targets="keep")
    pipeline = IndexingPipeline(definition=definition, embedders={MODEL: embedder}, split=split)
    try:
        for page in written:
            await pipeline.index([page], store=store)
    finally:
        await store.close()
    return written


@asynccontextmanager
async def open_engine(path: Path) -> AsyncIterator[RetrievalEngine]:
    """A retrieval engine over a store file built by ``build_sample_store``."""
    definition = sample_definition()
    embedder = e5()
    store = EmbeddedStore(
        path=path, definition=definition, dimensions={f"content_{MODEL}_vectors": embedder.dimension}
    )
    await store.ensure_ready()
    try:
        yield RetrievalEngine(
            store=store, embedders={MODEL: embedder}, definition=definition, defaults=RetrievalDefaults()
        )
    finally:
        await store.close()
