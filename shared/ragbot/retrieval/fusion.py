"""Pure ranking functions: reciprocal rank fusion, score fusion, page grouping and rerank cutoffs.

Nothing here touches a store or a model; the retrieval engine feeds these with ranked hit lists.
Three fusion methods, chosen per request or by ``RetrieverSettings.default_fusion``:

- ``rrf``: weighted reciprocal rank fusion over paragraphs (``score = sum w / (k + rank + 1)``).
- ``page_rrf``: kolzchut-ragbot's mode. Every ranked list is read as page ids (one per paragraph; a
  page ranks where its first paragraph stands), fused with ``k`` = number of pages requested; each
  top page then gives its paragraphs in order of their scores. ``every_paragraph=True`` counts a
  page at every one of its paragraphs' ranks, as kolzchut-ragbot's code summed duplicated page ids.
- ``score``: min-max normalisation per list, then a weighted sum.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from ragbot.ports import SearchHit

T = TypeVar("T", bound=Hashable)

DEFAULT_RRF_K = 60


class _HasDocId(Protocol):
    @property
    def doc_id(self) -> str: ...


H = TypeVar("H", bound=_HasDocId)


@dataclass(slots=True)
class FusedHit:
    """A paragraph after fusion: its fused score and, per branch, its rank and raw score there."""

    doc_id: str
    score: float
    source: dict[str, Any]
    ranks: dict[str, int] = field(default_factory=dict)
    raw_scores: dict[str, float] = field(default_factory=dict)

    @property
    def page_id(self) -> int:
        """The page the paragraph belongs to."""
        return int(self.source["page_id"])


def rrf_scores(
    ranking_lists: Sequence[Sequence[T]], k: float = DEFAULT_RRF_K, weights: Sequence[float] | None = None
) -> dict[T, float]:
    """Cumulative RRF score per identifier, in first-seen order (kolzchut-ragbot's loop: exact ties)."""
    if weights and len(weights) < len(ranking_lists):
        raise ValueError(f"{len(weights)} weights for {len(ranking_lists)} ranking lists")
    scores: dict[T, float] = defaultdict(float)
    for list_index, rank_list in enumerate(ranking_lists):
        w = weights[list_index] if weights else 1
        for rank, identifier in enumerate(rank_list):
            scores[identifier] += w / (k + rank + 1)
    return dict(scores)


def reciprocal_rank_fusion(
    ranking_lists: Sequence[Sequence[T]], k: float = DEFAULT_RRF_K, weights: Sequence[float] | None = None
) -> list[T]:
    """Fuse ranked id lists, best first, exactly as kolzchut-ragbot (stable sort: ties keep first-seen)."""
    scores = rrf_scores(ranking_lists, k=k, weights=weights)
    return sorted(scores, key=lambda ident: scores[ident], reverse=True)


def apply_relevance_threshold(hits: Sequence[SearchHit], threshold: float) -> list[SearchHit]:
    """Drop paragraphs scoring below ``threshold`` (kolzchut-ragbot's scale: cosine + 1); 0 keeps all."""
    if threshold <= 0:
        return list(hits)
    return [h for h in hits if h.score >= threshold]


def _check_weights(lists: Mapping[str, Sequence[SearchHit]], weights: Mapping[str, float] | None) -> None:
    for name, w in (weights or {}).items():
        if not math.isfinite(w) or w < 0:
            raise ValueError(f"weight of {name!r} must be a finite number >= 0, got {w!r}")
    missing = set(weights or {}) - set(lists)
    if missing:
        raise ValueError(f"weights given for unknown lists {sorted(missing)}")


def _collect(lists: Mapping[str, Sequence[SearchHit]]) -> dict[str, FusedHit]:
    """One FusedHit per paragraph, in first-seen order, carrying its rank and raw score per branch."""
    fused: dict[str, FusedHit] = {}
    for name, hits in lists.items():
        for rank, hit in enumerate(hits):
            entry = fused.get(hit.doc_id)
            if entry is None:
                entry = fused[hit.doc_id] = FusedHit(doc_id=hit.doc_id, score=0.0, source=dict(hit.source))
            if name not in entry.ranks:  # a list names a paragraph once; ignore repeats
                entry.ranks[name] = rank
                entry.raw_scores[name] = hit.score
    return fused


def _sorted(fused: Iterable[FusedHit]) -> list[FusedHit]:
    return sorted(fused, key=lambda f: f.score, reverse=True)


def fuse_rrf(
    lists: Mapping[str, Sequence[SearchHit]],
    *,
    k: float = DEFAULT_RRF_K,
    weights: Mapping[str, float] | None = None,
) -> list[FusedHit]:
    """Weighted RRF over paragraph hit lists (a list missing from ``weights`` weighs 1), best first."""
    _check_weights(lists, weights)
    fused = _collect(lists)
    w = weights or {}
    for entry in fused.values():
        entry.score = sum(w.get(name, 1.0) / (k + rank + 1) for name, rank in entry.ranks.items())
    return _sorted(fused.values())


def min_max(scores: Sequence[float]) -> list[float]:
    """Scale scores to 0..1 within their list; a list of equal scores maps to 1.0 each."""
    if not scores:
        return []
    lo, hi = min(scores), max(scores)
    if hi - lo <= 1e-12:
        return [1.0] * len(scores)
    return [(s - lo) / (hi - lo) for s in scores]


def fuse_scores(
    lists: Mapping[str, Sequence[SearchHit]], *, weights: Mapping[str, float] | None = None
) -> list[FusedHit]:
    """Min-max normalise each list's raw scores, then sum them weighted (absent from a list = 0)."""
    _check_weights(lists, weights)
    fused = _collect(lists)
    w = weights or {}
    normalised = {
        name: dict(zip((h.doc_id for h in hits), min_max([h.score for h in hits]), strict=True))
        for name, hits in lists.items()
    }
    for entry in fused.values():
        entry.score = sum(w.get(name, 1.0) * normalised[name][entry.doc_id] for name in entry.ranks)
    return _sorted(fused.values())


def page_rrf_scores(
    lists: Mapping[str, Sequence[SearchHit]],
    *,
    k: float,
    weights: Mapping[str, float] | None = None,
    every_paragraph: bool = False,
) -> dict[int, float]:
    """kolzchut-ragbot's page fusion: each list read as page ids, one per paragraph, fused by RRF with ``k``.

    A page's rank in a list is the position of its first paragraph there. ``every_paragraph=True``
    also adds the ranks of its later paragraphs, as kolzchut-ragbot's code summed its duplicated page ids
    (a page with many middling paragraphs then outranks one with a single excellent paragraph).
    """
    _check_weights(lists, weights)
    w = weights or {}
    if every_paragraph:
        names = list(lists)
        return rrf_scores(
            [[h.page_id for h in lists[name]] for name in names], k=k, weights=[w.get(n, 1.0) for n in names]
        )
    scores: dict[int, float] = defaultdict(float)
    for name, hits in lists.items():
        weight = w.get(name, 1.0)
        seen: set[int] = set()
        for rank, hit in enumerate(hits):
            if hit.page_id not in seen:
                seen.add(hit.page_id)
                scores[hit.page_id] += weight / (k + rank + 1)
    return dict(scores)


def fuse_pages(
    lists: Mapping[str, Sequence[SearchHit]],
    *,
    k: float,
    weights: Mapping[str, float] | None = None,
    dense: Sequence[str] | None = None,
    every_paragraph: bool = False,
) -> list[FusedHit]:
    """Page-level RRF, flattened: pages best first, each page's paragraphs by score (see module doc).

    Within a page, paragraphs found by a dense list come first, by their best raw dense score (every
    dense list is on the same cosine + 1 scale); paragraphs found only by other lists (BM25) follow,
    by their best raw score there. ``dense`` names the dense lists (default: all). A paragraph's
    ``score`` is its page's fused score.
    """
    page_scores = page_rrf_scores(lists, k=k, weights=weights, every_paragraph=every_paragraph)
    pages = sorted(page_scores, key=lambda p: page_scores[p], reverse=True)
    fused = _collect(lists)
    dense_names = set(lists if dense is None else dense)
    by_page: dict[int, list[FusedHit]] = defaultdict(list)
    for entry in fused.values():
        entry.score = page_scores[entry.page_id]
        by_page[entry.page_id].append(entry)

    def within_page(entry: FusedHit) -> tuple[int, float]:
        dense_scores = [s for n, s in entry.raw_scores.items() if n in dense_names]
        if dense_scores:
            return (0, -max(dense_scores))
        return (1, -max(entry.raw_scores.values()))

    return [entry for page in pages for entry in sorted(by_page[page], key=within_page)]


def page_order(hits: Iterable[H], page_of: Callable[[H], int]) -> list[int]:
    """Pages in order of their first paragraph in a ranked list."""
    return list(dict.fromkeys(page_of(h) for h in hits))


def group_by_page(
    fused_pages: Sequence[int], hits_by_page: Mapping[int, Sequence[H]], paragraphs_per_page: Sequence[int]
) -> list[H]:
    """kolzchut-ragbot's trimming: the top ``len(paragraphs_per_page)`` pages, at most
    ``paragraphs_per_page[i]`` paragraphs from the i-th, in order, never the same paragraph twice."""
    if any(n < 0 for n in paragraphs_per_page):
        raise ValueError("paragraphs_per_page entries must be >= 0")
    chosen: list[H] = []
    seen: set[str] = set()
    for page, limit in zip(fused_pages, paragraphs_per_page, strict=False):
        taken = 0
        for hit in hits_by_page.get(page, ()):
            if taken >= limit:
                break
            if hit.doc_id in seen:
                continue
            chosen.append(hit)
            seen.add(hit.doc_id)
            taken += 1
    return chosen


def group_ranked(ranked: Sequence[FusedHit], paragraphs_per_page: Sequence[int]) -> list[FusedHit]:
    """Group a ranked paragraph list by page: pages by their best paragraph, paragraphs in list order."""
    by_page: dict[int, list[FusedHit]] = defaultdict(list)
    for hit in ranked:
        by_page[hit.page_id].append(hit)
    return group_by_page(page_order(ranked, lambda h: h.page_id), by_page, paragraphs_per_page)


def rerank_cutoff(
    scores: Sequence[float], *, min_score: float | None = None, gap_ratio: float | None = None
) -> int:
    """How many of the (descending) rerank ``scores`` to keep.

    A score below ``min_score`` stops the list (the floor); with ``gap_ratio`` r, the list also stops
    at the first score below r times the previous kept one (a cliff after the relevant paragraphs).
    The ratio is meant for non-negative scores (probabilities); it is not applied after a kept score
    <= 0. Returns 0 when nothing passes: "no relevant paragraphs".
    """
    if gap_ratio is not None and not 0 <= gap_ratio <= 1:
        raise ValueError("gap_ratio must be between 0 and 1")
    kept = 0
    previous: float | None = None
    for s in scores:
        if previous is not None and s > previous + 1e-12:
            raise ValueError("rerank scores must be sorted in descending order")
        if min_score is not None and s < min_score:
            break
        if gap_ratio is not None and previous is not None and previous > 0 and s < gap_ratio * previous:
            break
        kept += 1
        previous = s
    return kept


def apply_rerank(
    ranked: Sequence[FusedHit],
    scores: Sequence[float],
    *,
    min_score: float | None,
    gap_ratio: float | None,
    weight: float = 1.0,
) -> tuple[list[tuple[FusedHit, float]], int]:
    """Order candidates by rerank score and cut them; returns (every candidate with its score, kept count).

    With ``weight`` w < 1 the score is w x the cross-encoder's plus (1 - w) x the fused score min-max
    normalised over these candidates (both 0..1): a small reranker then adjusts retrieval's order
    instead of replacing it. The floor and the gap ratio apply to that score.
    """
    if len(ranked) != len(scores):
        raise ValueError(f"{len(scores)} rerank scores for {len(ranked)} candidates")
    if not 0 <= weight <= 1:
        raise ValueError("weight must be between 0 and 1")
    final = list(scores)
    if weight < 1 and ranked:
        fused = [h.score for h in ranked]
        low, span = min(fused), max(fused) - min(fused)
        norm = [(f - low) / span if span > 0 else 1.0 for f in fused]
        final = [weight * s + (1 - weight) * n for s, n in zip(scores, norm, strict=True)]
    order = sorted(zip(ranked, final, strict=True), key=lambda pair: pair[1], reverse=True)
    kept = rerank_cutoff([s for _, s in order], min_score=min_score, gap_ratio=gap_ratio)
    return order, kept
