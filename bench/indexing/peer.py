"""Indexing against Haystack with the same model, and every ragbot indexing path against the bare model
(issue 31), measured in one run, MiniLM-only definition, CPU, embedded store.

1. ``index_ratio_vs_haystack_eval_<set>``: ``ragbot eval``'s indexing (``ragbot.evaluation.run.
   index_dataset``: every page in one pipeline call) over Haystack's documented indexing pipeline
   (``bench/indexing/peer_haystack.py``: ``SentenceTransformersDocumentEmbedder`` → ``DocumentWriter``
   into an in-memory store), same corpus, same packaged all-MiniLM-L6-v2 folder, same cores; the
   models load before the clock starts on both sides. ``index_ratio_per_text_vs_haystack_<set>`` is
   the same per embedded text (ragbot splits long documents into more paragraphs than Haystack embeds
   documents). Target ≤ 1.0. Haystack runs in its own process through ``uv run --with haystack-ai
   --with sentence-transformers-haystack``: a bench-only dependency ``make test`` never installs.
2. ``raw_encode_ratio_<path>``: texts per second of a path over the bare ``SentenceTransformer.encode``
   of the texts that path stored (read back from the store), at the model's batch size, right after
   it. Paths: ``eval`` (``index_dataset``), ``index`` (``ragbot index``'s ``index_folder`` over the
   documents as Markdown files), ``reindex`` (``ragbot_embedder.service.index_pages``, batches of
   ``RAGBOT_INGEST_REINDEX_BATCH_PAGES``) and ``pings`` (a storm, below). Target ≥ 0.9.
3. ``ping_storm_paragraphs_per_s`` against ``reindex_paragraphs_per_s`` on the same pages (target
   ≥ 0.8×), and ``storm_create_to_retrievable_p95_s``: ``--storm`` pages pinged at once, all waiting,
   taken by the worker the way ``ragbot_embedder.ping_batch`` takes them (``RAGBOT_WORKER_PING_BATCH_
   MAX`` at a time through ``ragbot_embedder.pings.index_pings``, inline pages, job records and events
   in the real Redis). A page is retrievable when its batch is written (the embedded store serves a
   write at once). The same storm one page per call (``..._one_per_call``) is the old worker.
   This is the worker's code path in process: no Celery hop, no HTTP fetch from a wiki.

Every path runs ``--repeat`` times (3), each on a fresh store and followed at once by the bare encode of
what it stored; Haystack runs as often. The fastest run of each counts: on a shared 2-core machine two
identical storms took 8.3 s and 10.2 s one after the other, all of the difference inside the model.

The corpora are sub-sampled (``--docs`` first documents of each set) to keep a run to a few minutes on
two cores; the JSON says how many. Sets missing from ``--data``/beir are named under
``missing_sets``: ``../shared/data`` holds SciFact only, and ``bench/indexing/peer_data.py`` writes Vaswani
and Cranfield from the public files into a folder ``--data`` can name. Run: ``uv run python
bench/indexing/peer.py [--data DIR] [--docs 400] [--storm 100] [--repeat 3]`` with Redis up
(RAGBOT_TEST_REDIS_URL). Writes bench/results/indexing_peer.json (flat) and prints it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from prometheus_client import CollectorRegistry  # noqa: E402
from redis.asyncio import Redis  # noqa: E402

from ragbot.definition import parse_definition  # noqa: E402
from ragbot.embedders import build_embedders  # noqa: E402
from ragbot.embedders.sentence_transformers import SentenceTransformerEmbedder  # noqa: E402
from ragbot.evaluation import load_beir  # noqa: E402
from ragbot.evaluation.data import BeirDataset, beir_page  # noqa: E402
from ragbot.evaluation.run import index_dataset  # noqa: E402
from ragbot.indexing.folder import index_folder  # noqa: E402
from ragbot.messaging.events import EventPublisher  # noqa: E402
from ragbot.messaging.jobs import JobStore  # noqa: E402
from ragbot.observability.metrics import worker_metrics  # noqa: E402
from ragbot.ports import Embedder, SearchStore  # noqa: E402
from ragbot.schemas.messages import IndexPage, IndexPages  # noqa: E402
from ragbot.schemas.pages import Page  # noqa: E402
from ragbot.settings import IngestSettings, ModelSettings, StoreSettings, WorkerSettings  # noqa: E402
from ragbot.sources.wiki import WikiPageSource  # noqa: E402
from ragbot.stores import build_store  # noqa: E402
from ragbot_embedder import service  # noqa: E402
from ragbot_embedder.pings import index_pings  # noqa: E402

MODEL = "all-MiniLM-L6-v2"
SETS = ("vaswani", "scifact", "cranfield")
DEFINITION = parse_definition(
    {
        "identifier_field": "page_id",
        "saved_fields": {"title": "text", "page_id": "integer", "content": "text", "url": "keyword"},
        "field_for_llm": "content",
        "models": {MODEL: "content"},
    }
)


def cpu_name() -> str:
    """The CPU's model name, as ``lscpu`` says it."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    for line in out.splitlines():
        if line.startswith("Model name:"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def data_dir(given: str | None) -> Path:
    """``--data``, else RAGBOT_DATA_DIR, else ../shared/data."""
    return Path(given or os.environ.get("RAGBOT_DATA_DIR") or ROOT.parent / "shared" / "data")


def subset(dataset: BeirDataset, docs: int) -> BeirDataset:
    """The first ``docs`` documents (no queries: only indexing is measured)."""
    corpus = dict(list(dataset.corpus.items())[:docs])
    return BeirDataset(dataset.name, dataset.path, dataset.split, corpus, {}, {})


def temp_store(folder: Path) -> SearchStore:
    """A fresh embedded store in ``folder``."""
    settings = StoreSettings(backend="embedded", embedded_path=folder / f"{uuid.uuid4().hex}.sqlite3")
    return build_store(
        settings=settings, definition=DEFINITION, dimensions={v.name: 384 for v in DEFINITION.vector_fields}
    )


async def stored_texts(store: SearchStore, *, page_ids: Sequence[int]) -> list[str]:
    """The content of every paragraph the store holds for these pages (what the path embedded)."""
    texts: list[str] = []
    for page_id in page_ids:
        texts.extend(str(h.source.get("content") or "") for h in await store.page_paragraphs(page_id=page_id))
    return [t for t in texts if t.strip()]


def raw_seconds(embedder: SentenceTransformerEmbedder, texts: Sequence[str]) -> float:
    """The bare model encoding ``texts`` in its batches, as a path would need at best."""
    model: Any = embedder._model
    started = time.perf_counter()
    model.encode(
        list(dict.fromkeys(texts)),
        batch_size=embedder.batch_size,
        normalize_embeddings=True,
        show_progress_bar=False,
    )
    return time.perf_counter() - started


def haystack_seconds(
    docs: Sequence[Mapping[str, str]], model_dir: Path, folder: Path, precision: str = "float32"
) -> dict[str, Any]:
    """Haystack's indexing pipeline over the documents, in its own process (bench-only dependency),
    its model in ``precision`` (float32: what its documented pipeline loads)."""
    path = folder / "haystack-docs.jsonl"
    path.write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    command = [
        "uv",
        "run",
        "--no-sync",
        "--with",
        "haystack-ai",
        "--with",
        "sentence-transformers-haystack",
        "python",
        str(ROOT / "bench" / "indexing" / "peer_haystack.py"),
        str(path),
        str(model_dir),
        precision,
    ]
    out = subprocess.run(command, capture_output=True, text=True, check=True, cwd=ROOT).stdout
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


def fastest_haystack(
    docs: Sequence[Mapping[str, str]], model_dir: Path, folder: Path, repeat: int, precision: str = "float32"
) -> dict[str, Any]:
    """Haystack's fastest of ``repeat`` runs in ``precision``."""
    runs = [haystack_seconds(docs, model_dir, folder, precision) for _ in range(repeat)]
    fastest = min(runs, key=lambda run: float(run["seconds"]))
    if fastest["precision"] != precision:
        raise RuntimeError(f"Haystack ran in {fastest['precision']}, not the {precision} asked for")
    return fastest


def truncation(
    docs: Sequence[Mapping[str, str]], embedder: SentenceTransformerEmbedder, name: str
) -> dict[str, Any]:
    """What Haystack's embedder never sees: it embeds ``title\\ntext`` cut at the model's limit, where
    ragbot splits a long document into paragraphs at that limit and embeds them all."""
    limit = embedder.max_tokens
    counts = [embedder.count_tokens(f"{d['title']}\n{d['text']}") for d in docs]
    return {
        f"haystack_truncated_docs_{name}": sum(1 for n in counts if n > limit),
        f"haystack_tokens_not_embedded_share_{name}": round(
            sum(max(0, n - limit) for n in counts) / sum(counts), 3
        ),
        "model_max_tokens": limit,
    }


def context(store: SearchStore, redis: Redis, prefix: str, embedders: Mapping[str, Embedder]) -> Any:
    """The worker's indexing context over this store, job records and events in the real Redis."""
    return service.IndexingContext(
        definition=DEFINITION,
        embedders=embedders,
        store=store,
        source=WikiPageSource(allowed_hosts=["127.0.0.1"], max_bytes=1 << 20, timeout_s=5.0),
        jobs=JobStore(redis=redis, key_prefix=prefix, ttl_s=600),
        events=EventPublisher(redis=redis, key_prefix=prefix),
        metrics=worker_metrics(CollectorRegistry()),
        max_tokens=WorkerSettings().paragraph_tokens,
    )


async def storm(ctx: Any, pages: Sequence[Page], per_call: int) -> tuple[list[float], int]:
    """Every page pinged at once, taken ``per_call`` at a time; per-page retrievable seconds and
    paragraphs written."""
    commands = [
        IndexPage(job_id=uuid.uuid4().hex, page_id=p.page_id, revision_id=p.revision_id, page=p)
        for p in pages
    ]
    started = time.perf_counter()
    ready: list[float] = []
    paragraphs = 0
    for start in range(0, len(commands), per_call):
        chunk = commands[start : start + per_call]
        results = await index_pings(ctx=ctx, commands=chunk)
        for result in results:
            if isinstance(result, Exception):
                raise result
            paragraphs += int(result.detail.split()[1])
        ready.extend([time.perf_counter() - started] * len(chunk))
    return ready, paragraphs


async def reindex(ctx: Any, pages: Sequence[Page], per_batch: int) -> int:
    """The pages as a bulk reindex's batch jobs; paragraphs written."""
    paragraphs = 0
    for start in range(0, len(pages), per_batch):
        command = IndexPages(job_id=uuid.uuid4().hex, pages=list(pages[start : start + per_batch]))
        outcome = await service.index_pages(ctx=ctx, command=command)
        paragraphs += int(outcome.detail.split("indexed, ")[1].split()[0])
    return paragraphs


@dataclass
class Best:
    """The fastest of a path's runs and the fastest bare encode of what it stored."""

    seconds: float = math.inf
    raw: float = math.inf
    detail: Any = None  # what the fastest run returned

    @property
    def ratio(self) -> float:
        """The bare model's time over the path's: 1.0 is the path at the model's speed."""
        return round(self.raw / self.seconds, 3)


async def best_of(
    repeat: int,
    run: Callable[..., Awaitable[Any]],
    texts_of: Callable[[SearchStore], Awaitable[list[str]]],
    *,
    folder: Path,
    embedder: SentenceTransformerEmbedder,
) -> Best:
    """``run`` ``repeat`` times, each on a fresh store and followed at once by the bare encode of the
    texts it stored: a path and its comparison share the same moment of a shared machine's load."""
    best = Best()
    for _ in range(repeat):
        store = temp_store(folder)
        await store.ensure_ready()
        started = time.perf_counter()
        detail = await run(store=store)
        seconds = time.perf_counter() - started
        texts = await texts_of(store)
        await store.close()
        best.raw = min(best.raw, raw_seconds(embedder, texts))
        if seconds < best.seconds:
            best.seconds, best.detail = seconds, detail
    return best


def p95(values: Sequence[float]) -> float:
    return statistics.quantiles(values, n=20, method="inclusive")[18] if len(values) > 1 else values[0]


async def other_paths(
    args: argparse.Namespace,
    *,
    docs: Sequence[Mapping[str, str]],
    pages: Sequence[Page],
    folder: Path,
    redis: Redis,
    prefix: str,
    embedders: Mapping[str, Embedder],
    embedder: SentenceTransformerEmbedder,
) -> dict[str, Any]:
    """``ragbot index`` over the documents as Markdown files, then reindex and the ping storms over
    ``pages``, each against the bare model."""
    result: dict[str, Any] = {}
    files = folder / "files"
    files.mkdir()
    for n, doc in enumerate(docs):
        (files / f"{n:05d}.md").write_text(f"# {doc['title']}\n\n{doc['text']}\n", encoding="utf-8")

    async def index_files(store: SearchStore) -> Any:
        # a fresh manifest each run, so no file is skipped as unchanged
        manifest = folder / f"manifest-{uuid.uuid4().hex}.json"
        return await index_folder(
            [files],
            store=store,
            definition=DEFINITION,
            embedders=embedders,
            manifest_path=manifest,
            verify=False,
        )

    indexed = await best_of(args.repeat, index_files, all_texts, folder=folder, embedder=embedder)
    result["raw_encode_ratio_index"] = indexed.ratio
    result["index_files"] = len(indexed.detail.indexed)
    storm_texts = partial(stored_texts, page_ids=[p.page_id for p in pages])
    per_batch = IngestSettings().reindex_batch_pages

    async def reindexed(store: SearchStore) -> int:
        return await reindex(context(store, redis, prefix, embedders), pages, per_batch)

    bulk = await best_of(args.repeat, reindexed, storm_texts, folder=folder, embedder=embedder)
    result["raw_encode_ratio_reindex"] = bulk.ratio
    result["reindex_paragraphs_per_s"] = round(bulk.detail / bulk.seconds, 1)
    for per_call, suffix in ((WorkerSettings().ping_batch_max, ""), (1, "_one_per_call")):

        async def pinged(store: SearchStore, per_call: int = per_call) -> tuple[list[float], int]:
            return await storm(context(store, redis, prefix, embedders), pages, per_call)

        pings = await best_of(args.repeat, pinged, storm_texts, folder=folder, embedder=embedder)
        ready, paragraphs = pings.detail
        if not suffix:
            result["raw_encode_ratio_pings"] = pings.ratio
        result[f"ping_storm_paragraphs_per_s{suffix}"] = round(paragraphs / pings.seconds, 1)
        result[f"storm_create_to_retrievable_p95_s{suffix}"] = round(p95(ready), 2)
    result["ping_batch_max"] = WorkerSettings().ping_batch_max
    result["ping_storm_vs_reindex"] = round(
        result["ping_storm_paragraphs_per_s"] / result["reindex_paragraphs_per_s"], 3
    )
    return result


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    data = data_dir(args.data) / "beir"
    embedders = build_embedders(settings=ModelSettings(device="cpu"), definition=DEFINITION)
    embedder = embedders[MODEL]
    assert isinstance(embedder, SentenceTransformerEmbedder)
    embedder.warm_up()
    result: dict[str, Any] = {
        "cpu": cpu_name(),
        "cores": os.cpu_count(),
        "model": MODEL,
        "ragbot_precision": embedder.resolved_precision,
        "load_average_at_start": round(os.getloadavg()[0], 2),
        "docs_per_set": args.docs,
        "storm_pages": args.storm,
        "repeat": args.repeat,
        "missing_sets": [s for s in SETS if not (data / s).is_dir()],
        "note": "sub-sampled corpora (first docs_per_set documents); every path and Haystack ran `repeat` "
        "times, each ragbot run followed at once by its bare-model encode; the fastest of each counts",
    }
    redis = Redis.from_url(os.environ.get("RAGBOT_TEST_REDIS_URL", "redis://127.0.0.1:6379/0"))
    prefix = f"bench-peer-{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory(prefix="indexing-peer-") as tmp:
        folder = Path(tmp)
        for name in SETS:
            if not (data / name).is_dir():
                continue
            dataset = subset(load_beir(data / name), args.docs)
            pages = [beir_page(doc, n) for n, doc in enumerate(dataset.corpus.values(), start=1)]
            ids = [p.page_id for p in pages if p.title.strip() or p.content.strip()]
            # ragbot eval's indexing
            evals = await best_of(
                args.repeat,
                partial(index_dataset, dataset, definition=DEFINITION, embedders=embedders, max_tokens=512),
                partial(stored_texts, page_ids=ids),
                folder=folder,
                embedder=embedder,
            )
            eval_s, stats = evals.seconds, evals.detail
            docs = [{"title": d.title, "text": d.text} for d in dataset.corpus.values()]
            # Haystack as often as ragbot, its fastest run counts too
            peer = fastest_haystack(docs, embedder.path, folder, args.repeat)
            if embedder.resolved_precision != peer["precision"]:
                # ragbot's "auto" chose another precision than Haystack's default: Haystack in it too
                same = fastest_haystack(docs, embedder.path, folder, args.repeat, embedder.resolved_precision)
                result.update(
                    {
                        f"haystack_index_s_same_precision_{name}": same["seconds"],
                        f"index_ratio_vs_haystack_same_precision_{name}": round(eval_s / same["seconds"], 3),
                        f"index_ratio_per_text_vs_haystack_same_precision_{name}": round(
                            (eval_s / stats.paragraphs) / (same["seconds"] / same["texts"]), 3
                        ),
                    }
                )
            result.update(
                {
                    f"ragbot_eval_index_s_{name}": round(eval_s, 2),
                    f"ragbot_paragraphs_{name}": stats.paragraphs,
                    f"haystack_index_s_{name}": peer["seconds"],
                    f"haystack_texts_{name}": peer["texts"],
                    f"index_ratio_vs_haystack_eval_{name}": round(eval_s / peer["seconds"], 3),
                    f"index_ratio_per_text_vs_haystack_{name}": round(
                        (eval_s / stats.paragraphs) / (peer["seconds"] / peer["texts"]), 3
                    ),
                    **truncation(docs, embedder, name),
                    "haystack_precision": peer["precision"],
                    "haystack_version": peer["version"],
                }
            )
            if name != "scifact":
                continue
            result["raw_encode_ratio_eval"] = evals.ratio
            result.update(
                await other_paths(
                    args,
                    docs=docs,
                    pages=[p for p in pages if p.page_id in set(ids)][: args.storm],
                    folder=folder,
                    redis=redis,
                    prefix=prefix,
                    embedders=embedders,
                    embedder=embedder,
                )
            )
    result["load_average_at_end"] = round(os.getloadavg()[0], 2)
    keys = [k async for k in redis.scan_iter(match=f"{prefix}:*", count=500)]
    if keys:
        await redis.delete(*keys)
    await redis.aclose()
    embedder.close()
    return result


async def all_texts(store: SearchStore) -> list[str]:
    """The content of every paragraph the store holds."""
    return [str(h.source.get("content") or "") for h in await _all_paragraphs(store)]


async def _all_paragraphs(store: SearchStore) -> list[Any]:
    """Every paragraph the store holds, page by page."""
    held: list[Any] = []
    while states := await store.list_pages(limit=100, offset=len({h.page_id for h in held})):
        for state in states:
            held.extend(await store.page_paragraphs(page_id=state.page_id))
    return held


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--data", help="folder holding beir/<set> (default RAGBOT_DATA_DIR or ../shared/data)"
    )
    parser.add_argument("--docs", type=int, default=400, help="documents per set (default 400)")
    parser.add_argument("--storm", type=int, default=100, help="pages pinged at once (default 100)")
    parser.add_argument(
        "--repeat", type=int, default=3, help="runs of reindex and each storm; the fastest counts (default 3)"
    )
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "indexing_peer.json")
    args = parser.parse_args()
    result = asyncio.run(measure(args))
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    sys.stdout.write(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
