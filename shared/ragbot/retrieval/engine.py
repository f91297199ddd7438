"""The retrieval engine: embed the query per model, search every branch at once, fuse, group, rerank.

Query embeddings are cached by the embedders themselves: composition roots wrap them with
``ragbot.embedders.cached_queries`` (an LRU keyed by model and text).

It depends only on ports (``SearchStore``, ``Embedder``, ``Reranker``) and the pure functions of
``ragbot.retrieval.fusion``; the retriever service and the kolzchut-ragbot compatibility layer both drive it.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, TypeVar

import numpy as np

from ragbot.definition import DocumentDefinition, VectorField
from ragbot.errors import DependencyUnavailable, RagbotError, StoreUnavailable, ValidationFailed
from ragbot.observability.spans import span
from ragbot.ports import Embedder, Filters, Reranker, SearchHit, SearchStore, Vector
from ragbot.retrieval.fusion import (
    FusedHit,
    apply_relevance_threshold,
    apply_rerank,
    fuse_pages,
    fuse_rrf,
    fuse_scores,
    group_ranked,
)
from ragbot.retrieval.memory import QuestionMemory, Votes, check_loaded, vote_weight, with_votes
from ragbot.retrieval.results import (
    BM25_BRANCH,
    TUNED_SUFFIX,
    Branch,
    RetrievalDefaults,
    RetrievalResult,
    debug_view,
    strip_vector_fields,
)
from ragbot.retrieval.routing import Routing, route_branches
from ragbot.retrieval.translation import SOURCE_LANGUAGE, LexiconTranslator
from ragbot.retrieval.tuned import query_model, searched_field, with_tuned
from ragbot.schemas.retrieval import FusionMethod, RetrieveRequest, RetrieveResponse, SearchMode
from ragbot.text.language import ANY_LANGUAGE, detect_language

log = logging.getLogger(__name__)

STAGES = ("embed", "dense", "bm25", "fusion", "rerank", "total")
R = TypeVar("R")


def _question_vector(rows: Vector) -> Vector:
    """The question's vector: its one row, or the unit mean of the question's and its translation's
    (the rows are unit vectors, as every ``Embedder`` returns them)."""
    if len(rows) == 1:
        row: Vector = rows[0]
        return row
    mean = rows.mean(axis=0)
    return np.asarray(mean / max(float(np.linalg.norm(mean)), 1e-12), dtype=np.float32)


def _ms(seconds: float) -> float:
    return round(seconds * 1000.0, 3)


class RetrievalEngine:
    """Hybrid multi-model retrieval over a ``SearchStore``; construction loads nothing."""

    def __init__(
        self,
        *,
        store: SearchStore,
        embedders: Mapping[str, Embedder],
        definition: DocumentDefinition,
        reranker: Reranker | None = None,
        defaults: RetrievalDefaults | None = None,
        translator: LexiconTranslator | None = None,
        tuned: Mapping[str, Embedder] | None = None,
        memory: QuestionMemory | None = None,
    ) -> None:
        self.store = store
        self.embedders = dict(embedders)
        # Per model, a query encoder tuned on the wiki's own questions (ragbot.embedders.query_tuning): a
        # question in one of defaults.tuning_scripts has its dense list of that model searched with
        # it and fused in the untuned one's place; the untuned list is still searched (weight 0), so
        # the answerability rule reads the cosines it was fitted on.
        self.tuned = dict(tuned or {})
        self.definition = definition
        self.reranker = reranker
        self.defaults = defaults or RetrievalDefaults()
        # Set once built (the retriever builds it in the background): English questions over a corpus in
        # another language also search with their words' translation (ragbot.retrieval.translation).
        self.translator = translator
        # The wiki's answered questions (ragbot.retrieval.memory): their pages' votes reorder the fused
        # list when memory_weight > 0.
        self.memory = memory

    async def retrieve(self, request: RetrieveRequest) -> RetrieveResponse:
        """Answer ``POST /v1/retrieve``: documents, the debug view of every stage and timings."""
        result = await self.run(request)
        return RetrieveResponse.model_validate(
            {
                "documents": [self.document(hit) for hit in result.documents],
                "debug": self.debug(result),
                "timings_ms": result.timings_ms,
            }
        )

    async def run(self, request: RetrieveRequest) -> RetrievalResult:
        """Embed, search every branch concurrently, threshold, fuse, rerank and group by page."""
        started = time.perf_counter()
        timings = dict.fromkeys(STAGES, 0.0)
        query = self._check_query(request.query)
        mode: SearchMode = request.mode or self.defaults.mode
        method: FusionMethod = request.fusion or self.defaults.fusion
        routing = self._route(request, self._branches(request, mode))
        translation = await self._translation(query, routing)
        weighted = self._language_weighted(routing, translation)
        branches = with_tuned(query, weighted, set(self.tuned), self.defaults.tuning_scripts)
        rerank = self._wants_rerank(request)
        size = request.retrieval_size
        filters: Filters | None = request.filters
        candidates: dict[str, list[SearchHit]] = {}
        asked: dict[str, Vector] = {}
        lexical = query
        if translation is not None and self.defaults.translation_bm25:
            lexical = f"{query} {translation['words']}"

        bm25_task: asyncio.Task[tuple[list[SearchHit], float]] | None = None
        if any(b.kind == "bm25" for b in branches):
            bm25_task = asyncio.create_task(self._timed(self._bm25(query=lexical, k=size, filters=filters)))
        try:
            dense = [b for b in branches if b.kind == "dense"]
            if dense:
                t0 = time.perf_counter()
                models = list(dict.fromkeys(query_model(b) for b in dense if b.model is not None))
                # the translator's model embeds the question and its translation in one call
                texts = {m: [query] for m in models}
                if translation is not None and translation["model"] in texts:
                    texts[translation["model"]].append(translation["words"])
                with span("retrieval embed", {"ragbot.models": ",".join(models)}):
                    embedded = await asyncio.gather(*(self._embed_rows(m, texts[m]) for m in models))
                vectors = {m: _question_vector(rows) for m, rows in zip(models, embedded, strict=True)}
                # the question's own row, without its translation, is what the memory compares
                asked = {m: rows[0] for m, rows in zip(models, embedded, strict=True)}
                timings["embed"] = _ms(time.perf_counter() - t0)
                t0 = time.perf_counter()
                results = await asyncio.gather(
                    *(
                        self._knn(
                            vector_field=searched_field(b),
                            vector=vectors[query_model(b)],
                            k=size,
                            filters=filters,
                        )
                        for b in dense
                    )
                )
                timings["dense"] = _ms(time.perf_counter() - t0)
                candidates.update(zip((b.name for b in dense), results, strict=True))
            if bm25_task is not None:
                hits, seconds = await bm25_task
                candidates[BM25_BRANCH] = hits
                timings["bm25"] = _ms(seconds)
        finally:
            if bm25_task is not None:
                if not bm25_task.done():
                    bm25_task.cancel()
                elif not bm25_task.cancelled():
                    bm25_task.exception()  # already reported through the failing branch; mark it seen

        t0 = time.perf_counter()
        threshold = request.paragraph_relevance_threshold
        dropped: dict[str, int] = {}
        lists: dict[str, list[SearchHit]] = {}
        for b in branches:
            hits = candidates[b.name]
            kept = apply_relevance_threshold(hits, threshold) if b.kind == "dense" else list(hits)
            dropped[b.name] = len(hits) - len(kept)
            lists[b.name] = kept
        weights = {b.name: b.weight for b in branches}
        k: float = request.rrf_k or (
            len(request.paragraphs_per_page) if method == "page_rrf" else self.defaults.rrf_k
        )
        fused = self._fuse(
            method, lists, weights=weights, k=k, dense=[b.name for b in branches if b.kind == "dense"]
        )
        votes = await self._votes(query, asked) if fused else None
        memory_debug: dict[str, Any] | None = None
        if votes is not None:
            d = self.defaults
            weight = vote_weight(votes, d.memory_weight, d.memory_near, d.memory_near_weight)
            fused = with_votes(fused, votes, weight)
            memory_debug = {**votes.as_debug(), "weight": round(weight, 6)}
        timings["fusion"] = _ms(time.perf_counter() - t0)

        result = RetrievalResult(
            query=query,
            mode=mode,
            fusion=method,
            rrf_k=k,
            branches=branches,
            candidates=candidates,
            dropped_by_threshold=dropped,
            fused=fused,
            documents=[],
            timings_ms=timings,
            routing=routing.as_debug() if any(r.kind == "dense" for r in routing.routes) else None,
            skipped_branches=list(routing.skipped),
            translation=translation,
            memory=memory_debug,
        )
        ranked = fused
        if rerank and fused:
            t0 = time.perf_counter()
            with span("retrieval rerank", {"ragbot.candidates": len(fused)}):
                ranked = await self._rerank(query, fused, result)
            timings["rerank"] = _ms(time.perf_counter() - t0)
        result.documents = group_ranked(ranked, request.paragraphs_per_page)
        timings["total"] = _ms(time.perf_counter() - started)
        return result

    def document(self, hit: FusedHit) -> dict[str, Any]:
        """A paragraph as handed to clients: vector-free source, id, page id and final score."""
        return {
            **strip_vector_fields(hit.source),
            "_id": hit.doc_id,
            "page_id": hit.page_id,
            "score": hit.score,
        }

    async def page_documents(self, page_id: int) -> list[dict[str, Any]]:
        """Every paragraph of one page shaped as ``document`` does (score 0), to read it whole."""
        hits = await self.store.page_paragraphs(page_id=page_id)
        return [
            {**strip_vector_fields(h.source), "_id": h.doc_id, "page_id": h.page_id, "score": h.score}
            for h in hits
        ]

    def debug(self, result: RetrievalResult) -> dict[str, Any]:
        """The debug view: every branch's candidates with raw scores, the fused list, rerank scores."""
        return debug_view(result, self._branch_languages)

    def models_info(self) -> list[dict[str, Any]]:
        """The dense models this engine searches, with their dimensions and vector fields."""
        return [
            {
                "name": name,
                "dimension": self.embedders[name].dimension,
                "vector_fields": [v.name for v in self.definition.vector_fields_for(name)],
            }
            for name in self.definition.model_names
            if name in self.embedders
        ]

    # -- request checks -------------------------------------------------------------------------

    def _check_query(self, query: str) -> str:
        if not query.strip():
            raise ValidationFailed("query must not be blank", field="query")
        if len(query) > self.defaults.max_query_chars:
            raise ValidationFailed(
                f"query is {len(query)} characters; the limit is {self.defaults.max_query_chars}",
                field="query",
            )
        return query

    def _branches(self, request: RetrieveRequest, mode: SearchMode) -> list[Branch]:
        """The ranked lists this request fuses, with their weights (weight 0 means not searched)."""
        branches: list[Branch] = []
        if mode in ("semantic", "hybrid"):
            weights = (
                request.models
                if request.models is not None
                else dict.fromkeys(self.definition.model_names, 1.0)
            )
            for name, weight in weights.items():
                if name not in self.definition.models or name not in self.embedders:
                    known = sorted(set(self.definition.models) & set(self.embedders))
                    raise ValidationFailed(f"unknown model {name!r}; known models: {known}", field="models")
                if not isinstance(weight, int | float) or not math.isfinite(weight) or weight < 0:
                    raise ValidationFailed(f"weight of {name!r} must be a finite number >= 0", field="models")
                if weight == 0:
                    continue
                branches.extend(
                    self._dense_branch(v, float(weight) * self.definition.weight_of(v))
                    for v in self.definition.vector_fields_for(name)
                    if self.definition.weight_of(v) > 0  # a field weighed 0 is not searched
                )
        if mode in ("lexical", "hybrid"):
            bm25_weight = self.defaults.bm25_weight if request.bm25_weight is None else request.bm25_weight
            if not math.isfinite(bm25_weight) or bm25_weight < 0:
                raise ValidationFailed("bm25_weight must be a finite number >= 0", field="bm25_weight")
            if bm25_weight > 0:
                branches.append(Branch(name=BM25_BRANCH, kind="bm25", weight=bm25_weight))
        if not branches:
            field_name = "bm25_weight" if mode == "lexical" else "models"
            raise ValidationFailed(f"nothing to search in {mode} mode: every weight is 0", field=field_name)
        return branches

    def _route(self, request: RetrieveRequest, branches: list[Branch]) -> Routing:
        """Drop the dense branches whose model does not serve the question's language (see routing)."""
        enabled = self.defaults.language_routing and request.models is None
        why_off = (
            "language routing is off (RAGBOT_RETRIEVER_LANGUAGE_ROUTING=false)"
            if not self.defaults.language_routing
            else "the request names its models: searched as asked"
        )
        guess = detect_language(request.query) if enabled else None
        return route_branches(
            branches, languages_of=self._branch_languages, guess=guess, enabled=enabled, why_off=why_off
        )

    def _language_weighted(self, routing: Routing, translation: Mapping[str, str] | None) -> list[Branch]:
        """The kept branches, each weight times the factors ``language_weights`` gives the question's
        languages for its model (or "bm25"); as kept when routing is off or the language unknown. A
        translated question's dense models that do not read the corpus language weigh 0 (on a Hebrew
        corpus an English-only model finds Latin-script noise, its best scaled to 1.0 by fusion)."""
        kept = list(routing.kept)
        if translation is not None:
            corpus = translation["language"]
            kept = [
                b
                if b.kind != "dense" or {corpus, ANY_LANGUAGE} & set(self._branch_languages(b))
                else replace(b, weight=0.0)
                for b in kept
            ]
        table = self.defaults.language_weights
        guess = routing.guess
        if not table or not routing.enabled or guess is None or not guess.known:
            return kept
        factors = [table[lang] for lang in sorted(guess.languages) if lang in table]
        out: list[Branch] = []
        for b in kept:
            key = BM25_BRANCH if b.kind == "bm25" else (b.model or b.name)
            weight = b.weight
            for factor in factors:
                weight *= factor.get(key, 1.0)
            out.append(b if weight == b.weight else replace(b, weight=weight))
        return out

    def _branch_languages(self, branch: Branch) -> tuple[str, ...]:
        if branch.model is None or branch.field is None:
            return ("*",)
        return self.definition.languages_of(VectorField(branch.model, branch.field))

    @staticmethod
    def _dense_branch(vector_field: VectorField, weight: float) -> Branch:
        return Branch(
            name=vector_field.name,
            kind="dense",
            weight=weight,
            model=vector_field.model,
            field=vector_field.field,
        )

    def _wants_rerank(self, request: RetrieveRequest) -> bool:
        if request.rerank is None:
            return self.reranker is not None and self.defaults.rerank
        if request.rerank and self.reranker is None:
            raise ValidationFailed("rerank asked for but no reranker is configured", field="rerank")
        return request.rerank

    # -- calls to dependencies, each bounded ----------------------------------------------------

    @staticmethod
    async def _timed(aw: Awaitable[R]) -> tuple[R, float]:
        t0 = time.perf_counter()
        value = await aw
        return value, time.perf_counter() - t0

    async def _store_call(self, what: str, aw: Awaitable[R]) -> R:
        try:
            return await asyncio.wait_for(aw, timeout=self.defaults.store_timeout_s)
        except TimeoutError:
            raise StoreUnavailable(
                f"store did not answer {what} within {self.defaults.store_timeout_s} s"
            ) from None
        except RagbotError:
            raise
        except OSError as exc:
            raise StoreUnavailable(f"store failed on {what}: {exc}") from None

    async def _knn(
        self, *, vector_field: str, vector: Vector, k: int, filters: Filters | None
    ) -> list[SearchHit]:
        return await self._store_call(
            f"knn on {vector_field}",
            self.store.knn(vector_field=vector_field, vector=vector, k=k, filters=filters),
        )

    async def _bm25(self, *, query: str, k: int, filters: Filters | None) -> list[SearchHit]:
        return await self._store_call("bm25", self.store.bm25(query=query, k=k, filters=filters))

    async def _in_thread(self, dependency: str, fn: Callable[[], R], limit_s: float) -> R:
        try:
            return await asyncio.wait_for(asyncio.to_thread(fn), timeout=limit_s)
        except TimeoutError:
            raise DependencyUnavailable(
                f"{dependency} did not answer within {limit_s} s", dependency=dependency
            ) from None
        except DependencyUnavailable:
            raise
        except (RagbotError, OSError, RuntimeError) as exc:
            raise DependencyUnavailable(f"{dependency} failed: {exc}", dependency=dependency) from exc

    async def _translation(self, query: str, routing: Routing) -> dict[str, str] | None:
        """For an English question over a corpus in the translator's language: its content words'
        translation (``ragbot.retrieval.translation``), else None."""
        translator = self.translator
        guess = routing.guess if routing.guess is not None else detect_language(query)
        if (
            translator is None
            or translator.model not in self.embedders
            or SOURCE_LANGUAGE not in guess.languages
            or translator.language in guess.languages
        ):
            return None
        model = translator.model
        embedder, context = self.embedders[model], self.defaults.translation_context
        words = await self._in_thread(
            f"model:{model}",
            lambda: translator.translate(query, embedder, context=context),
            self.defaults.embed_timeout_s,
        )
        return {"model": model, "language": translator.language, "words": words} if words else None

    async def _votes(self, query: str, asked: Mapping[str, Vector]) -> Votes | None:
        """The question memory's votes for ``query`` (its vector of the memory's model, embedded now if
        the search did not), or None when there is no memory or its weight is 0."""
        memory = self.memory
        if memory is None or not len(memory) or self.defaults.memory_weight <= 0:
            return None
        vector = asked.get(memory.model)
        if vector is None:  # no dense search embedded it (lexical mode): embed it for the memory alone
            check_loaded(memory, {m: e.dimension for m, e in self.embedders.items()})
            vector = (await self._embed_rows(memory.model, [query]))[0]
        return memory.votes(vector)

    async def _embed_rows(self, model: str, texts: list[str]) -> Vector:
        tuned = model.removesuffix(TUNED_SUFFIX)
        embedder = self.tuned[tuned] if tuned != model else self.embedders[model]
        return await self._in_thread(
            f"model:{model}", lambda: embedder.embed_queries(texts), self.defaults.embed_timeout_s
        )

    def _fuse(
        self,
        method: FusionMethod,
        lists: Mapping[str, Sequence[SearchHit]],
        *,
        weights: Mapping[str, float],
        k: float,
        dense: Sequence[str],
    ) -> list[FusedHit]:
        if method == "rrf":
            return fuse_rrf(lists, k=k, weights=weights)
        if method == "score":
            return fuse_scores(lists, weights=weights)
        return fuse_pages(
            lists, k=k, weights=weights, dense=dense, every_paragraph=self.defaults.page_rrf_every_paragraph
        )

    async def _rerank(self, query: str, fused: list[FusedHit], result: RetrievalResult) -> list[FusedHit]:
        """Score the top N with the cross-encoder, reorder, cut at the floor and the gap."""
        reranker = self.reranker
        if reranker is None:  # pragma: no cover - guarded by _wants_rerank
            return fused
        top = fused[: self.defaults.rerank_top_n]
        passages = [str(h.source.get(self.definition.field_for_llm) or "") for h in top]
        scores = await self._in_thread(
            "reranker", lambda: reranker.score(query, passages), self.defaults.embed_timeout_s
        )
        order, kept = apply_rerank(
            top,
            [float(s) for s in scores],
            min_score=self.defaults.rerank_min_score,
            gap_ratio=self.defaults.rerank_gap_ratio,
            weight=self.defaults.rerank_weight,
        )
        result.rerank_scores = order
        result.rerank_kept = kept
        reranked: list[FusedHit] = []
        for hit, score in order[:kept]:
            reranked.append(
                FusedHit(
                    doc_id=hit.doc_id,
                    score=score,
                    source=hit.source,
                    ranks=hit.ranks,
                    raw_scores=hit.raw_scores,
                )
            )
        return reranked
