"""Choose the retriever's default fusion by measurement: a grid of fusion settings on a BEIR dataset.

Indexes the dataset through the real path once (or reuses ``--store-path``), then runs hybrid
retrieval with every fusion variant (RRF with several k and BM25 weights, page-level RRF, min-max
score fusion) and prints nDCG@10 / recall@100 / MRR@10 per variant; writes
``bench/results/fusion_<dataset>.json``. The defaults in ``RetrieverSettings`` come from these runs
(see docs/benchmarks.md).

Run: ``uv run python -m bench.retrieval.fusion_sweep --dataset DIR --models all-MiniLM-L6-v2 \
--store-path var/eval/scifact.sqlite3 --cache-dir var/eval-cache [--reranker DIR]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

from bench.retrieval.sweep_store import indexed_store
from ragbot.definition import load_definition
from ragbot.evaluation import (
    EvalConfig,
    eval_definition,
    load_beir,
    run_config,
)
from ragbot.ports import Reranker
from ragbot.rerankers import build_reranker
from ragbot.retrieval import RetrievalDefaults, RetrievalEngine
from ragbot.settings import get_model_settings

RESULTS = Path(__file__).parents[1] / "results"


def variants(with_rerank: bool) -> list[EvalConfig]:
    """The grid: RRF k x BM25 weight, page RRF, score fusion x BM25 weight (and rerank on top)."""
    grid = [EvalConfig("bm25", "lexical")]
    for k in (10, 30, 60, 100):
        for w in (0.5, 1.0, 1.5, 2.0):
            grid.append(EvalConfig(f"rrf k={k} bm25={w}", "hybrid", fusion="rrf", rrf_k=k, bm25_weight=w))
    for k in (3, 10, 60):
        grid.append(EvalConfig(f"page_rrf k={k}", "hybrid", fusion="page_rrf", rrf_k=k))
    for w in (0.5, 1.0, 1.5, 2.0, 3.0):
        grid.append(EvalConfig(f"score bm25={w}", "hybrid", fusion="score", bm25_weight=w))
    if with_rerank:
        grid += [
            EvalConfig(c.name + " +rerank", c.mode, c.models, c.bm25_weight, c.fusion, c.rrf_k, rerank=True)
            for c in grid
            if c.mode == "hybrid"
        ]
    return grid


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dataset", type=Path, required=True)
    parser.add_argument("--models", nargs="+")
    parser.add_argument("--definition", type=Path)
    parser.add_argument(
        "--store-path", type=Path, required=True, help="embedded store file (reused when full)"
    )
    parser.add_argument("--cache-dir", type=Path, required=True)
    parser.add_argument("--reranker", type=Path)
    parser.add_argument("--only", nargs="+", help="only variants whose name starts with one of these")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    settings = get_model_settings()
    dataset = load_beir(args.dataset)
    definition = eval_definition(
        load_definition(args.definition or settings.document_definition), args.models
    )
    reranker: Reranker | None = build_reranker(args.reranker)
    if reranker is not None:
        reranker.warm_up()
    results = {}
    async with indexed_store(
        dataset,
        definition=definition,
        settings=settings,
        store_path=args.store_path,
        cache_dir=args.cache_dir,
    ) as (store, embedders):
        engine = RetrievalEngine(
            store=store,
            embedders=embedders,
            definition=definition,
            reranker=reranker,
            defaults=RetrievalDefaults(),
        )
        for config in variants(reranker is not None):
            if args.only and not any(config.name.startswith(o) for o in args.only):
                continue
            result = await run_config(engine, dataset, config)
            results[config.name] = {
                **{k: round(v, 4) for k, v in result.metrics.items()},
                **result.latency_ms,
            }
            m = result.metrics
            print(
                f"{config.name:<28} ndcg@10 {m['ndcg@10']:.4f}  r@100 {m['recall@100']:.4f}  "
                f"mrr@10 {m['mrr@10']:.4f}  p50 {result.latency_ms['p50']:.0f} ms",
                flush=True,
            )
    out = args.out or RESULTS / f"fusion_{dataset.name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {"dataset": dataset.name, "models": list(definition.model_names), "results": results}, indent=2
        )
        + "\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
