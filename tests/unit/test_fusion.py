"""Pure ranking functions: RRF as kolzchut-ragbot computes it, score fusion, page grouping, cutoffs."""

from __future__ import annotations

from typing import Any

import pytest

from ragbot.ports import SearchHit
from ragbot.retrieval.fusion import (
    apply_relevance_threshold,
    apply_rerank,
    fuse_pages,
    fuse_rrf,
    fuse_scores,
    group_by_page,
    group_ranked,
    min_max,
    page_rrf_scores,
    reciprocal_rank_fusion,
    rerank_cutoff,
    rrf_scores,
)


def hit(page: int, par: int, score: float, **source: Any) -> SearchHit:
    return SearchHit(
        doc_id=f"{page}-1-{par}", score=score, source={"page_id": page, "paragraph": par, **source}
    )


# -- reciprocal_rank_fusion: kolzchut-ragbot's function, exactly ------------------------------------------


def test_rrf_matches_kolzchut_ragbots_test() -> None:
    assert reciprocal_rank_fusion([[1, 2, 3], [2, 3, 4], [3, 4, 5]]) == [3, 2, 4, 1, 5]


def test_rrf_scores_are_sum_of_weight_over_k_plus_rank_plus_one() -> None:
    scores = rrf_scores([["a", "b"], ["b"]], k=10, weights=[2.0, 0.5])
    assert scores["a"] == pytest.approx(2.0 / 11)
    assert scores["b"] == pytest.approx(2.0 / 12 + 0.5 / 11)


def test_rrf_ties_keep_first_seen_order() -> None:
    # x and y tie exactly (rank 0 once each); kolzchut-ragbot's stable sort keeps insertion order.
    assert reciprocal_rank_fusion([["x"], ["y"]]) == ["x", "y"]
    assert reciprocal_rank_fusion([["y"], ["x"]]) == ["y", "x"]


def test_rrf_weights_change_the_winner() -> None:
    assert reciprocal_rank_fusion([["a"], ["b"]], k=60, weights=[1, 3]) == ["b", "a"]


def test_rrf_empty_weights_mean_equal_weights_like_kolzchut_ragbot() -> None:
    assert reciprocal_rank_fusion([[1, 2], [2, 1]], weights=[]) == reciprocal_rank_fusion([[1, 2], [2, 1]])


def test_rrf_duplicates_in_a_list_count_at_each_rank() -> None:
    # kolzchut-ragbot fuses page ids, one per paragraph: a page with two paragraphs scores at both ranks.
    scores = rrf_scores([[7, 7, 8]], k=3)
    assert scores[7] == pytest.approx(1 / 4 + 1 / 5)
    assert reciprocal_rank_fusion([[8, 7, 7]], k=3) == [7, 8]


def test_rrf_too_few_weights_is_refused() -> None:
    with pytest.raises(ValueError, match="weights"):
        reciprocal_rank_fusion([[1], [2]], weights=[1.0])


def test_rrf_of_nothing_is_empty() -> None:
    assert reciprocal_rank_fusion([]) == []
    assert reciprocal_rank_fusion([[], []]) == []


# -- hit-list fusion -------------------------------------------------------------------------------


def test_fuse_rrf_over_hits_sums_per_paragraph_with_weights() -> None:
    dense = [hit(1, 0, 1.9), hit(2, 0, 1.8)]
    bm25 = [hit(2, 0, 12.0), hit(3, 0, 9.0)]
    fused = fuse_rrf({"dense": dense, "bm25": bm25}, k=60, weights={"dense": 1.0, "bm25": 2.0})
    assert [f.doc_id for f in fused] == ["2-1-0", "3-1-0", "1-1-0"]
    top = fused[0]
    assert top.score == pytest.approx(1 / 62 + 2 / 61)
    assert top.ranks == {"dense": 1, "bm25": 0}
    assert top.raw_scores == {"dense": 1.8, "bm25": 12.0}
    assert top.page_id == 2


def test_fuse_rrf_refuses_bad_weights() -> None:
    with pytest.raises(ValueError, match="finite"):
        fuse_rrf({"a": [hit(1, 0, 1.0)]}, weights={"a": float("nan")})
    with pytest.raises(ValueError, match="unknown"):
        fuse_rrf({"a": [hit(1, 0, 1.0)]}, weights={"b": 1.0})


