"""Retrieval: the engine that turns a query into grouped, fused (and optionally reranked) paragraphs."""

from ragbot.retrieval.engine import RetrievalEngine
from ragbot.retrieval.results import (
    BM25_BRANCH,
    Branch,
    RetrievalDefaults,
    RetrievalResult,
    strip_vector_fields,
)

__all__ = [
    "BM25_BRANCH",
    "Branch",
    "RetrievalDefaults",
    "RetrievalEngine",
    "RetrievalResult",
    "strip_vector_fields",
]
