"""kolzchut-ragbot's ``Engine``: retrieve, search and update paragraphs, with resources built lazily."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ragbot.compat.kolzchut.loop import LoopThread
from ragbot.compat.kolzchut.writes import update_page
from ragbot.definition import DocumentDefinition, load_definition
from ragbot.errors import ConfigurationError, ValidationFailed
from ragbot.indexing.pipeline import IndexingPipeline
from ragbot.ports import Embedder, Reranker, SearchHit, SearchStore
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
from ragbot.schemas.limits import positive_page_id
from ragbot.schemas.retrieval import FusionMethod, RetrieveRequest, SearchMode
from ragbot.settings import (
    ModelSettings,
    RetrieverSettings,
    StoreSettings,
    get_model_settings,
    get_retriever_settings,
    get_store_settings,
)

__all__ = ["Engine", "strip_vector_fields"]

logger = logging.getLogger(__name__)


def strip_vector_fields(source: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a stored ``_source`` without any ``*_vectors`` key (as kolzchut-ragbot's function)."""
    return _strip(source)


def _warm_up(embedders: Iterable[Embedder]) -> None:
    for embedder in embedders:
        embedder.warm_up()


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
    ``mode``/``fusion`` default to kolzchut-ragbot's semantics (dense only, page-level RRF); use
    ``mode="hybrid"`` to add the BM25 branch. ``page_rrf_every_paragraph=True`` reproduces
    kolzchut-ragbot's page scores exactly (a page counted at each of its paragraphs' ranks).
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
        # The definition file is small JSON: read it now so a bad one fails fast, as in kolzchut-ragbot.
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
        self._loop = LoopThread(f"ragbot-compat-{id(self):x}")
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
            from ragbot.stores.generations import settings_for

            settings = self._store_settings
            if self.es_client is not None:
                settings = settings.model_copy(
                    update={"backend": "elasticsearch", "es_url": _es_url(self.es_client)}
                )
            dimensions = {v.name: embedders[v.model].dimension for v in self.definition.vector_fields}
            generation = await self._live_generation(settings)
            self._store = build_store(
                settings=settings_for(settings, generation), definition=self.definition, dimensions=dimensions
            )
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

    async def _live_generation(self, settings: StoreSettings) -> str:
        """The index generation readers query now (``legacy`` before any re-embed); one that stores
        other fields than this engine's definition is refused (it would be read and written wrong)."""
        from ragbot.stores.generations import read_live, stores_what

        live = await read_live(settings)
        if not stores_what(live, self.definition):
            raise ConfigurationError(
                f"the live index generation {live.generation_id} stores other fields or models than "
                "this Engine's definition; pass the live generation's definition or re-embed"
            )
        return live.generation_id

    # -- kolzchut-ragbot's API -------------------------------------------------------------------------

    @staticmethod
    def reciprocal_rank_fusion(
        ranking_lists: Sequence[Sequence[Any]],
        k: float = DEFAULT_RRF_K,
        weights: Sequence[float] | None = None,
    ) -> list[Any]:
        """Fuse ranked id lists: ``score = sum weight / (k + rank + 1)``, best first (as kolzchut-ragbot)."""
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
        except ValidationFailed as exc:  # kolzchut-ragbot's callers expect ValueError for bad arguments
            raise ValueError(f"{exc.field}: {exc}") from exc

    def _branch_key(self, branch: Branch) -> str:
        """kolzchut-ragbot keys debug lists by model; a model embedding several fields gets one per field."""
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
        for branch in result.skipped_branches:  # routed away by language: still a key, no candidates
            out.setdefault(self._branch_key(branch), [])
        return out

    def _candidate(self, hit: SearchHit) -> dict[str, Any]:
        title = hit.source.get("title")
        return {
            "doc": title,  # kolzchut-ragbot's original key for the title
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
        """Embed and index the paragraphs of ONE page (a mix of pages is a ValueError, as in kolzchut-ragbot).

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
        return positive_page_id(pages.pop())  # ValueError: page ids start at 1

    async def _update(
        self, page_id: int, docs: Sequence[Mapping[str, Any]], wanted: set[str] | None, delete_existing: bool
    ) -> None:
        """Write one page's documents through the indexing pipeline (``ragbot.compat.kolzchut.writes``)."""
        await self._ensure()
        assert self._store is not None and self._embedders is not None
        pipeline = IndexingPipeline(definition=self.definition, embedders=self._embedders)
        await update_page(
            store=self._store,
            pipeline=pipeline,
            page_id=page_id,
            docs=docs,
            wanted=wanted,
            delete_existing=delete_existing,
        )
