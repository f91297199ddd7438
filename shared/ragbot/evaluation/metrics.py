"""Ranking metrics (nDCG, recall, MRR at k, trec_eval's linear gains) and latency summaries."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence

import numpy as np

CUTOFFS = (10, 100)
METRICS = ("ndcg@10", "recall@10", "recall@100", "mrr@10")


def ndcg_at_k(ranked: Sequence[str], relevant: Mapping[str, int], k: int) -> float:
    """nDCG@k with linear gains (trec_eval's ``ndcg_cut``, as BEIR reports it)."""
    dcg = sum(max(relevant.get(d, 0), 0) / math.log2(i + 2) for i, d in enumerate(ranked[:k]))
    ideal = sorted((g for g in relevant.values() if g > 0), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg if idcg > 0 else 0.0


def recall_at_k(ranked: Sequence[str], relevant: Mapping[str, int], k: int) -> float:
    """Share of the relevant documents found in the top k."""
    wanted = {d for d, g in relevant.items() if g > 0}
    if not wanted:
        return 0.0
    return len(wanted.intersection(ranked[:k])) / len(wanted)


def mrr_at_k(ranked: Sequence[str], relevant: Mapping[str, int], k: int) -> float:
    """Reciprocal rank of the first relevant document in the top k (0 when none)."""
    for i, d in enumerate(ranked[:k]):
        if relevant.get(d, 0) > 0:
            return 1.0 / (i + 1)
    return 0.0


def score_run(run: Mapping[str, Sequence[str]], qrels: Mapping[str, Mapping[str, int]]) -> dict[str, float]:
    """Mean nDCG@10, recall@10, recall@100 and MRR@10 over the judged queries (missing runs score 0)."""
    if not qrels:
        return dict.fromkeys(METRICS, 0.0)
    totals = dict.fromkeys(METRICS, 0.0)
    for qid, relevant in qrels.items():
        ranked = list(dict.fromkeys(run.get(qid, ())))
        totals["ndcg@10"] += ndcg_at_k(ranked, relevant, 10)
        totals["recall@10"] += recall_at_k(ranked, relevant, 10)
        totals["recall@100"] += recall_at_k(ranked, relevant, 100)
        totals["mrr@10"] += mrr_at_k(ranked, relevant, 10)
    return {name: value / len(qrels) for name, value in totals.items()}


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) by linear interpolation; 0 for no values."""
    if not values:
        return 0.0
    return float(np.percentile(np.asarray(values, dtype=np.float64), q))


def latency_summary(ms: Sequence[float]) -> dict[str, float]:
    """p50, p95 and mean of per-query latencies in milliseconds."""
    return {
        "p50": round(percentile(ms, 50), 2),
        "p95": round(percentile(ms, 95), 2),
        "mean": round(statistics.fmean(ms), 2) if ms else 0.0,
    }
