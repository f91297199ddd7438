"""The ``ragbot eval``, ``ragbot train-reranker`` and ``ragbot beir-pairs`` subcommands.

``ragbot.cli.main`` owns the parser; ``register`` adds these subcommands to it. Settings come from the
usual factories (``RAGBOT_*`` variables, ``.env``); the flags override what an evaluation needs.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import logging
import sys
import tempfile
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ragbot.errors import RagbotError

logger = logging.getLogger("ragbot.cli.main")


def _csv(values: Sequence[str] | None) -> list[str]:
    """``--models a b`` and ``--models a,b`` alike."""
    return [v.strip() for item in values or () for v in item.split(",") if v.strip()]


def register(subparsers: Any) -> None:
    """Add eval, train-reranker and beir-pairs to the ``ragbot`` parser."""
    ev = subparsers.add_parser(
        "eval",
        help="index a BEIR dataset through the real indexing path and score every retrieval configuration",
        description="Index DIR (corpus.jsonl, queries.jsonl, qrels/<split>.tsv) into a fresh store, run "
        "every judged query per configuration (BM25, each dense model, hybrid, hybrid + rerank) and print "
        "nDCG@10, recall@10, recall@100, MRR@10 and latency.",
    )
    ev.add_argument("--dataset", type=Path, required=True, help="BEIR folder")
    ev.add_argument("--split", default="test", help="qrels split (default: test)")
    ev.add_argument("--store", choices=["embedded", "elasticsearch"], help="default: RAGBOT_STORE_BACKEND")
    ev.add_argument("--store-path", type=Path, help="embedded store file (default: a temporary file)")
    ev.add_argument("--es-url", help="Elasticsearch URL (default: RAGBOT_STORE_ES_URL)")
    ev.add_argument("--index-prefix", help="Elasticsearch index prefix (default: a fresh ragbot-eval-<id>)")
    ev.add_argument("--keep-index", action="store_true", help="keep the store afterwards")
    ev.add_argument(
        "--reuse-index", action="store_true", help="skip indexing when the store holds paragraphs"
    )
    ev.add_argument(
        "--definition", type=Path, help="document definition (default: RAGBOT_DOCUMENT_DEFINITION)"
    )
    ev.add_argument("--models", nargs="+", help="models of the definition to use (default: all)")
    ev.add_argument(
        "--reranker", type=Path, help="cross-encoder folder (default: RAGBOT_RETRIEVER_RERANKER_PATH)"
    )
    ev.add_argument("--no-rerank", action="store_true", help="skip the hybrid + rerank configuration")
    ev.add_argument(
        "--configs", nargs="+", help="only these configurations (bm25, dense:<model>, hybrid, ...)"
    )
    ev.add_argument("--fusion", choices=["rrf", "page_rrf", "score"], help="override the default fusion")
    ev.add_argument("--rrf-k", type=int, help="override the default RRF k")
    ev.add_argument("--bm25-weight", type=float, help="override the default BM25 weight")
    ev.add_argument("--rerank-top-n", type=int, help="override how many fused paragraphs are reranked")
    ev.add_argument("--retrieval-size", type=int, default=100, help="candidates per branch (default 100)")
    ev.add_argument("--max-queries", type=int, help="only the first N judged queries")
    ev.add_argument("--cache-dir", type=Path, help="keep passage and query vectors here between runs")
    ev.add_argument("--report", type=Path, help="write the JSON report here")
    ev.add_argument("--chart", type=Path, help="draw a PNG bar chart here (needs matplotlib)")
    ev.add_argument("--no-progress", action="store_true", help="no progress bars")
    ev.set_defaults(handler=run_eval)

    tr = subparsers.add_parser(
        "train-reranker",
        help="fine-tune a cross-encoder from (question, paragraph) JSONL pairs with BM25 hard negatives",
        description="Fine-tune a cross-encoder, initialised from the packaged all-MiniLM-L6-v2 weights, on "
        'JSONL pairs {"query": ..., "positive": ...}; hard negatives come from BM25 over --corpus (or '
        "over the pairs' own paragraphs). Writes a folder RAGBOT_RETRIEVER_RERANKER_PATH can point at.",
    )
    tr.add_argument("--pairs", type=Path, required=True, help="JSONL training pairs")
    tr.add_argument("--out", type=Path, required=True, help="folder to write the model to")
    tr.add_argument(
        "--corpus",
        type=Path,
        help="paragraphs to mine negatives from: a BEIR corpus.jsonl or a text-per-line file",
    )
    tr.add_argument("--base-model", type=Path, help="initial weights (default: the packaged MiniLM)")
    defaults = _training_defaults()
    for flag, kind, doc in (
        ("epochs", int, "passes over the pairs"),
        ("batch-size", int, "queries per step (each with its negatives)"),
        ("negatives", int, "BM25 negatives per positive"),
        ("pool-size", int, "BM25 hits the negatives are sampled from"),
        ("max-length", int, "tokens per (query, paragraph) input"),
        ("learning-rate", float, "AdamW learning rate"),
        ("head-lr-multiplier", float, "learning-rate factor of the new classification head"),
        ("layers", int, "keep only the first N transformer layers (faster, smaller)"),
        ("max-pairs", int, "train on a random sample of this many pairs"),
        ("max-steps", int, "stop after this many steps"),
        ("time-budget-s", float, "stop after this many seconds"),
        ("seed", int, "random seed"),
    ):
        name = flag.replace("-", "_")
        tr.add_argument(
            f"--{flag}", type=kind, default=defaults[name], help=f"{doc} (default {defaults[name]})"
        )
    tr.set_defaults(handler=run_train_reranker)

    bp = subparsers.add_parser(
        "beir-pairs", help="write a BEIR split's (query, relevant document) pairs as train-reranker JSONL"
    )
    bp.add_argument("--dataset", type=Path, required=True, help="BEIR folder")
    bp.add_argument("--split", default="train", help="qrels split (default: train; never train on test)")
    bp.add_argument("--out", type=Path, required=True, help="JSONL file to write")
    bp.add_argument("--with-title", action="store_true", help="prefix each document with its title")
    bp.set_defaults(handler=run_beir_pairs)


def _training_defaults() -> dict[str, Any]:
    from ragbot.rerankers.training import TrainingConfig

    return dataclasses.asdict(TrainingConfig())


# -- eval ---------------------------------------------------------------------------------------


def run_eval(args: argparse.Namespace) -> int:
    """``ragbot eval``: print the table, write the report and chart when asked."""
    logging.getLogger("elastic_transport").setLevel(logging.WARNING)  # one line per request otherwise
    report = asyncio.run(_eval(args))
    sys.stdout.write(report.table() + "\n")
    if args.report:
        from ragbot.evaluation import write_report

        write_report(report, args.report)
        sys.stdout.write(f"report: {args.report}\n")
    if args.chart:
        from ragbot.evaluation import draw_chart

        draw_chart(report, args.chart)
        sys.stdout.write(f"chart: {args.chart}\n")
    return 0


async def _eval(args: argparse.Namespace) -> Any:
    from ragbot.definition import load_definition
    from ragbot.embedders import build_embedders, cached_queries
    from ragbot.evaluation import (
        EvalConfig,
        VectorCache,
        eval_definition,
        evaluate,
        load_beir,
        standard_configs,
    )
    from ragbot.ports import Embedder
    from ragbot.rerankers import configured_reranker
    from ragbot.retrieval import RetrievalDefaults
    from ragbot.settings import (
        get_model_settings,
        get_retriever_settings,
        get_store_settings,
        get_worker_settings,
    )
    from ragbot.stores import build_store

    model_settings = get_model_settings()
    retriever_settings = get_retriever_settings()
    dataset = load_beir(args.dataset, split=args.split, max_queries=args.max_queries)
    definition = eval_definition(
        load_definition(args.definition or model_settings.document_definition), _csv(args.models) or None
    )
    defaults = RetrievalDefaults.from_settings(retriever_settings)
    overrides = {
        "fusion": args.fusion,
        "rrf_k": args.rrf_k,
        "bm25_weight": args.bm25_weight,
        "rerank_top_n": args.rerank_top_n,
    }
    defaults = dataclasses.replace(defaults, **{k: v for k, v in overrides.items() if v is not None})
    reranker_path = None if args.no_rerank else (args.reranker or retriever_settings.reranker_path)
    reranker = (
        configured_reranker(retriever_settings, model_settings, path=reranker_path) if reranker_path else None
    )
    configs: list[EvalConfig] = standard_configs(definition.model_names, with_rerank=reranker is not None)
    wanted = _csv(args.configs)
    if wanted:
        unknown = sorted(set(wanted) - {c.name for c in configs})
        if unknown:
            raise RagbotError(f"unknown configuration(s) {unknown}; known: {[c.name for c in configs]}")
        configs = [c for c in configs if c.name in wanted]

    raw = build_embedders(settings=model_settings, definition=definition)
    embedders: dict[str, Embedder]
    if args.cache_dir:
        caches = {name: VectorCache(e, folder=args.cache_dir) for name, e in raw.items()}
        embedders = dict(caches)
    else:
        caches = {}
        embedders = cached_queries(raw, max_size=model_settings.query_cache_size)
    logger.info("loading models %s", list(embedders))
    for embedder in embedders.values():
        await asyncio.to_thread(embedder.warm_up)
    if reranker is not None:
        await asyncio.to_thread(reranker.warm_up)

    store_settings = get_store_settings().model_copy()
    backend = args.store or store_settings.backend
    temp_dir: tempfile.TemporaryDirectory[str] | None = None
    updates: dict[str, Any] = {"backend": backend}
    if backend == "embedded":
        if args.store_path:
            updates["embedded_path"] = args.store_path
        else:
            temp_dir = tempfile.TemporaryDirectory(prefix="ragbot-eval-")
            updates["embedded_path"] = Path(temp_dir.name) / "eval.sqlite3"
    else:
        updates["es_index_prefix"] = args.index_prefix or f"ragbot-eval-{uuid.uuid4().hex[:10]}"
        if args.es_url:
            updates["es_url"] = args.es_url
    store_settings = store_settings.model_copy(update=updates)
    dimensions = {v.name: embedders[v.model].dimension for v in definition.vector_fields}
    store = build_store(settings=store_settings, definition=definition, dimensions=dimensions)
    try:
        await store.ensure_ready()
        return await evaluate(
            dataset,
            store=store,
            definition=definition,
            embedders=embedders,
            defaults=defaults,
            reranker=reranker,
            configs=configs,
            max_tokens=get_worker_settings().paragraph_tokens,
            link_targets=get_worker_settings().link_targets,  # what the worker stores
            retrieval_size=args.retrieval_size,
            reindex=not args.reuse_index,
            store_name=backend,
            show_progress=not args.no_progress,
        )
    finally:
        for cache in caches.values():
            cache.flush()
        if backend == "elasticsearch" and not args.keep_index:
            drop = getattr(store, "drop_indices", None)
            if drop is not None:
                await drop()
        await store.close()
        if temp_dir is not None:
            temp_dir.cleanup()


# -- train-reranker and beir-pairs ----------------------------------------------------------------


def _read_corpus(path: Path) -> list[str]:
    """A BEIR corpus.jsonl (its ``text`` fields) or a plain file with one paragraph a line."""
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if path.suffix == ".jsonl":
        return [str(json.loads(line).get("text") or "") for line in lines]
    return lines


def run_train_reranker(args: argparse.Namespace) -> int:
    """``ragbot train-reranker``: train, save, print the run's summary."""
    from tqdm import tqdm

    from ragbot.rerankers.training import TrainingConfig, load_pairs, train_reranker

    pairs = load_pairs(args.pairs)
    corpus = _read_corpus(args.corpus) if args.corpus else None
    fields = {f.name for f in dataclasses.fields(TrainingConfig)}
    config = TrainingConfig(**{k: v for k, v in vars(args).items() if k in fields})
    bar = tqdm(desc="training", unit="step")

    def progress(step: int, total: int, loss: float) -> None:
        bar.total = total
        bar.set_postfix(loss=f"{loss:.3f}")
        bar.update(1)

    try:
        report = train_reranker(
            pairs, out=args.out, base_model=args.base_model, corpus=corpus, config=config, progress=progress
        )
    finally:
        bar.close()
    sys.stdout.write(
        f"trained on {report.pairs} pairs ({report.queries} queries, corpus {report.corpus_size}) for "
        f"{report.steps} steps in {report.seconds:.0f} s; loss {report.first_loss:.3f} -> "
        f"{report.last_loss:.3f}; saved to {report.out}\n"
    )
    return 0


def run_beir_pairs(args: argparse.Namespace) -> int:
    """``ragbot beir-pairs``: a BEIR split's judged pairs as JSONL."""
    from ragbot.evaluation import load_beir, pairs_from_beir
    from ragbot.rerankers.training import write_pairs

    dataset = load_beir(args.dataset, split=args.split)
    count = write_pairs(pairs_from_beir(dataset, with_title=args.with_title), args.out)
    sys.stdout.write(
        f"{count} pairs from {len(dataset.queries)} {args.split} queries written to {args.out}\n"
    )
    return 0
