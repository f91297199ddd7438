"""Benchmark the embedded store at 100k paragraphs on this machine (2 cores).

Synthetic corpus: Zipf-distributed words (Hebrew letters, so the prefix variants are exercised) in
paragraphs of 40-120 words, 20 paragraphs a page, and two 384-dimensional vector fields. Measures the
bulk load, page replace (p50/p95, synchronous=NORMAL and FULL), BM25 and exact kNN per field (p50/p95,
warm), kNN with a filter, the cold matrix load, and the file size. Prints a table and writes
bench/results/embedded_store.json.

Run: ``uv run python bench/embedded_store.py [--paragraphs 100000] [--keep PATH]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import numpy as np

from ragbot.definition import parse_definition
from ragbot.ports import StoredParagraph
from ragbot.stores import doc_id
from ragbot.stores.embedded import EmbeddedStore

DIM = 384
PER_PAGE = 20
DEFINITION = parse_definition(
    {
        "identifier_field": "page_id",
        "saved_fields": {
            "title": "text",
            "page_id": "integer",
            "content": "text",
            "url": "keyword",
            "categories": "keyword",
        },
        "field_for_llm": "content",
        "models": {"model-a": "content", "model-b": "content"},
    }
)
FIELDS = [v.name for v in DEFINITION.vector_fields]
DIMENSIONS = dict.fromkeys(FIELDS, DIM)
HEBREW = "אבגדהוזחטיכלמנסעפצקרשת"


def vocabulary(rng: np.random.Generator, size: int) -> list[str]:
    words: set[str] = set()
    while len(words) < size:
        n = int(rng.integers(2, 9))
        words.add("".join(HEBREW[i] for i in rng.integers(0, len(HEBREW), n)))
    return sorted(words)


class Corpus:
    """Deterministic synthetic pages: text from a Zipf vocabulary, random vectors."""

    def __init__(self, seed: int = 7, vocab_size: int = 50_000) -> None:
        self.rng = np.random.default_rng(seed)
        self.words = vocabulary(self.rng, vocab_size)
        ranks = np.arange(1, vocab_size + 1)
        weights = 1.0 / ranks**1.05
        self.p = weights / weights.sum()

    def text(self, n: int) -> str:
        return " ".join(self.words[i] for i in self.rng.choice(len(self.words), size=n, p=self.p))

    def page(self, page_id: int, revision_id: int) -> list[StoredParagraph]:
        title = self.text(4)
        vectors = self.rng.standard_normal((len(FIELDS), PER_PAGE, DIM), dtype=np.float32)
        return [
            StoredParagraph(
                doc_id=doc_id(page_id, revision_id, n),
                page_id=page_id,
                revision_id=revision_id,
                paragraph=n,
                fields={
                    "title": title,
                    "content": self.text(int(self.rng.integers(40, 121))),
                    "url": f"https://wiki.example/{page_id}",
                    "categories": [f"cat{page_id % 50}", "all"],
                    "source": "wiki",
                },
                vectors={name: vectors[i, n] for i, name in enumerate(FIELDS)},
            )
            for n in range(PER_PAGE)
        ]


async def timed(fn: Callable[[], Awaitable[Any]], repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        started = time.perf_counter()
        await fn()
        out.append((time.perf_counter() - started) * 1000)
    return out


def summary(ms: list[float]) -> dict[str, float]:
    ms = sorted(ms)
    return {
        "p50_ms": round(statistics.median(ms), 3),
        "p95_ms": round(ms[int(0.95 * (len(ms) - 1))], 3),
        "n": len(ms),
    }


async def run(paragraphs: int, path: Path) -> dict[str, Any]:
    corpus = Corpus()
    pages = paragraphs // PER_PAGE
    store = EmbeddedStore(path=path, definition=DEFINITION, dimensions=DIMENSIONS)
    results: dict[str, Any] = {
        "paragraphs": pages * PER_PAGE,
        "pages": pages,
        "paragraphs_per_page": PER_PAGE,
        "vector_fields": {name: DIM for name in FIELDS},
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "sqlite": sqlite3.sqlite_version,
        },
    }
    started = time.perf_counter()
    for pid in range(1, pages + 1):
        page = corpus.page(pid, 1)
        await store.replace_page(page_id=pid, revision_id=1, paragraphs=page)
    results["load_s"] = round(time.perf_counter() - started, 1)
    assert await store.count() == pages * PER_PAGE

    # Cold matrix load: a fresh store (another process would do the same) runs its first kNN.
    cold = EmbeddedStore(path=path, definition=DEFINITION, dimensions=DIMENSIONS)
    query = corpus.rng.standard_normal(DIM).astype(np.float32)
    started = time.perf_counter()
    await cold.knn(vector_field=FIELDS[0], vector=query, k=10)
    results["cold_matrix_load_ms"] = round((time.perf_counter() - started) * 1000, 1)
    await cold.close()

    queries = [corpus.text(int(corpus.rng.integers(2, 7))) for _ in range(300)]
    qvecs = corpus.rng.standard_normal((300, DIM), dtype=np.float32)
    await store.knn(vector_field=FIELDS[0], vector=qvecs[0], k=50)  # load the matrices
    it = iter(range(10**9))

    def next_query() -> str:
        return queries[next(it) % len(queries)]

    results["bm25_k50"] = summary(await timed(lambda: store.bm25(query=next_query(), k=50), 300))
    for name in FIELDS:
        idx = iter(range(10**9))
        results[f"knn_k50_{name}"] = summary(
            await timed(
                lambda name=name, idx=idx: store.knn(vector_field=name, vector=qvecs[next(idx) % 300], k=50),
                100,
            )
        )
    results["knn_k50_filtered_category"] = summary(
        await timed(
            lambda: store.knn(vector_field=FIELDS[0], vector=qvecs[1], k=50, filters={"categories": "cat7"}),
            30,
        )
    )
    results["bm25_k50_filtered_category"] = summary(
        await timed(lambda: store.bm25(query=next_query(), k=50, filters={"categories": "cat7"}), 100)
    )

    # Page replace on the full store: a new revision of an existing page, both durability settings.
    for sync in ("NORMAL", "FULL"):
        writer = EmbeddedStore(path=path, definition=DEFINITION, dimensions=DIMENSIONS, synchronous=sync)
        await writer.knn(vector_field=FIELDS[0], vector=qvecs[0], k=1)  # replace also patches the matrices
        revs = iter(range(2, 10**6))
        pids = iter(corpus.rng.integers(1, pages + 1, size=10**4))

        prepared: list[tuple[int, int, list[StoredParagraph]]] = []
        for _ in range(100):
            pid, rev = int(next(pids)), next(revs) + (0 if sync == "NORMAL" else 10**5)
            prepared.append((pid, rev, corpus.page(pid, rev)))
        items = iter(prepared)

        async def replace_prepared(writer: EmbeddedStore = writer, items: Any = items) -> None:
            pid, rev, page = next(items)
            await writer.replace_page(page_id=pid, revision_id=rev, paragraphs=page)

        results[f"replace_page_{PER_PAGE}p_sync_{sync.lower()}"] = summary(await timed(replace_prepared, 100))
        await writer.close()
    assert await store.count() == pages * PER_PAGE
    await store.close()
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    results["file_mb"] = round(os.path.getsize(path) / 2**20, 1)
    results["matrix_mb"] = round(len(FIELDS) * pages * PER_PAGE * DIM * 4 / 2**20, 1)
    return results


def table(results: dict[str, Any]) -> str:
    rows = [f"embedded store: {results['paragraphs']:,} paragraphs, {len(FIELDS)} x {DIM}-d vector fields"]
    rows.append(f"{'measure':44s} {'p50 ms':>9s} {'p95 ms':>9s}")
    for key, value in results.items():
        if isinstance(value, dict) and "p50_ms" in value:
            rows.append(f"{key:44s} {value['p50_ms']:9.2f} {value['p95_ms']:9.2f}")
    for key in ("load_s", "cold_matrix_load_ms", "file_mb", "matrix_mb"):
        rows.append(f"{key:44s} {results[key]:>9}")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--paragraphs", type=int, default=100_000)
    parser.add_argument("--out", type=Path, default=Path("bench/results/embedded_store.json"))
    parser.add_argument("--keep", type=Path, help="build the store at this path and keep it")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = args.keep or Path(tmp) / "bench.sqlite3"
        results = asyncio.run(run(args.paragraphs, path))
    print(table(results))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
