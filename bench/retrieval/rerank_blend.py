"""Choose ``RAGBOT_RETRIEVER_RERANK_WEIGHT`` by measurement: blend a reranker with the fused order.

Indexes a BEIR dataset through the real path once (or reuses ``--store-path``), runs the default
hybrid retrieval with the reranker on every judged query of ``--split`` once, and keeps each query's
fused top N with the cross-encoder's scores. Every weight w is then applied to those same scores
(``ragbot.retrieval.fusion.apply_rerank``: w x cross-encoder + (1 - w) x normalised fused score), so the sweep
costs one rerank per query. Prints nDCG@10 / MRR@10 per weight (w = 0 is retrieval's own order over
the same top N, w = 1 the cross-encoder alone) and writes
``bench/results/rerank_blend_<dataset>_<split>.json``. Choose on ``train``, report on ``test``.

Run: ``uv run python -m bench.retrieval.rerank_blend --dataset DIR --split train --reranker DIR \
--store-path var/eval/scifact.sqlite3 --cache-dir var/eval-cache``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

from bench.retrieval.sweep_store import indexed_store
from ragbot.definition import load_definition
from ragbot.evaluation import MAX_PAGES, EvalConfig, eval_definition, load_beir, page_ids, score_run
from ragbot.rerankers import configured_reranker
from ragbot.retrieval import RetrievalDefaults, RetrievalEngine
from ragbot.retrieval.fusion import FusedHit, apply_rerank, group_ranked
from ragbot.settings import RetrieverSettings, get_model_settings

RESULTS = Path(__file__).parents[1] / "results"
WEIGHTS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dataset", type=Path, required=True)
    parser.add_argument("--split", default="train", help="qrels split (choose on train, report on test)")
    parser.add_argument("--reranker", type=Path, required=True)
    parser.add_argument("--models", nargs="+", default=["all-MiniLM-L6-v2"])
    parser.add_argument("--store-path", type=Path, required=True, help="embedded store (reused when full)")
    parser.add_argument("--cache-dir", type=Path, required=True)
    parser.add_argument("--max-queries", type=int)
    parser.add_argument("--reranker-max-length", type=int, help="tokens per pair (default: the setting's)")
    parser.add_argument("--reranker-quantize", action="store_true", help="int8 reranker (ONNX Runtime)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    settings = get_model_settings()
    retriever = RetrieverSettings()
    retriever = retriever.model_copy(
        update={
            "reranker_max_length": args.reranker_max_length or retriever.reranker_max_length,
            "reranker_quantize": args.reranker_quantize or retriever.reranker_quantize,
        }
    )
    dataset = load_beir(args.dataset, split=args.split, max_queries=args.max_queries)
    definition = eval_definition(load_definition(settings.document_definition), args.models)
    reranker = configured_reranker(retriever, settings, path=args.reranker)
    if reranker is None:  # pragma: no cover - --reranker is required
        return 2
    reranker.warm_up()
    defaults = RetrievalDefaults.from_settings(retriever.model_copy(update={"rerank_weight": 1.0}))
    config = EvalConfig("default +rerank", None, rerank=True)
    doc_of = page_ids(dataset)
    pages = [1] * MAX_PAGES
    judged: list[tuple[str, list[FusedHit], list[float], list[FusedHit]]] = []
    async with indexed_store(
        dataset,
        definition=definition,
        settings=settings,
        store_path=args.store_path,
        cache_dir=args.cache_dir,
    ) as (store, embedders):
        engine = RetrievalEngine(
            store=store, embedders=embedders, definition=definition, reranker=reranker, defaults=defaults
        )
        for number, (qid, text) in enumerate(dataset.queries.items(), start=1):
            result = await engine.run(config.request(text, retrieval_size=100, pages=MAX_PAGES))
            top = result.fused[: defaults.rerank_top_n]
            cross = {h.doc_id: s for h, s in result.rerank_scores or []}
            judged.append((qid, top, [cross[h.doc_id] for h in top], result.fused))
            print(f"  {number}/{len(dataset.queries)} queries reranked", end="\r", flush=True)
    reranker.close()
    print()
    results: dict[str, dict[str, float]] = {}
    for weight in WEIGHTS:
        run: dict[str, list[str]] = {}
        for qid, top, scores, _ in judged:
            order, _ = apply_rerank(top, scores, min_score=None, gap_ratio=None, weight=weight)
            ranked = group_ranked([h for h, _ in order], pages)
            run[qid] = [doc_of[h.page_id] for h in ranked if h.page_id in doc_of]
        metrics = score_run(run, dataset.qrels)
        results[f"{weight:.1f}"] = {k: round(v, 4) for k, v in metrics.items()}
        print(
            f"weight {weight:.1f}  ndcg@10 {metrics['ndcg@10']:.4f}  mrr@10 {metrics['mrr@10']:.4f}",
            flush=True,
        )
    plain_run = {
        qid: [doc_of[h.page_id] for h in group_ranked(fused, pages) if h.page_id in doc_of]
        for qid, _, _, fused in judged
    }
    no_rerank = {k: round(v, 4) for k, v in score_run(plain_run, dataset.qrels).items()}
    print(f"no rerank   ndcg@10 {no_rerank['ndcg@10']:.4f}  mrr@10 {no_rerank['mrr@10']:.4f}")
    best = max(results, key=lambda w: results[w]["ndcg@10"])
    out = args.out or RESULTS / f"rerank_blend_{dataset.name}_{args.split}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    body = {
        "dataset": dataset.name,
        "split": args.split,
        "queries": len(judged),
        "reranker": str(args.reranker),
        "reranker_max_length": retriever.reranker_max_length,
        "reranker_quantize": retriever.reranker_quantize,
        "rerank_top_n": defaults.rerank_top_n,
        "best_weight": float(best),
        "no_rerank": no_rerank,
        "weights": results,
    }
    out.write_text(json.dumps(body, indent=2) + "\n", encoding="utf-8")
    print(f"best weight on {args.split}: {best} (nDCG@10 {results[best]['ndcg@10']:.4f})")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