def test_min_max_scales_each_list_and_handles_flat_lists() -> None:
    assert min_max([3.0, 2.0, 1.0]) == [1.0, 0.5, 0.0]
    assert min_max([5.0, 5.0]) == [1.0, 1.0]
    assert min_max([]) == []


def test_score_fusion_normalises_then_weights() -> None:
    dense = [hit(1, 0, 1.9), hit(2, 0, 1.5), hit(3, 0, 1.1)]  # -> 1.0, 0.5, 0.0
    bm25 = [hit(3, 0, 20.0), hit(2, 0, 10.0)]  # -> 1.0, 0.0
    fused = fuse_scores({"dense": dense, "bm25": bm25}, weights={"dense": 1.0, "bm25": 0.8})
    scores = {f.doc_id: f.score for f in fused}
    assert scores == pytest.approx({"1-1-0": 1.0, "2-1-0": 0.5, "3-1-0": 0.8})
    assert [f.doc_id for f in fused] == ["1-1-0", "3-1-0", "2-1-0"]


# -- kolzchut-ragbot's page-level RRF ---------------------------------------------------------------------


def test_page_rrf_ranks_a_page_at_its_first_paragraph_with_k_as_pages_requested() -> None:
    model_a = [hit(10, 0, 1.9), hit(20, 0, 1.8), hit(10, 1, 1.7)]
    model_b = [hit(20, 3, 1.95), hit(30, 0, 1.6)]
    scores = page_rrf_scores({"a": model_a, "b": model_b}, k=2, weights={"b": 2.0})
    assert scores[10] == pytest.approx(1 / 3)
    assert scores[20] == pytest.approx(1 / 4 + 2 / 3)
    assert scores[30] == pytest.approx(2 / 4)


def test_page_rrf_every_paragraph_is_kolzchut_ragbots_code_exactly() -> None:
    model_a = [hit(10, 0, 1.9), hit(20, 0, 1.8), hit(10, 1, 1.7)]
    model_b = [hit(20, 3, 1.95), hit(30, 0, 1.6)]
    scores = page_rrf_scores({"a": model_a, "b": model_b}, k=2, every_paragraph=True)
    assert scores[10] == pytest.approx(1 / 3 + 1 / 5)
    # Same order as kolzchut-ragbot's own function over its duplicated page-id lists.
    assert sorted(scores, key=lambda p: scores[p], reverse=True) == reciprocal_rank_fusion(
        [[10, 20, 10], [20, 30]], k=2
    )
    many_weak = [hit(1, 0, 1.9), hit(2, 0, 1.5), hit(2, 1, 1.5), hit(2, 2, 1.5)]
    first_only = fuse_pages({"a": many_weak}, k=2)
    every = fuse_pages({"a": many_weak}, k=2, every_paragraph=True)
    assert first_only[0].page_id == 1 and every[0].page_id == 2


def test_fuse_pages_orders_paragraphs_in_a_page_by_score() -> None:
    model_a = [hit(10, 0, 1.5), hit(10, 1, 1.9)]
    model_b = [hit(10, 2, 1.7), hit(20, 0, 1.6)]
    bm25 = [hit(10, 5, 30.0)]
    fused = fuse_pages({"a": model_a, "b": model_b, "bm25": bm25}, k=3, dense=["a", "b"])
    assert [f.doc_id for f in fused] == ["10-1-1", "10-1-2", "10-1-0", "10-1-5", "20-1-0"]
    assert fused[0].score == fused[3].score  # a paragraph carries its page's score


# -- threshold and grouping ------------------------------------------------------------------------


def test_threshold_drops_weak_paragraphs_and_zero_keeps_all() -> None:
    hits = [hit(1, 0, 1.7), hit(1, 1, 1.59), hit(2, 0, 1.6)]
    assert [h.doc_id for h in apply_relevance_threshold(hits, 1.6)] == ["1-1-0", "2-1-0"]
    assert apply_relevance_threshold(hits, 0) == hits


def test_group_by_page_takes_pages_and_paragraph_counts_like_kolzchut_ragbot() -> None:
    by_page = {
        1: [hit(1, 0, 1), hit(1, 1, 1), hit(1, 2, 1), hit(1, 3, 1)],
        2: [hit(2, 0, 1), hit(2, 1, 1), hit(2, 2, 1)],
        3: [hit(3, 0, 1), hit(3, 1, 1)],
        4: [hit(4, 0, 1)],
    }
    chosen = group_by_page([1, 2, 3, 4], by_page, [3, 2, 1])
    assert [h.doc_id for h in chosen] == ["1-1-0", "1-1-1", "1-1-2", "2-1-0", "2-1-1", "3-1-0"]


