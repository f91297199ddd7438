"""Choose the Hebrew prefix handling of ``ragbot.text.analyze`` by BM25 quality on HeQ (test split).

Indexes the HeQ corpus (title + text) into a temporary embedded store once per analyzer variant and
prints nDCG@10 / recall@10 / MRR@10 of BM25 for each; writes bench/results/hebrew_analyzer.json.
Run: ``uv run python -m bench.retrieval.hebrew_analyzer [--dataset ../shared/data/beir/heq-test]``.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import math
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ragbot.stores.common as common
from ragbot.definition import parse_definition
from ragbot.indexing.pipeline import write_page
from ragbot.ports import StoredParagraph
from ragbot.stores import doc_id
from ragbot.stores.embedded import EmbeddedStore
from ragbot.text import analyze

DEFINITION = parse_definition(
    {
        "identifier_field": "page_id",
        "saved_fields": {"title": "text", "content": "text", "page_id": "integer", "corpus_id": "keyword"},
        "field_for_llm": "content",
        "models": {"none": "content"},
    }
)


def load(dataset: Path) -> tuple[list[dict[str, Any]], dict[str, str], dict[str, set[str]]]:
    corpus = [json.loads(line) for line in (dataset / "corpus.jsonl").read_text().splitlines() if line]
    lines = (dataset / "queries.jsonl").read_text().splitlines()
    queries = {q["_id"]: q["text"] for q in map(json.loads, lines) if q}
    qrels: dict[str, set[str]] = {}
    for line in (dataset / "qrels" / "test.tsv").read_text().splitlines()[1:]:
        qid, cid, score = line.split("\t")
        if int(score) > 0:
            qrels.setdefault(qid, set()).add(cid)
    return corpus, queries, qrels


def metrics(ranked: list[str], relevant: set[str]) -> tuple[float, float, float]:
    dcg = sum(1 / math.log2(i + 2) for i, c in enumerate(ranked[:10]) if c in relevant)
    idcg = sum(1 / math.log2(i + 2) for i in range(min(10, len(relevant))))
    recall = len(set(ranked[:10]) & relevant) / len(relevant)
    mrr = next((1 / (i + 1) for i, c in enumerate(ranked[:10]) if c in relevant), 0.0)
    return dcg / idcg, recall, mrr


async def evaluate(
    analyzer: Callable[[str], list[str]], dataset: Path, fields: list[str]
) -> dict[str, float]:
    corpus, queries, qrels = load(dataset)
    original = getattr(common, "analyze")  # noqa: B009
    setattr(common, "analyze", analyzer)  # noqa: B010 - the index and the queries use this variant
    try:
        with tempfile.TemporaryDirectory() as tmp:
            store = EmbeddedStore(path=Path(tmp) / "heq.sqlite3", definition=DEFINITION, dimensions={})
            await store.ensure_ready()
            for i, doc in enumerate(corpus, start=1):
                fields_ = {"title": doc.get("title", ""), "content": doc["text"], "corpus_id": doc["_id"]}
                await write_page(store, i, 1, [StoredParagraph(doc_id(i, 1, 0), i, 1, 0, fields_)])
            totals = [0.0, 0.0, 0.0]
            started = time.perf_counter()
            evaluated = [q for q in qrels if q in queries]
            for qid in evaluated:
                hits = await store.bm25(query=queries[qid], k=10, fields=fields)
                for j, value in enumerate(metrics([h.source["corpus_id"] for h in hits], qrels[qid])):
                    totals[j] += value
            elapsed = (time.perf_counter() - started) / len(evaluated) * 1000
            await store.close()
    finally:
        setattr(common, "analyze", original)  # noqa: B010
    n = len(evaluated)
    return {
        "ndcg10": totals[0] / n,
        "recall10": totals[1] / n,
        "mrr10": totals[2] / n,
        "ms_per_query": elapsed,
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dataset", type=Path, default=Path("../shared/data/beir/heq-test"))
    parser.add_argument("--out", type=Path, default=Path("bench/results/hebrew_analyzer.json"))
    args = parser.parse_args()
    results: dict[str, dict[str, float]] = {}
    settings = [(0, 2), (1, 2), (2, 2), (3, 2), (1, 3), (2, 3), (3, 3), (1, 4)]
    variants = [(f"prefix<={p} stem>={s}", p, s) for p, s in settings]
    for weights in (["title", "content"], ["title^2", "content"]):
        for name, max_prefix, min_stem in variants:
            key = f"{name} {'+'.join(weights)}"
            analyzer = functools.partial(analyze, max_prefix=max_prefix, min_stem=min_stem)
            results[key] = await evaluate(analyzer, args.dataset, weights)
            r = results[key]
            print(f"{key:40s} nDCG@10 {r['ndcg10']:.4f}  R@10 {r['recall10']:.4f}  MRR@10 {r['mrr10']:.4f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    asyncio.run(main())
