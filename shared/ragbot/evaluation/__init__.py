"""Retrieval quality on BEIR-layout data, measured through ragbot's real indexing and retrieval paths.

``ragbot eval --dataset DIR`` drives this module:

1. ``load_beir`` reads ``corpus.jsonl``, ``queries.jsonl`` and ``qrels/<split>.tsv``.
2. ``index_dataset`` turns every corpus document into one page (title + text) and writes it through
   the indexing pipeline the embedder worker uses (``ragbot.indexing.pipeline``: split with the same
   ``SplitOptions``, embed every (model, field) pair, ``replace_pages``). A long document becomes
   several paragraphs of one page.
3. ``run_config`` sends every query through ``RetrievalEngine.run`` with ``paragraphs_per_page`` of
   ``[1] * pages``: the ranked pages are the ranked documents (a page ranks by its best paragraph).
4. ``score_run`` computes nDCG@10 (trec_eval's linear gains), recall@10, recall@100 and MRR@10,
   averaged over the queries that have judgements; latency is the wall time of each query's
   retrieval, query embedding included, one query at a time.

Every configuration uses the engine's defaults (``RetrieverSettings``) except what it names: BM25
alone, each dense model alone, hybrid, hybrid + rerank when a reranker is given, and "default" (a
request that names nothing: the figure the targets are about). Reranked documents are what the engine
returns: at most ``rerank_top_n`` paragraphs, so a reranked recall@100 is bounded by the rerank depth.

``VectorCache`` keeps passage and query vectors on disk between runs (experiments re-index the same
corpus many times on a two-core machine); the indexing path is unchanged, only the model call is
skipped for texts seen before.
"""

from __future__ import annotations

from ragbot.evaluation.cache import VectorCache
from ragbot.evaluation.configs import MAX_PAGES, EvalConfig, eval_definition, standard_configs
from ragbot.evaluation.data import (
    BeirDataset,
    BeirDocument,
    beir_page,
    corpus_texts,
    load_beir,
    load_qrels,
    page_ids,
    pairs_from_beir,
)
from ragbot.evaluation.metrics import (
    CUTOFFS,
    METRICS,
    latency_summary,
    mrr_at_k,
    ndcg_at_k,
    percentile,
    recall_at_k,
    score_run,
)
from ragbot.evaluation.report import ConfigResult, EvalReport, draw_chart, write_report
from ragbot.evaluation.run import IndexStats, evaluate, index_dataset, run_config

__all__ = [
    "CUTOFFS",
    "MAX_PAGES",
    "METRICS",
    "BeirDataset",
    "BeirDocument",
    "ConfigResult",
    "EvalConfig",
    "EvalReport",
    "IndexStats",
    "VectorCache",
    "beir_page",
    "corpus_texts",
    "draw_chart",
    "eval_definition",
    "evaluate",
    "index_dataset",
    "latency_summary",
    "load_beir",
    "load_qrels",
    "mrr_at_k",
    "ndcg_at_k",
    "page_ids",
    "pairs_from_beir",
    "percentile",
    "recall_at_k",
    "run_config",
    "score_run",
    "standard_configs",
    "write_report",
]
