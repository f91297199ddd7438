"""A drop-in for kolzchut-ragbot's library API: consumers switch by changing an import.

    # before
    from kolzchut_ragbot.engine import engine_factory
    # after
    from ragbot.compat.kolzchut import engine_factory

Same calls, same return shapes (``retrieve_documents`` -> ``(top_k_documents, all_docs_and_scores,
retrieval_time)``), same default semantics (dense search per model, page-level RRF with k = number of
pages asked, ``paragraphs_per_page`` trimming, ``paragraph_relevance_threshold`` on the cosine + 1
scale), without the seed's flaws: nothing loads at import, the factory builds lazily and never
ignores new arguments, tests can build engines freely. Every difference is listed in
``docs/migrating-from-kolzchut-ragbot.md``.

The API is synchronous, like the seed's. The async engine and store run on a private event-loop
thread owned by each ``Engine`` (``Engine.close()`` stops it), so the API may be called from plain
code, from worker threads, or from ``asyncio.to_thread`` inside an async app.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
import time
from collections.abc import Coroutine, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

import numpy as np

from ragbot.definition import DocumentDefinition, load_definition
from ragbot.errors import ValidationFailed
from ragbot.ports import Embedder, Reranker, SearchHit, SearchStore, StoredParagraph, Vector
from ragbot.retrieval import (
    BM25_BRANCH,
    Branch,
    RetrievalDefaults,
    RetrievalEngine,
    RetrievalResult,
)
from ragbot.retrieval import strip_vector_fields as _strip
from ragbot.retrieval.fusion import DEFAULT_RRF_K
from ragbot.retrieval.fusion import reciprocal_rank_fusion as _rrf
from ragbot.schemas.retrieval import FusionMethod, RetrieveRequest, SearchMode
from ragbot.settings import (
    ModelSettings,
    RetrieverSettings,
    StoreSettings,
    get_model_settings,
    get_retriever_settings,
    get_store_settings,
)

__all__ = [
    "Engine",
    "Model",
    "clear_engine_cache",
    "engine_factory",
    "es_client_factory",
    "strip_vector_fields",
]

logger = logging.getLogger(__name__)
R = TypeVar("R")
# Keys ragbot derives itself; a document's own values for them are not stored as fields.
_IDS = frozenset({"_id", "doc_id", "page_id", "revision_id", "paragraph"})


def strip_vector_fields(source: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a stored ``_source`` without any ``*_vectors`` key (as the seed's function)."""
    return _strip(source)


def _warm_up(embedders: Iterable[Embedder]) -> None:
    for embedder in embedders:
        embedder.warm_up()


