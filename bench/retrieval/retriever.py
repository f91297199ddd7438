"""Retriever benchmark: quality with the default configuration, and latency at 100k paragraphs.

Quality (``scifact_ndcg10``, ``heq_ndcg10``): ``ragbot.evaluation`` with a request that sets nothing
(the configured defaults of ``RetrieverSettings``), corpus indexed through the real indexing path into
a temporary embedded store, packaged models only (no reranker is packaged). SciFact uses
all-MiniLM-L6-v2 on content; HeQ uses multilingual-e5-small on content. With ``--reranker``,
``scifact_ndcg10_with_reranker`` is the same run with that reranker configured (HeQ never gets it:
the SciFact reranker is English-only).

Latency (``retrieve_p50/p95_ms_100k_{es,embedded}``): 100k paragraphs (5000 pages of 20) whose text
is sentences of the SciFact corpus shuffled into new paragraphs, with two 384-d dense fields (title
and content of all-MiniLM-L6-v2) filled with synthetic unit vectors; every query is a real SciFact
question embedded by the real MiniLM at query time (no query cache), one at a time, hybrid (two
dense fields + BM25), default fusion, no rerank, request defaults (50 candidates per branch, pages
[3, 2, 1]). Elasticsearch runs once per ``--es-vector-search`` mode: the configured default
(``quantized``: the ``_es`` keys), then ``exact`` (``_es_exact``; ``approximate`` on request:
``_es_approximate``); after loading, the Elasticsearch indices are merged to one segment each
(``ElasticsearchStore.force_merge``, the step operations.md gives after a bulk reindex), and the
store is warmed up as the retriever service does at start. ``dense_recall50_vs_exact``: the share of
each field's exact top 50 (numpy over the same synthetic vectors) that the store's kNN returned, for
50 queries. ``rerank20_added_p50_ms``: the p50 of the engine's rerank stage over the top 20 fused
paragraphs with the ``--reranker`` model, on the embedded store (configured as ``RetrieverSettings``
says, or ``--reranker-max-length`` / ``--reranker-quantize``). Per-stage p50s and the load average
of the machine go to ``bench/results/retriever_detail.json``.

Writes the flat figures to ``bench/results/retriever.json``.
Run: ``uv run python -m bench.retrieval.retriever --scifact DIR --heq DIR --reranker DIR [--es-url URL]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ragbot.definition import DocumentDefinition, load_definition, parse_definition
from ragbot.embedders import build_embedders
from ragbot.evaluation import EvalConfig, VectorCache, evaluate, latency_summary, load_beir
from ragbot.indexing.pipeline import write_page
from ragbot.ports import Embedder, Reranker, SearchStore, StoredParagraph
from ragbot.rerankers import configured_reranker
from ragbot.retrieval import RetrievalDefaults, RetrievalEngine
from ragbot.schemas.retrieval import RetrieveRequest
from ragbot.settings import ModelSettings, RetrieverSettings, StoreSettings
from ragbot.stores import build_store, doc_id

RESULTS = Path(__file__).parents[1] / "results" / "retriever.json"
MINILM = "all-MiniLM-L6-v2"
E5 = "multilingual-e5-small"
PER_PAGE = 20
DIM = 384
DEFAULT = EvalConfig("default", None, rerank=None)


def with_models(base: DocumentDefinition, models: dict[str, list[str]]) -> DocumentDefinition:
    """The configured definition with other (model -> fields) pairs."""
    return parse_definition(
        {
            "identifier_field": base.identifier_field,
            "saved_fields": dict(base.saved_fields),
            "field_for_llm": base.field_for_llm,
            "models": models,
        }
    )


# -- quality --------------------------------------------------------------------------------------


async def quality(
    dataset_dir: Path,
    *,
    definition: DocumentDefinition,
    settings: ModelSettings,
    reranker: Reranker | None,
    cache_dir: Path,
    rerank_weight: float | None = None,
) -> float:
    """nDCG@10 of the default configuration on the dataset's test split (``rerank_weight``: the
    configured one unless given)."""
    dataset = load_beir(dataset_dir)
    embedders = {
        n: VectorCache(e, folder=cache_dir)
        for n, e in build_embedders(settings=settings, definition=definition).items()
    }
    for e in embedders.values():
        e.warm_up()
    dims = {v.name: embedders[v.model].dimension for v in definition.vector_fields}
    with tempfile.TemporaryDirectory(prefix="ragbot-bench-") as tmp:
        store = build_store(
            settings=StoreSettings(backend="embedded", embedded_path=Path(tmp) / "q.sqlite3"),
            definition=definition,
            dimensions=dims,
        )
        await store.ensure_ready()
        try:
            report = await evaluate(
                dataset,
                store=store,
                definition=definition,
                embedders=dict(embedders),
                defaults=RetrievalDefaults.from_settings(
                    RetrieverSettings().model_copy(
                        update={} if rerank_weight is None else {"rerank_weight": rerank_weight}
                    )
                ),
                reranker=reranker,
                configs=[DEFAULT],
                show_progress=True,
            )
        finally:
            await store.close()
            for e in embedders.values():
                e.flush()
    ndcg = report.results[0].metrics["ndcg@10"]
    print(
        f"{dataset.name}: default configuration nDCG@10 {ndcg:.4f} ({report.results[0].metrics})", flush=True
    )
    return ndcg


# -- latency --------------------------------------------------------------------------------------


def synthetic_corpus(scifact: Path, paragraphs: int, seed: int = 7) -> tuple[list[str], list[str]]:
    """(titles, paragraphs): SciFact sentences shuffled into new 3-7 sentence paragraphs."""
    rng = random.Random(seed)
    sentences: list[str] = []
    titles: list[str] = []
    for line in (scifact / "corpus.jsonl").read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        titles.append(str(row.get("title") or ""))
        sentences += [s for s in re.split(r"(?<=[.!?])\s+", str(row.get("text") or "")) if len(s) > 20]
    texts = [" ".join(rng.sample(sentences, rng.randint(3, 7))) for _ in range(paragraphs)]
    return titles, texts


def unit_rows(rng: np.random.Generator, n: int) -> np.ndarray[Any, np.dtype[np.float32]]:
    rows = rng.standard_normal((n, DIM)).astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    return rows


Matrix = np.ndarray[Any, np.dtype[np.float32]]


def synthetic_vectors(fields: Sequence[str], pages: int) -> dict[str, Matrix]:
    """Per vector field, the (pages x 20, 384) unit rows ``fill`` writes, row (page - 1) * 20 + i."""
    rng = np.random.default_rng(11)
    per_page = [{name: unit_rows(rng, PER_PAGE) for name in fields} for _ in range(pages)]
    return {name: np.concatenate([p[name] for p in per_page]) for name in fields}


async def fill(
    store: SearchStore,
    definition: DocumentDefinition,
    titles: Sequence[str],
    texts: Sequence[str],
    vectors: dict[str, Matrix],
) -> float:
    """Write 20-paragraph pages with synthetic vectors (the pipeline's write stage); returns seconds."""
    fields = [v.name for v in definition.vector_fields]
    pages = len(texts) // PER_PAGE
    started = time.perf_counter()
    gate = asyncio.Semaphore(4)

    async def write(page: int) -> None:
        title = titles[page % len(titles)]
        first = (page - 1) * PER_PAGE
        paragraphs = [
            StoredParagraph(
                doc_id=doc_id(page, 1, i),
                page_id=page,
                revision_id=1,
                paragraph=i,
                fields={"title": title, "content": texts[first + i], "page_id": page},
                vectors={name: vectors[name][first + i] for name in fields},
            )
            for i in range(PER_PAGE)
        ]
        async with gate:
            await write_page(store, page, 1, paragraphs)

    for start in range(1, pages + 1, 200):
        await asyncio.gather(*(write(p) for p in range(start, min(start + 200, pages + 1))))
        print(f"  {min(start + 199, pages) * PER_PAGE} paragraphs written", end="\r", flush=True)
    print()
    return time.perf_counter() - started


async def time_queries(
    engine: RetrievalEngine, queries: Sequence[str], *, rerank: bool, warm: int = 10
) -> tuple[list[float], dict[str, list[float]]]:
    """(total ms, engine stage timings) per query, one query at a time, after ``warm`` untimed ones."""
    totals: list[float] = []
    stages: dict[str, list[float]] = {}
    for i, query in enumerate(queries):
        t0 = time.perf_counter()
        result = await engine.run(RetrieveRequest(query=query, rerank=rerank))
        elapsed = (time.perf_counter() - t0) * 1000.0
        if i >= warm:
            totals.append(elapsed)
            for stage, ms in result.timings_ms.items():
                stages.setdefault(stage, []).append(ms)
    return totals, stages


async def dense_recall(
    store: SearchStore, embedder: Embedder, vectors: dict[str, Matrix], queries: Sequence[str], k: int = 50
) -> float:
    """Mean share of the exact top k (numpy, float64 cosine) that the store's kNN returns, per field."""
    shares: list[float] = []
    for query in queries:
        q = np.asarray(embedder.embed_queries([query])[0], dtype=np.float64)
        q /= np.linalg.norm(q)
        for name, matrix in vectors.items():
            exact = np.argpartition(-(matrix @ q), k)[:k]
            want = {doc_id(int(r) // PER_PAGE + 1, 1, int(r) % PER_PAGE) for r in exact}
            got = {h.doc_id for h in await store.knn(vector_field=name, vector=q.astype(np.float32), k=k)}
            shares.append(len(want & got) / k)
    return round(float(np.mean(shares)), 4)


async def latency(
    store_settings: StoreSettings,
    *,
    definition: DocumentDefinition,
    embedder: Embedder,
    reranker: Reranker | None,
    corpus: tuple[list[str], list[str]],
    vectors: dict[str, Matrix],
    queries: Sequence[str],
    keep: bool = False,
) -> dict[str, Any]:
    """p50/p95 of hybrid retrieval without rerank (and the rerank stage) on one store, and how much
    of the exact dense top 50 its kNN finds."""
    dims = {v.name: DIM for v in definition.vector_fields}
    store = build_store(settings=store_settings, definition=definition, dimensions=dims)
    await store.ensure_ready()
    out: dict[str, Any] = {}
    try:
        if await store.count() == 0:
            out["load_s"] = round(await fill(store, definition, *corpus, vectors), 1)
            merge = getattr(store, "force_merge", None)
            if merge is not None:  # Elasticsearch: an index at rest after a bulk load (operations.md)
                started = time.perf_counter()
                await merge()
                out["force_merge_s"] = round(time.perf_counter() - started, 1)
        out["paragraphs"] = await store.count()
        started = time.perf_counter()
        await store.warm_up()  # as the retriever service does at start
        out["warm_up_s"] = round(time.perf_counter() - started, 1)
        engine = RetrievalEngine(
            store=store,
            embedders={MINILM: embedder},
            definition=definition,
            reranker=reranker,
            defaults=RetrievalDefaults.from_settings(RetrieverSettings()),
        )
        totals, stages = await time_queries(engine, queries, rerank=False)
        out["retrieve"] = latency_summary(totals)
        out["stages_p50"] = {k: latency_summary(v)["p50"] for k, v in stages.items()}
        out["dense_recall50_vs_exact"] = await dense_recall(store, embedder, vectors, queries[:50])
        if reranker is not None:
            with_rerank, stages = await time_queries(engine, queries, rerank=True)
            out["retrieve_rerank"] = latency_summary(with_rerank)
            out["rerank_stage"] = latency_summary(stages["rerank"])
        out["load_average"] = [round(x, 2) for x in os.getloadavg()]
    finally:
        if store_settings.backend == "elasticsearch" and not keep:
            drop = getattr(store, "drop_indices", None)
            if drop is not None:
                await drop()
        await store.close()
    return out


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scifact", type=Path, required=True, help="BEIR SciFact folder")
    parser.add_argument("--heq", type=Path, help="BEIR HeQ folder (heq_ndcg10 skipped without it)")
    parser.add_argument("--reranker", type=Path, help="cross-encoder folder (rerank figures need it)")
    parser.add_argument("--definition", type=Path, default=Path("config/definition.json"))
    parser.add_argument("--paragraphs", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200, help="timed queries per store")
    parser.add_argument("--stores", nargs="+", default=["embedded", "elasticsearch"])
    parser.add_argument("--es-url", default=os.environ.get("RAGBOT_TEST_ES_URL", "http://127.0.0.1:9250"))
    parser.add_argument(
        "--es-vector-search",
        nargs="+",
        choices=["exact", "quantized", "approximate"],
        # HNSW is left out by default: building its graphs for 100k paragraphs took 19 minutes here.
        default=["quantized", "exact"],
    )
    parser.add_argument("--embedded-path", type=Path, help="keep the 100k embedded store here (reused)")
    parser.add_argument("--es-prefix", help="keep the 100k Elasticsearch indices under this prefix (reused)")
    parser.add_argument("--cache-dir", type=Path, default=Path("var/eval-cache"))
    parser.add_argument(
        "--rerank-weight",
        type=float,
        help="also report SciFact with the reranker blended at this weight (bench/retrieval/rerank_blend.py)",
    )
    parser.add_argument(
        "--rerank-weight-from", type=Path, help="take --rerank-weight from this rerank_blend JSON (its best)"
    )
    parser.add_argument("--reranker-max-length", type=int, help="tokens per pair (default: the setting's)")
    parser.add_argument("--reranker-quantize", action="store_true", help="int8 reranker (ONNX Runtime)")
    parser.add_argument("--skip-quality", action="store_true")
    parser.add_argument("--skip-latency", action="store_true")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    base = load_definition(args.definition)
    settings = ModelSettings(device="cpu", query_cache_size=0)
    retriever_settings = RetrieverSettings()
    if args.reranker_max_length is not None or args.reranker_quantize:
        retriever_settings = retriever_settings.model_copy(
            update={
                "reranker_max_length": args.reranker_max_length or retriever_settings.reranker_max_length,
                "reranker_quantize": args.reranker_quantize or retriever_settings.reranker_quantize,
            }
        )
    reranker = (
        configured_reranker(retriever_settings, settings, path=args.reranker) if args.reranker else None
    )
    if reranker is not None:
        reranker.warm_up()
    figures: dict[str, Any] = json.loads(args.out.read_text()) if args.out.is_file() else {}

    if args.rerank_weight is None and args.rerank_weight_from and args.rerank_weight_from.is_file():
        args.rerank_weight = float(json.loads(args.rerank_weight_from.read_text())["best_weight"])
        figures["rerank_weight_blend"] = args.rerank_weight
    if not args.skip_quality:
        runs: list[tuple[str, Reranker | None, float | None]] = [("scifact_ndcg10", None, None)]
        if reranker is not None:
            runs.append(("scifact_ndcg10_with_reranker", reranker, 1.0))
            if args.rerank_weight is not None and args.rerank_weight < 1.0:
                runs.append(("scifact_ndcg10_with_reranker_blend", reranker, args.rerank_weight))
        for key, chosen, weight in runs:
            figures[key] = round(
                await quality(
                    args.scifact,
                    definition=with_models(base, {MINILM: ["content"]}),
                    settings=settings,
                    reranker=chosen,
                    cache_dir=args.cache_dir,
                    rerank_weight=weight,
                ),
                4,
            )
        if args.heq:
            figures["heq_ndcg10"] = round(
                await quality(
                    args.heq,
                    definition=with_models(base, {E5: ["content"]}),
                    settings=settings,
                    reranker=None,
                    cache_dir=args.cache_dir,
                ),
                4,
            )

    definition = with_models(base, {MINILM: ["title", "content"]})
    # As the retriever service builds it: one query at a time ("auto" precision: float32 on a CPU).
    embedder = build_embedders(settings=settings, definition=definition, batched=False)[MINILM]
    embedder.warm_up()
    corpus = synthetic_corpus(args.scifact, args.paragraphs)
    vectors = synthetic_vectors([v.name for v in definition.vector_fields], args.paragraphs // PER_PAGE)
    scifact_queries = [
        json.loads(line)["text"] for line in (args.scifact / "queries.jsonl").read_text().splitlines()
    ]
    queries = list(dict.fromkeys(scifact_queries))[: args.queries + 10]
    detail: dict[str, Any] = {}
    stores: list[tuple[str, str]] = (
        []
        if args.skip_latency
        else [
            (b, m)
            for b in args.stores
            for m in (args.es_vector_search if b == "elasticsearch" else ["exact"])
        ]
    )
    for backend, mode in stores:
        if backend == "embedded":
            tmp = None if args.embedded_path else tempfile.TemporaryDirectory(prefix="ragbot-bench-")
            path = args.embedded_path or Path(tmp.name if tmp else ".") / "bench.sqlite3"
            store_settings = StoreSettings(backend="embedded", embedded_path=path)
            key = "embedded"
        else:
            tmp = None
            store_settings = StoreSettings(
                backend="elasticsearch",
                es_url=args.es_url,
                es_index_prefix=f"{args.es_prefix or 'bench-' + uuid.uuid4().hex[:8]}-{mode}",
                vector_search=mode,
                es_timeout_s=60.0,
            )
            key = "es" if mode == StoreSettings().vector_search else f"es_{mode}"  # "es": the default
        print(f"{key}: {args.paragraphs} paragraphs, {len(queries) - 10} timed queries", flush=True)
        result = await latency(
            store_settings,
            definition=definition,
            embedder=embedder,
            reranker=reranker,
            corpus=corpus,
            vectors=vectors,
            queries=queries,
            keep=bool(args.es_prefix),
        )
        if tmp is not None:
            tmp.cleanup()
        detail[key] = result
        print(f"{key}: {json.dumps(result)}", flush=True)
        figures[f"retrieve_p50_ms_100k_{key}"] = result["retrieve"]["p50"]
        figures[f"retrieve_p95_ms_100k_{key}"] = result["retrieve"]["p95"]
        if "rerank_stage" in result and (key == "embedded" or "rerank20_added_p50_ms" not in figures):
            figures["rerank20_added_p50_ms"] = result["rerank_stage"]["p50"]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    detail_path = args.out.with_name(args.out.stem + "_detail.json")
    previous = json.loads(detail_path.read_text()) if detail_path.is_file() else {}
    detail = {**previous, "paragraphs": args.paragraphs, **detail}
    detail_path.write_text(json.dumps(detail, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
