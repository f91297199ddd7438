"""What a retrieval is configured with and what it produces: defaults, branches, results, candidates."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ragbot.definition import is_vector_field
from ragbot.ports import SearchHit
from ragbot.retrieval.fusion import DEFAULT_RRF_K, FusedHit, page_order
from ragbot.retrieval.translation import CONTEXT_WEIGHT
from ragbot.schemas.retrieval import FusionMethod, SearchMode
from ragbot.settings import RetrieverSettings
from ragbot.settings.retrieval import QUERY_TUNING_SCRIPTS

BM25_BRANCH = "bm25"


@dataclass(frozen=True, slots=True)
class RetrievalDefaults:
    """What a request that leaves a knob out gets; built from ``RetrieverSettings``."""

    mode: SearchMode = "hybrid"
    fusion: FusionMethod = "rrf"
    rrf_k: int = DEFAULT_RRF_K
    bm25_weight: float = 1.0
    rerank: bool = True
    rerank_top_n: int = 20
    rerank_min_score: float | None = None
    rerank_gap_ratio: float | None = None
    rerank_weight: float = 1.0
    max_query_chars: int = 2000
    store_timeout_s: float = 10.0
    embed_timeout_s: float = 30.0
    # page_rrf: count a page at every paragraph's rank (kolzchut-ragbot's code) instead of its first one.
    page_rrf_every_paragraph: bool = False
    # Fuse only the dense branches that serve the question's language (ragbot.retrieval.routing).
    language_routing: bool = True
    # Per question language, a factor on the weight of each branch by model name or "bm25" (settings).
    language_weights: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    # A translated question's BM25 query also holds its translated words (settings).
    translation_bm25: bool = True
    # The weight of the whole question in choosing each word's translation (settings).
    translation_context: float = CONTEXT_WEIGHT
    # How much the question memory's votes add, in units of the best fused score (0: not consulted),
    # and how much more when the nearest remembered question's cosine passes memory_near.
    memory_weight: float = 0.5
    memory_near: float = 0.9
    memory_near_weight: float = 5.0
    # The scripts whose questions search with a tuned query encoder (ragbot.retrieval.tuned).
    tuning_scripts: tuple[str, ...] = QUERY_TUNING_SCRIPTS

    @classmethod
    def from_settings(cls, settings: RetrieverSettings) -> RetrievalDefaults:
        """The service's configured defaults."""
        return cls(
            mode=settings.default_mode,
            fusion=settings.default_fusion,
            rrf_k=settings.rrf_k,
            bm25_weight=settings.bm25_weight,
            rerank=settings.default_rerank,
            rerank_top_n=settings.rerank_top_n,
            rerank_min_score=settings.rerank_min_score,
            rerank_gap_ratio=settings.rerank_gap_ratio,
            rerank_weight=settings.rerank_weight,
            max_query_chars=settings.max_query_chars,
            store_timeout_s=settings.store_timeout_s,
            embed_timeout_s=settings.embed_timeout_s,
            language_routing=settings.language_routing,
            language_weights=settings.language_weights,
            translation_bm25=settings.translation_bm25,
            translation_context=settings.translation_context,
            memory_weight=settings.question_memory_weight,
            memory_near=settings.question_memory_near,
            memory_near_weight=settings.question_memory_near_weight,
            tuning_scripts=tuple(settings.query_tuning_scripts),
        )


@dataclass(frozen=True, slots=True)
class Branch:
    """One ranked list the engine fuses: a dense (model, field) search or BM25. A ``tuned`` dense branch
    searches the same stored vectors as its untuned twin with the model's tuned query encoder."""

    name: str
    kind: Literal["dense", "bm25"]
    weight: float
    model: str | None = None
    field: str | None = None
    tuned: bool = False


# A tuned branch's name: its twin's, with this after it.
TUNED_SUFFIX = "@tuned"


@dataclass(slots=True)
class RetrievalResult:
    """Everything one retrieval produced, before it is shaped for HTTP or the compat API."""

    query: str
    mode: SearchMode
    fusion: FusionMethod
    rrf_k: float
    branches: list[Branch]
    candidates: dict[str, list[SearchHit]]
    dropped_by_threshold: dict[str, int]
    fused: list[FusedHit]
    documents: list[FusedHit]
    rerank_scores: list[tuple[FusedHit, float]] | None = None
    rerank_kept: int | None = None
    timings_ms: dict[str, float] = field(default_factory=dict)
    # The language routing's view (``ragbot.retrieval.routing.Routing.as_debug``), None in lexical mode.
    routing: dict[str, Any] | None = None
    # Dense branches routing left out (their models do not serve the question's language).
    skipped_branches: list[Branch] = field(default_factory=list)
    # An English question's words translated into the corpus's language: model, language and words.
    translation: dict[str, str] | None = None
    # The question memory's neighbours, page vote shares (``Votes.as_debug``) and the weight it added.
    memory: dict[str, Any] | None = None

    @property
    def no_relevant_paragraphs(self) -> bool:
        """True when the reranker found nothing above its floor."""
        return self.rerank_kept == 0


def strip_vector_fields(source: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a stored source without any ``*_vectors`` key."""
    return {k: v for k, v in source.items() if not is_vector_field(k)}


def candidate(hit: SearchHit, title_field: str = "title") -> dict[str, Any]:
    """One branch candidate as the debug output lists it."""
    return {
        "_id": hit.doc_id,
        "score": hit.score,
        "title": hit.source.get(title_field),
        "page_id": hit.page_id,
        "paragraph": hit.source.get("paragraph"),
    }


def debug_view(result: RetrievalResult, languages_of: Callable[[Branch], Sequence[str]]) -> dict[str, Any]:
    """The debug view of a retrieval: every branch's candidates with raw scores (``languages_of``: the
    languages a branch's vectors serve), the fused list, the rerank scores."""
    branches: dict[str, Any] = {}
    for b in result.branches:
        branches[b.name] = {
            "kind": b.kind,
            "model": b.model,
            "field": b.field,
            "weight": b.weight,
            "languages": list(languages_of(b)),
            "tuned": b.tuned,
            "dropped_by_threshold": result.dropped_by_threshold.get(b.name, 0),
            "candidates": [candidate(h) for h in result.candidates.get(b.name, [])],
        }
    debug: dict[str, Any] = {
        "mode": result.mode,
        "fusion": result.fusion,
        "rrf_k": result.rrf_k,
        "branches": branches,
        "routing": result.routing,
        "fused": [
            {
                "_id": f.doc_id,
                "page_id": f.page_id,
                "score": f.score,
                "ranks": f.ranks,
                "raw_scores": f.raw_scores,
            }
            for f in result.fused
        ],
        "pages": page_order(result.documents, lambda h: h.page_id),
        "rerank": None,
        "translation": result.translation,
        "memory": result.memory,
    }
    if result.rerank_scores is not None:
        debug["rerank"] = {
            "scores": [{"_id": h.doc_id, "page_id": h.page_id, "score": s} for h, s in result.rerank_scores],
            "kept": result.rerank_kept,
            "no_relevant_paragraphs": result.no_relevant_paragraphs,
        }
    return debug