class _LoopThread:
    """One event loop on a daemon thread; sync callers submit coroutines and wait for them."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def _start(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name=self._name, daemon=True)
                thread.start()
                self._loop, self._thread = loop, thread
            return self._loop

    def run(self, coro: Coroutine[Any, Any, R]) -> R:
        """Run ``coro`` on the private loop and return its result (re-raising its error)."""
        loop = self._start()
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("the kolzchut compat Engine must not be called from its own loop thread")
        return asyncio.run_coroutine_threadsafe(coro, loop).result()

    def stop(self) -> None:
        """Stop the loop and join the thread (idempotent)."""
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None or thread is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()


def _es_url(es_client: Any) -> str:
    """The first node URL of an ``elasticsearch.Elasticsearch`` client (its transport's node pool)."""
    try:
        nodes = es_client.transport.node_pool.all()
        return str(nodes[0].base_url)
    except (AttributeError, IndexError, TypeError) as exc:
        raise ValueError(
            f"es_client must be an elasticsearch.Elasticsearch client with a node: {exc}"
        ) from None


class Engine:
    """kolzchut-ragbot's ``Engine``: retrieve, search and update paragraphs; resources built lazily.

    Nothing heavy happens here: the store is opened and the models are loaded on the first call
    (or on ``warm_up()``). Pass ``store``/``embedders``/``definition`` to inject your own adapters.
    ``mode``/``fusion`` default to the seed's semantics (dense only, page-level RRF); use
    ``mode="hybrid"`` to add the BM25 branch. ``page_rrf_every_paragraph=True`` reproduces the
    seed code's page scores exactly (a page counted at each of its paragraphs' ranks).
    """

    def __init__(
        self,
        configs_class: Any = None,
        es_client: Any = None,
        *,
        store: SearchStore | None = None,
        embedders: Mapping[str, Embedder] | None = None,
        definition: DocumentDefinition | None = None,
        reranker: Reranker | None = None,
        mode: SearchMode = "semantic",
        fusion: FusionMethod = "page_rrf",
        rrf_k: int | None = None,
        bm25_weight: float = 1.0,
        page_rrf_every_paragraph: bool = False,
        store_settings: StoreSettings | None = None,
        model_settings: ModelSettings | None = None,
        retriever_settings: RetrieverSettings | None = None,
    ) -> None:
        self.configs_class = configs_class
        self._model_settings = model_settings or get_model_settings()
        self._store_settings = store_settings or get_store_settings()
        self._retriever_settings = retriever_settings or get_retriever_settings()
        # The definition file is small JSON: read it now so a bad one fails fast, as in the seed.
        self.definition = definition or load_definition(self._model_settings.document_definition)
        self.field_for_answer = self.definition.field_for_llm
        self.identifier_field = self.definition.identifier_field
        self.mode: SearchMode = mode
        self.fusion: FusionMethod = fusion
        self.rrf_k = rrf_k
        self.bm25_weight = bm25_weight
        self.page_rrf_every_paragraph = page_rrf_every_paragraph
        self.es_client = es_client
        self._store = store
        self._embedders = dict(embedders) if embedders is not None else None
        self._reranker = reranker
        self._engine: RetrievalEngine | None = None
        self._owns_store = store is None
        self._owns_embedders = embedders is None
        self._loop = _LoopThread(f"ragbot-compat-{id(self):x}")
        self._build_lock: asyncio.Lock | None = None

    # -- lifecycle ------------------------------------------------------------------------------

    def warm_up(self) -> None:
        """Load the models and open the store now instead of on the first call."""
        self._loop.run(self._ensure())

    def close(self) -> None:
        """Close what this engine opened and stop its loop thread."""
        if self._engine is not None:
            self._loop.run(self._aclose())
        self._loop.stop()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def _aclose(self) -> None:
        if self._owns_store and self._store is not None:
            await self._store.close()
        if self._owns_embedders and self._embedders is not None:
            for embedder in self._embedders.values():
                embedder.close()
        self._engine = None

    async def _ensure(self) -> RetrievalEngine:
        if self._build_lock is None:
            self._build_lock = asyncio.Lock()
        async with self._build_lock:
            if self._engine is None:
                self._engine = await self._build()
            return self._engine

    async def _build(self) -> RetrievalEngine:
        """The compat layer's composition root: models, then a store sized by their dimensions."""
        if self._embedders is None:
            from ragbot.embedders import build_embedders, cached_queries

            built = build_embedders(settings=self._model_settings, definition=self.definition)
            self._embedders = cached_queries(built, max_size=self._model_settings.query_cache_size)
        embedders = self._embedders
        await asyncio.to_thread(_warm_up, embedders.values())
        if self._reranker is not None:
            await asyncio.to_thread(self._reranker.warm_up)
        if self._store is None:
            from ragbot.stores import build_store

            settings = self._store_settings
            if self.es_client is not None:
                settings = settings.model_copy(
                    update={"backend": "elasticsearch", "es_url": _es_url(self.es_client)}
                )
            dimensions = {v.name: embedders[v.model].dimension for v in self.definition.vector_fields}
            self._store = build_store(settings=settings, definition=self.definition, dimensions=dimensions)
            await self._store.ensure_ready()
        defaults = dataclasses.replace(
            RetrievalDefaults.from_settings(self._retriever_settings),
            page_rrf_every_paragraph=self.page_rrf_every_paragraph,
        )
        return RetrievalEngine(
            store=self._store,
            embedders=embedders,
            definition=self.definition,
            reranker=self._reranker,
            defaults=defaults,
        )

    # -- the seed's API -------------------------------------------------------------------------

    @staticmethod
    def reciprocal_rank_fusion(
        ranking_lists: Sequence[Sequence[Any]],
        k: float = DEFAULT_RRF_K,
        weights: Sequence[float] | None = None,
    ) -> list[Any]:
        """Fuse ranked id lists: ``score = sum weight / (k + rank + 1)``, best first (the seed's function)."""
        return _rrf(ranking_lists, k=k, weights=weights)

    def retrieve_documents(
        self,
        query: str,
        retrieval_size: int,
        paragraphs_per_page: Sequence[int],
        paragraph_relevance_threshold: float = 0,
    ) -> tuple[list[dict[str, Any]], dict[str, list[dict[str, Any]]], float]:
        """Search and time it: ``(top_k_documents, all_docs_and_scores, retrieval_time)`` in seconds."""
        before = time.perf_counter()
        documents, scores = self.search_documents(
            query, retrieval_size, paragraphs_per_page, paragraph_relevance_threshold
        )
        retrieval_time = round(time.perf_counter() - before, 4)
        logger.info("retrieval time: %s", retrieval_time)
        return documents, scores, retrieval_time

    def search_documents(
        self,
        query: str,
        retrieval_size: int,
        paragraphs_per_page: Sequence[int],
        paragraph_relevance_threshold: float = 0,
    ) -> tuple[list[dict[str, Any]], dict[str, list[dict[str, Any]]]]:
        """The retrieval without the timer: ``(top_k_documents, all_docs_and_scores)``."""
        request = RetrieveRequest(
            query=query,
            retrieval_size=retrieval_size,
            paragraphs_per_page=list(paragraphs_per_page),
            paragraph_relevance_threshold=paragraph_relevance_threshold,
            mode=self.mode,
            fusion=self.fusion,
            rrf_k=self.rrf_k,
            bm25_weight=self.bm25_weight,
            rerank=self._reranker is not None,
        )
        result = self._loop.run(self._run(request))
        documents = [{**_strip(hit.source), "_id": hit.doc_id} for hit in result.documents]
        return documents, self._all_docs_and_scores(result)

    async def _run(self, request: RetrieveRequest) -> RetrievalResult:
        engine = await self._ensure()
        try:
            return await engine.run(request)
        except ValidationFailed as exc:  # the seed's callers expect ValueError for bad arguments
            raise ValueError(f"{exc.field}: {exc}") from exc

    def _branch_key(self, branch: Branch) -> str:
        """The seed keys debug lists by model; a model embedding several fields gets one per field."""
        if branch.kind == "bm25" or branch.model is None:
            return BM25_BRANCH
        if len(self.definition.models[branch.model]) == 1:
            return branch.model
        return f"{branch.model}:{branch.field}"

    def _all_docs_and_scores(self, result: RetrievalResult) -> dict[str, list[dict[str, Any]]]:
        """Per model (and BM25): every candidate with its raw score, title, page id and vector-free source."""
        out: dict[str, list[dict[str, Any]]] = {}
        for branch in result.branches:
            out[self._branch_key(branch)] = [
                self._candidate(h) for h in result.candidates.get(branch.name, [])
            ]
        return out

    def _candidate(self, hit: SearchHit) -> dict[str, Any]:
        title = hit.source.get("title")
        return {
            "doc": title,  # the seed's original key for the title
            "title": title,
            "score": hit.score,
            "page_id": hit.page_id,
            "_id": hit.doc_id,
            "_source": _strip(hit.source),
        }

    def update_docs(
        self,
        list_of_docs: list[dict[str, Any]],
        embed_only_fields: Iterable[str] | None = None,
        delete_existing: bool = False,
    ) -> None:
        """Embed and index the paragraphs of ONE page (a mix of pages is a ValueError, as in the seed).

        ``embed_only_fields`` limits which fields get vectors (empty or None: every embedded field);
        ``delete_existing=True`` replaces the page's indexed copy, False appends to it.
        """
        self._write(
            list_of_docs,
            wanted=set(embed_only_fields) if embed_only_fields else None,
            delete_existing=delete_existing,
        )

    def _write(self, docs: list[dict[str, Any]], *, wanted: set[str] | None, delete_existing: bool) -> None:
        if not docs:
            return
        page_id = self._single_page(docs)
        try:
            self._loop.run(self._update(page_id, docs, wanted, delete_existing))
        except ValidationFailed as exc:  # e.g. a vector of the wrong size: the caller's mistake
            raise ValueError(f"{exc.field}: {exc}") from exc

    def _single_page(self, docs: Sequence[Mapping[str, Any]]) -> int:
        ident = self.identifier_field
        try:
            pages = {int(doc[ident]) for doc in docs}
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"every document needs an integer {ident!r}") from None
        if len(pages) != 1:
            raise ValueError(
                f"update_docs takes the paragraphs of one page; got {ident} values {sorted(pages)}"
            )
        return pages.pop()

    async def _update(
        self,
        page_id: int,
        docs: Sequence[Mapping[str, Any]],
        wanted: set[str] | None,
        delete_existing: bool,
    ) -> None:
        """Embed, then replace the page in one store operation (old copy or new, never a gap).

        ``delete_existing=False`` appends, as the seed did: the page's indexed paragraphs are read
        back, re-embedded (the store never returns vectors) and written again with the new ones
        numbered after them. A ``revision_id`` or ``paragraph`` key on the documents is used for
        the ids; otherwise the indexed revision is kept (0 for a new page).
        """
        await self._ensure()
        store = self._store
        assert store is not None
        state = await store.page_state(page_id=page_id)
        given = docs[0].get("revision_id")
        revision_id = int(given) if given is not None else (state.revision_id if state else 0)
        kept: list[tuple[int, Mapping[str, Any]]] = []
        if not delete_existing and state is not None:
            for hit in await store.page_paragraphs(page_id=page_id):
                kept.append((int(hit.source.get("paragraph", len(kept))), hit.source))
        first = max((n for n, _ in kept), default=-1) + 1
        new = [(int(doc.get("paragraph", first + i)), doc) for i, doc in enumerate(docs)]
        rows = kept + new
        vectors = await self._embed_rows([doc for _, doc in kept], None) + await self._embed_rows(
            [doc for _, doc in new], wanted
        )
        now = datetime.now(UTC).isoformat()
        paragraphs = []
        for (number, doc), vecs in zip(rows, vectors, strict=True):
            fields = {k: v for k, v in _strip(doc).items() if k not in _IDS}
            fields.setdefault("last_update", now)
            paragraphs.append(
                StoredParagraph(
                    doc_id=f"{page_id}-{revision_id}-{number}",
                    page_id=page_id,
                    revision_id=revision_id,
                    paragraph=number,
                    fields=fields,
                    vectors=vecs,
                )
            )
        await store.replace_page(page_id=page_id, revision_id=revision_id, paragraphs=paragraphs)

    async def _embed_rows(
        self, docs: Sequence[Mapping[str, Any]], wanted: set[str] | None
    ) -> list[dict[str, Vector]]:
        """Vectors per document: fields in ``wanted`` (None: all) are embedded, given vectors kept."""
        embedders = self._embedders
        assert embedders is not None
        vectors: list[dict[str, Vector]] = [{} for _ in docs]
        for vf in self.definition.vector_fields:
            if wanted is None or vf.field in wanted:
                rows = [
                    i for i, doc in enumerate(docs) if isinstance(doc.get(vf.field), str) and doc[vf.field]
                ]
                if rows:
                    texts = [str(docs[i][vf.field]) for i in rows]
                    matrix = await asyncio.to_thread(embedders[vf.model].embed_passages, texts)
                    for i, row in zip(rows, matrix, strict=True):
                        vectors[i][vf.name] = row
            for i, doc in enumerate(docs):  # vectors the caller computed are kept, as the seed kept them
                if vf.name not in vectors[i] and doc.get(vf.name) is not None:
                    vectors[i][vf.name] = np.asarray(doc[vf.name], dtype=np.float32)
        return vectors


