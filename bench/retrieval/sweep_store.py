"""The embedded store a sweep runs on: a BEIR dataset indexed through the real path once, reused.

``bench/retrieval/fusion_sweep.py`` and ``bench/retrieval/rerank_blend.py`` sweep settings over the same
indexed corpus;
passage and query vectors are cached in ``cache_dir`` (``ragbot.evaluation.VectorCache``), so a
second run embeds nothing it has seen.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from ragbot.definition import DocumentDefinition
from ragbot.embedders import build_embedders
from ragbot.evaluation import BeirDataset, VectorCache, index_dataset
from ragbot.ports import Embedder, SearchStore
from ragbot.settings import ModelSettings, StoreSettings
from ragbot.stores import build_store


@asynccontextmanager
async def indexed_store(
    dataset: BeirDataset,
    *,
    definition: DocumentDefinition,
    settings: ModelSettings,
    store_path: Path,
    cache_dir: Path,
) -> AsyncIterator[tuple[SearchStore, dict[str, Embedder]]]:
    """(store, embedders): ``store_path`` holding ``dataset`` (indexed when empty), warmed embedders."""
    caches = {
        n: VectorCache(e, folder=cache_dir)
        for n, e in build_embedders(settings=settings, definition=definition).items()
    }
    for cache in caches.values():
        cache.warm_up()
    dims = {v.name: caches[v.model].dimension for v in definition.vector_fields}
    store = build_store(
        settings=StoreSettings(backend="embedded", embedded_path=store_path),
        definition=definition,
        dimensions=dims,
    )
    await store.ensure_ready()
    embedders: dict[str, Embedder] = dict(caches)
    try:
        if await store.count() == 0:
            await index_dataset(
                dataset, store=store, definition=definition, embedders=embedders, max_tokens=512
            )
        yield store, embedders
    finally:
        for cache in caches.values():
            cache.flush()
        await store.close()