def test_group_by_page_never_returns_a_paragraph_twice_and_handles_short_pages() -> None:
    shared = hit(1, 0, 1)
    by_page = {1: [shared, shared, hit(1, 1, 1)], 2: [hit(2, 0, 1)]}
    chosen = group_by_page([1, 2], by_page, [3, 3, 3])
    assert [h.doc_id for h in chosen] == ["1-1-0", "1-1-1", "2-1-0"]


def test_group_by_page_refuses_negative_counts() -> None:
    with pytest.raises(ValueError):
        group_by_page([1], {1: [hit(1, 0, 1)]}, [-1])


def test_group_ranked_orders_pages_by_their_best_paragraph() -> None:
    ranked = fuse_rrf({"x": [hit(2, 0, 1), hit(1, 0, 1), hit(2, 1, 1), hit(1, 1, 1), hit(3, 0, 1)]})
    chosen = group_ranked(ranked, [1, 2])
    assert [h.doc_id for h in chosen] == ["2-1-0", "1-1-0", "1-1-1"]


# -- rerank cutoffs --------------------------------------------------------------------------------


def test_rerank_cutoff_floor_and_gap_ratio() -> None:
    assert rerank_cutoff([0.9, 0.8, 0.3, 0.2]) == 4
    assert rerank_cutoff([0.9, 0.8, 0.3, 0.2], min_score=0.5) == 2
    assert rerank_cutoff([0.9, 0.8, 0.5, 0.45], gap_ratio=0.7) == 2  # 0.5 < 0.7 * 0.8
    assert rerank_cutoff([0.9, 0.85, 0.8], gap_ratio=0.7) == 3
    assert rerank_cutoff([0.1, 0.05], min_score=0.2) == 0  # "no relevant paragraphs"
    assert rerank_cutoff([], min_score=0.2) == 0


def test_rerank_cutoff_refuses_unsorted_scores_and_bad_ratio() -> None:
    with pytest.raises(ValueError, match="descending"):
        rerank_cutoff([0.1, 0.9])
    with pytest.raises(ValueError, match="gap_ratio"):
        rerank_cutoff([0.5], gap_ratio=1.5)


def test_apply_rerank_reorders_and_counts_kept() -> None:
    ranked = fuse_rrf({"x": [hit(1, 0, 1), hit(2, 0, 1), hit(3, 0, 1)]})
    order, kept = apply_rerank(ranked, [0.2, 0.95, 0.9], min_score=0.5, gap_ratio=None)
    assert [(h.doc_id, s) for h, s in order] == [("2-1-0", 0.95), ("3-1-0", 0.9), ("1-1-0", 0.2)]
    assert kept == 2
    with pytest.raises(ValueError):
        apply_rerank(ranked, [0.1], min_score=None, gap_ratio=None)


def test_apply_rerank_blends_with_the_normalised_fused_score() -> None:
    ranked = fuse_scores({"x": [hit(1, 0, 9.0), hit(2, 0, 5.0), hit(3, 0, 1.0)]})
    assert [h.doc_id for h in ranked] == ["1-1-0", "2-1-0", "3-1-0"]
    cross = [0.2, 0.3, 0.9]
    # weight 1: the cross-encoder alone decides.
    order, _ = apply_rerank(ranked, cross, min_score=None, gap_ratio=None, weight=1.0)
    assert [h.doc_id for h, _ in order] == ["3-1-0", "2-1-0", "1-1-0"]
    # weight 0.5: the fused lead of page 1 (normalised 1.0) outweighs its low rerank score.
    order, kept = apply_rerank(ranked, cross, min_score=0.55, gap_ratio=None, weight=0.5)
    assert [(h.doc_id, round(s, 3)) for h, s in order] == [("1-1-0", 0.6), ("3-1-0", 0.45), ("2-1-0", 0.4)]
    assert kept == 1  # the floor applies to the blended score
    # weight 0: retrieval's own order, scores normalised.
    order, _ = apply_rerank(ranked, cross, min_score=None, gap_ratio=None, weight=0.0)
    assert [(h.doc_id, s) for h, s in order] == [("1-1-0", 1.0), ("2-1-0", 0.5), ("3-1-0", 0.0)]
    with pytest.raises(ValueError, match="weight"):
        apply_rerank(ranked, cross, min_score=None, gap_ratio=None, weight=1.5)