class Model:
    """kolzchut-ragbot's low-level ``Model``: writes documents that already carry their vectors.

    It writes through the engine ``engine_factory`` holds for the same ``es_client`` (found when it
    is first used, so calling ``es_client_factory`` before ``engine_factory`` shares one engine).
    """

    def __init__(self, es_client: Any = None, engine: Engine | None = None) -> None:
        self.es_client = es_client
        self._engine = engine

    @property
    def engine(self) -> Engine:
        """The engine that writes for this model."""
        if self._engine is None:
            self._engine = _engine_for_client(self.es_client)
        return self._engine

    def create_or_update_documents(
        self, paragraphs_dicts: list[dict[str, Any]], update: bool = False
    ) -> None:
        """Write pre-embedded paragraphs of one page; ``update=True`` replaces the page's old copy."""
        self.engine._write(paragraphs_dicts, wanted=set(), delete_existing=update)


_ENGINES: dict[tuple[int, ...], tuple[tuple[Any, ...], Engine]] = {}
_ENGINES_LOCK = threading.Lock()


def engine_factory(
    configs_class: Any = None,
    es_client: Any = None,
    *,
    store: SearchStore | None = None,
    embedders: Mapping[str, Embedder] | None = None,
    definition: DocumentDefinition | None = None,
) -> Engine:
    """The shared ``Engine`` for these arguments, built lazily (nothing loads until first use).

    Unlike the seed's global singleton, the cache is keyed by the arguments' identities: calling
    again with the same objects returns the same engine (so the models load once), calling with
    different ones builds a new engine instead of silently ignoring them. The cache holds the
    arguments, so their identities stay unique; ``clear_engine_cache()`` empties it. Tests can also
    construct ``Engine(...)`` directly.
    """
    args = (configs_class, es_client, store, embedders, definition)
    key = tuple(id(a) for a in args)
    with _ENGINES_LOCK:
        cached = _ENGINES.get(key)
        if cached is None:
            engine = Engine(configs_class, es_client, store=store, embedders=embedders, definition=definition)
            cached = _ENGINES[key] = (args, engine)
        return cached[1]


def _engine_for_client(es_client: Any) -> Engine:
    with _ENGINES_LOCK:
        for args, engine in _ENGINES.values():
            if args[1] is es_client:
                return engine
    return engine_factory(None, es_client)


def es_client_factory(es_client: Any = None) -> Model:
    """The seed's low-level writer for ``es_client``; it shares the engine built for that client."""
    return Model(es_client)


def clear_engine_cache() -> None:
    """Close and forget every engine ``engine_factory`` built."""
    with _ENGINES_LOCK:
        engines = [engine for _, engine in _ENGINES.values()]
        _ENGINES.clear()
    for engine in engines:
        engine.close()
