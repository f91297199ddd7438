"""Benchmark the embedded store at 100k paragraphs on this machine (2 cores, shared).

Synthetic corpus: Zipf-distributed words of Hebrew letters (so prefix variants occur), 40-120 words a
paragraph, 20 paragraphs a page, two 384-dimensional vector fields. Measures the bulk load, page
replace (synchronous=NORMAL and FULL, interleaved), BM25 (mixed queries and common-words-only
queries), exact kNN per field, filtered searches, the first search after another process wrote
(catch-up), the cold loads of the in-process indices, and the file size. Prints a table and writes
bench/results/embedded_store.json.

Run: ``uv run python -m bench.retrieval.embedded_store [--paragraphs 100000] [--keep PATH]``.
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
from typing import Any, Literal

import numpy as np

from ragbot.definition import parse_definition
from ragbot.indexing.pipeline import write_page
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


class Corpus:
    """Deterministic synthetic pages: text from a Zipf vocabulary, random vectors."""

    def __init__(self, seed: int = 7, vocab_size: int = 50_000) -> None:
        self.rng = np.random.default_rng(seed)
        words: set[str] = set()
        while len(words) < vocab_size:
            n = int(self.rng.integers(2, 9))
            words.add("".join(HEBREW[i] for i in self.rng.integers(0, len(HEBREW), n)))
        self.words = [str(w) for w in self.rng.permutation(sorted(words))]
        weights = 1.0 / np.arange(1, vocab_size + 1) ** 1.05
        self.p = weights / weights.sum()

    def text(self, n: int, *, top: int | None = None) -> str:
        if top is not None:  # only the `top` most frequent words
            return " ".join(self.words[i] for i in self.rng.integers(0, top, size=n))
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


CPU_MS: dict[str, list[float]] = {}


async def timed(fn: Callable[[], Awaitable[Any]], repeat: int, *, cpu_key: str | None = None) -> list[float]:
    """Wall-clock ms per call; with ``cpu_key`` also the process CPU ms (robust to a busy machine)."""
    out = []
    for _ in range(repeat):
        started, cpu = time.perf_counter(), time.process_time()
        await fn()
        out.append((time.perf_counter() - started) * 1000)
        if cpu_key:
            CPU_MS.setdefault(cpu_key, []).append((time.process_time() - cpu) * 1000)
    return out


def summary(ms: list[float]) -> dict[str, float]:
    ms = sorted(ms)
    return {
        "p50_ms": round(statistics.median(ms), 2),
        "p95_ms": round(ms[int(0.95 * (len(ms) - 1))], 2),
        "n": len(ms),
    }


def store_at(path: Path, synchronous: str = "NORMAL") -> EmbeddedStore:
    sync: Literal["NORMAL", "FULL"] = "FULL" if synchronous == "FULL" else "NORMAL"
    return EmbeddedStore(path=path, definition=DEFINITION, dimensions=DIMENSIONS, synchronous=sync)


async def run(paragraphs: int, path: Path) -> dict[str, Any]:
    corpus = Corpus()
    pages = paragraphs // PER_PAGE
    store = store_at(path)
    results: dict[str, Any] = {
        "paragraphs": pages * PER_PAGE,
        "pages": pages,
        "paragraphs_per_page": PER_PAGE,
        "vector_fields": dict(DIMENSIONS),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "sqlite": sqlite3.sqlite_version,
        },
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
    }
    started = time.perf_counter()
    for pid in range(1, pages + 1):
        await write_page(store, pid, 1, corpus.page(pid, 1))
    results["load_s"] = round(time.perf_counter() - started, 1)
    assert await store.count() == pages * PER_PAGE

    # Cold loads of the derived indices, as a freshly started retriever pays them.
    qvecs = corpus.rng.standard_normal((300, DIM), dtype=np.float32)
    cold = store_at(path)
    started = time.perf_counter()
    await cold.knn(vector_field=FIELDS[0], vector=qvecs[0], k=10)
    results["cold_load_vector_matrices_ms"] = round((time.perf_counter() - started) * 1000)
    started = time.perf_counter()
    await cold.bm25(query=corpus.text(3), k=10)
    results["cold_load_bm25_index_ms"] = round((time.perf_counter() - started) * 1000)
    await cold.close()

    mixed = [corpus.text(int(corpus.rng.integers(2, 7))) for _ in range(300)]
    common = [corpus.text(int(corpus.rng.integers(2, 5)), top=100) for _ in range(100)]
    await store.knn(vector_field=FIELDS[0], vector=qvecs[0], k=50)
    await store.bm25(query=mixed[0], k=50)
    counter = iter(range(10**9))

    def nxt(items: list[Any]) -> Any:
        return items[next(counter) % len(items)]

    results["bm25_k50"] = summary(
        await timed(lambda: store.bm25(query=nxt(mixed), k=50), 300, cpu_key="bm25_k50")
    )
    results["bm25_k50_common_words_only"] = summary(
        await timed(lambda: store.bm25(query=nxt(common), k=50), 100)
    )
    for name in FIELDS:

        def knn(name: str = name) -> Awaitable[Any]:
            return store.knn(vector_field=name, vector=nxt(list(qvecs)), k=50)

        results[f"knn_k50_{name}"] = summary(await timed(knn, 100))
    category = {"categories": "cat7"}  # 2% of the paragraphs
    results["knn_k50_filtered_2pct"] = summary(
        await timed(
            lambda: store.knn(vector_field=FIELDS[0], vector=nxt(list(qvecs)), k=50, filters=category), 50
        )
    )
    results["bm25_k50_filtered_2pct"] = summary(
        await timed(lambda: store.bm25(query=nxt(mixed), k=50, filters=category), 50)
    )

    # Page replace on the full store: NORMAL and FULL writers interleaved (fair under shared load).
    writers = {s: store_at(path, s) for s in ("NORMAL", "FULL")}
    replace_ms: dict[str, list[float]] = {s: [] for s in writers}
    revision = 1
    for _ in range(100):
        for sync, writer in writers.items():
            revision += 1
            pid = int(corpus.rng.integers(1, pages + 1))
            page = corpus.page(pid, revision)
            started = time.perf_counter()
            await write_page(writer, pid, revision, page)
            replace_ms[sync].append((time.perf_counter() - started) * 1000)
    for sync, ms in replace_ms.items():
        results[f"replace_page_{PER_PAGE}p_sync_{sync.lower()}"] = summary(ms)
        await writers[sync].close()

    # Another process (here: another store object, its own connections) writes one page; the
    # reader's next search catches up (appends the new rows, drops the removed ones) before it
    # answers. Timed as the same query right after the write and once more.
    writer = store_at(path)
    after_write: dict[str, list[float]] = {"bm25": [], "bm25_again": [], "knn": [], "knn_again": []}
    for _ in range(30):
        for kind in ("bm25", "knn"):
            revision += 1
            pid = int(corpus.rng.integers(1, pages + 1))
            await write_page(writer, pid, revision, corpus.page(pid, revision))
            query_text, query_vector = nxt(mixed), nxt(list(qvecs))
            for key in (kind, f"{kind}_again"):
                started = time.perf_counter()
                if kind == "bm25":
                    await store.bm25(query=query_text, k=50)
                else:
                    await store.knn(vector_field=FIELDS[0], vector=query_vector, k=50)
                after_write[key].append((time.perf_counter() - started) * 1000)
    await writer.close()
    for key, ms in after_write.items():
        results[f"{key}_after_foreign_write"] = summary(ms)
    assert await store.count() == pages * PER_PAGE
    await store.close()
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        results["terms"] = conn.execute("SELECT COUNT(*) FROM terms").fetchone()[0]
    results["file_mb"] = round(os.path.getsize(path) / 2**20, 1)  # noqa: ASYNC240 - after the timings
    results["vector_matrices_mb"] = round(len(FIELDS) * pages * PER_PAGE * DIM * 4 / 2**20, 1)
    results["cpu_ms"] = {
        key: {
            "p50_ms": round(statistics.median(ms), 2),
            "note": "process CPU time (numpy without BLAS threads)",
        }
        for key, ms in CPU_MS.items()
    }
    results["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    return results


def table(results: dict[str, Any]) -> str:
    rows = [
        f"embedded store: {results['paragraphs']:,} paragraphs, {len(FIELDS)} x {DIM}-d vector fields, "
        f"{results['machine']['cpus']} CPUs",
        f"{'measure':44s} {'p50 ms':>9s} {'p95 ms':>9s}",
    ]
    for key, value in results.items():
        if isinstance(value, dict) and "p50_ms" in value:
            rows.append(f"{key:44s} {value['p50_ms']:9.2f} {value['p95_ms']:9.2f}")
    for key, value in results["cpu_ms"].items():
        rows.append(f"{'cpu time ' + key:44s} {value['p50_ms']:9.2f}")
    for key in (
        "load_s",
        "cold_load_vector_matrices_ms",
        "cold_load_bm25_index_ms",
        "terms",
        "file_mb",
        "vector_matrices_mb",
    ):
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
