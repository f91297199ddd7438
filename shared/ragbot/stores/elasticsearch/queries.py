"""Elasticsearch search bodies: the kNN query, the BM25 match, filter clauses, and hits from responses."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ragbot.ports import SearchHit, Vector
from ragbot.settings import StoreSettings
from ragbot.stores.common import BM25_SUFFIX, DEFAULT_BM25_FIELD, MAX_K, Filter, strip_internal
from ragbot.stores.mapping import SOURCE_EXCLUDES as _EXCLUDED

SOURCE_EXCLUDES = list(_EXCLUDED)


def filter_clauses(filters: Sequence[Filter]) -> list[dict[str, Any]]:
    """One ``terms`` clause per filter (any of its values)."""
    return [{"terms": {f.field: list(f.values)}} for f in filters]


def hit(raw: Mapping[str, Any], score: float) -> SearchHit:
    """A hit from one response document, without the store's internal fields."""
    return SearchHit(doc_id=str(raw["_id"]), score=score, source=strip_internal(raw.get("_source") or {}))


def knn_query(
    *, vector_field: str, vector: Vector, k: int, filters: Sequence[Filter], settings: StoreSettings
) -> dict[str, Any]:
    """The ``knn`` query body for ``StoreSettings.vector_search`` (exact, quantized or approximate)."""
    mode = settings.vector_search
    # The knn *query* (not the top-level knn section): one query phase per shard, no separate kNN
    # phase first. Each shard returns its best ``num_candidates``; for flat and int8_flat that is
    # that shard's exact top k, so the merged top k is the index's.
    knn: dict[str, Any] = {
        "field": vector_field,
        "query_vector": np.asarray(vector, dtype=np.float32).tolist(),
        "num_candidates": k
        if mode != "approximate"
        else min(MAX_K, max(k, k * settings.hnsw_num_candidates_factor)),
    }
    if mode == "quantized":  # int8 pass, then k x oversample candidates rescored on the floats
        knn["rescore_vector"] = {"oversample": settings.quantized_oversample}
    if filters:
        knn["filter"] = filter_clauses(filters)
    return {"knn": knn}


def knn_score(raw: Mapping[str, Any]) -> float:
    """Elasticsearch scores cosine as (1 + cos) / 2; kolzchut-ragbot's scale is cos + 1 (0..2)."""
    return min(2.0, max(0.0, 2.0 * float(raw["_score"])))


def bm25_query(
    *,
    tokens: Sequence[str],
    weighted: Sequence[tuple[str, float]],
    one_field: bool,
    filters: Sequence[Filter],
) -> dict[str, Any]:
    """A term query on ``DEFAULT_BM25_FIELD`` when ``one_field``, else ``combined_fields`` (BM25F)."""
    match: dict[str, Any]
    if one_field:
        match = {"match": {DEFAULT_BM25_FIELD: {"query": " ".join(tokens), "operator": "or"}}}
    else:
        match = {
            "combined_fields": {
                "query": " ".join(tokens),
                "fields": [f"{name}{BM25_SUFFIX}^{weight:g}" for name, weight in weighted],
                "operator": "or",
            }
        }
    return {"bool": {"must": [match], "filter": filter_clauses(filters)}}
