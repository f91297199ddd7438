"""Indexing benchmarks (issue 3), measured side by side in one run, MiniLM on the CPU.

1. ``index_throughput_vs_encode``: paragraphs per second of the indexing pipeline (split, embed in
   shared batches, write to Elasticsearch with ``replace_page``: ``ragbot_embedder.service.write_pages``,
   the path of a bulk reindex batch) over the raw ``SentenceTransformer.encode()`` of the same model on
   the same paragraph texts at the same batch size. Runs alternate (encode, pipeline, encode, ...) and
   the ratio is the median of the pairs, so both see the same machine load.
2. ``index_speedup_vs_seed``: the pipeline over kolzchut-ragbot's method on the same pages and the same
   Elasticsearch: per page a delete, then for each paragraph one ``encode([text])`` and one ``index``
   request (no bulk), then a refresh. kolzchut-ragbot's model runs as kolzchut-ragbot loads it
   (``SentenceTransformer(path)``: float32); the pipeline runs as ragbot configures it ("auto"
   precision: bfloat16 on a CPU with AMX). ``index_speedup_vs_seed_same_precision`` is the same
   comparison with kolzchut-ragbot's method given ragbot's model (the gain of batching and bulk writes alone).
3. ``ping_to_searchable_p95_s``: real ingest and worker processes (Redis, Elasticsearch, a local wiki):
   a change ping for a 20-paragraph page until a count query on Elasticsearch sees the new revision.
4. ``index_peak_rss_gb_5mb_page``: the worker's peak resident memory (VmHWM, its whole life, so the
   model's load is included) after indexing a 5 MB page pushed through ``POST /v1/pages``.

Run: ``uv run python -m bench.indexing.pipeline [--pages 12] [--pings 20] [--rss-mb 5]`` with Redis and
Elasticsearch up (``bash scripts/services.sh up``; URLs from RAGBOT_TEST_REDIS_URL / RAGBOT_TEST_ES_URL).
Writes bench/results/indexing.json (flat) and prints it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

import httpx
from prometheus_client import CollectorRegistry

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from support.fake_wiki import FakeWiki  # noqa: E402
from support.processes import (  # noqa: E402
    ServiceProcess,
    delete_es_prefix,
    delete_redis_prefix,
    free_port,
    stack_env,
    stack_processes,
)

from ragbot.definition import parse_definition  # noqa: E402
from ragbot.embedders import build_embedders  # noqa: E402
from ragbot.indexing.embed import prepare_paragraphs  # noqa: E402
from ragbot.messaging.events import EventPublisher  # noqa: E402
from ragbot.messaging.jobs import JobStore  # noqa: E402
from ragbot.observability.metrics import worker_metrics  # noqa: E402
from ragbot.ports import Embedder  # noqa: E402
from ragbot.schemas.messages import PageDeleted, PageIndexed  # noqa: E402
from ragbot.schemas.pages import Page  # noqa: E402
from ragbot.settings import ModelSettings, StoreSettings  # noqa: E402
from ragbot.stores import build_store  # noqa: E402
from ragbot.stores.common import prepare_source  # noqa: E402
from ragbot.stores.elasticsearch import ElasticsearchStore  # noqa: E402
from ragbot.stores.mapping import index_name  # noqa: E402
from ragbot_embedder import service  # noqa: E402

MODEL = "all-MiniLM-L6-v2"
BATCH = 32
DEFINITION_RAW = {
    "identifier_field": "page_id",
    "saved_fields": {"title": "text", "page_id": "integer", "url": "keyword", "content": "text"},
    "field_for_llm": "content",
    "models": {MODEL: "content"},
}
DEFINITION = parse_definition(DEFINITION_RAW)
PAGES = [Path("/work/shared/data/kolzchut-pages/pages.jsonl"), ROOT / "samples/kolzchut/pages.jsonl"]
RESULTS = ROOT / "bench/results/indexing.json"
TARGETS = {
    "index_throughput_vs_encode": ">= 0.9",
    "index_speedup_vs_seed": ">= 10",
    "ping_to_searchable_p95_s": "<= 2.0",
    "index_peak_rss_gb_5mb_page": "< 1.5",
}
WORDS = [
    *("employee", "worker", "leave", "salary", "rights", "court", "benefit", "insurance", "pension"),
    *("tax", "refund", "notice", "employer", "allowance", "month", "year", "days", "period", "payment"),
    *("claim", "form", "office", "national", "disability", "child", "family", "health", "severance"),
    *("overtime", "vacation", "sick", "maternity", "housing", "rent", "student", "unemployment"),
]


class NullEvents:
    """Events go nowhere (the bench measures indexing, not Redis)."""

    async def publish(self, event: PageIndexed | PageDeleted) -> str:
        return "0-0"


def load_pages(count: int) -> list[Page]:
    path = next(p for p in PAGES if p.exists())
    with path.open(encoding="utf-8") as lines:
        records = [json.loads(line) for line in lines if line.strip()]
    return [Page.from_wiki_content(r) for r in records[:count]]


def english_page(page_id: int, revision_id: int, *, paragraphs: int, words: int, seed: int) -> dict[str, Any]:
    """A content-API page whose paragraphs each fill most of MiniLM's 256 tokens on their own."""
    rng = random.Random(seed)
    body = "\n\n".join(
        f"## Section {n}\n\n" + " ".join(rng.choice(WORDS) for _ in range(words)) + "."
        for n in range(paragraphs)
    )
    return {"page_id": page_id, "revision_id": revision_id, "title": f"Bench page {page_id}", "content": body}


# --- 1 and 2: in process ------------------------------------------------------------------------------


async def in_process(*, es_url: str, pages: list[Page], rounds: int) -> dict[str, float | str]:
    """Pipeline vs raw encode vs kolzchut-ragbot's method, alternating, on one Elasticsearch index prefix."""
    embedders = build_embedders(
        settings=ModelSettings(device="cpu", embed_batch_size=BATCH), definition=DEFINITION
    )
    embedder = embedders[MODEL]
    embedder.warm_up()
    model: Any = getattr(embedder, "_model")  # noqa: B009 - the raw SentenceTransformer, for encode()
    # kolzchut-ragbot's model as kolzchut-ragbot loads it: float32, whatever the CPU.
    kz_embedder = build_embedders(
        settings=ModelSettings(device="cpu", embed_batch_size=BATCH, precision="float32"),
        definition=DEFINITION,
    )[MODEL]
    kz_embedder.warm_up()
    kz_model: Any = getattr(kz_embedder, "_model")  # noqa: B009
    settings = StoreSettings(
        backend="elasticsearch",
        es_url=es_url,
        es_index_prefix=f"bench_{uuid.uuid4().hex[:10]}",
        es_timeout_s=60,
    )
    store = build_store(
        settings=settings, definition=DEFINITION, dimensions={f"content_{MODEL}_vectors": 384}
    )
    await store.ensure_ready()
    ctx = service.IndexingContext(
        definition=DEFINITION,
        embedders=embedders,
        store=store,
        source=cast(Any, None),
        jobs=cast(JobStore, None),
        events=cast(EventPublisher, NullEvents()),
        metrics=worker_metrics(CollectorRegistry()),
        max_tokens=512,
        link_targets="drop",
        batch_max_paragraphs=512,
    )
    prepared = [
        prepare_paragraphs(p, definition=DEFINITION, embedders=embedders, max_tokens=512, link_targets="drop")
        for p in pages
    ]
    texts = list(dict.fromkeys(str(sp.fields["content"]) for group in prepared for sp in group))
    count = sum(len(group) for group in prepared)
    try:
        model.encode(texts[:64], batch_size=BATCH)  # warm the kernels
        raw_s: list[float] = []
        pipeline_s: list[float] = []
        for _ in range(rounds):
            started = time.perf_counter()
            model.encode(texts, batch_size=BATCH, convert_to_numpy=True)
            raw_s.append(time.perf_counter() - started)
            started = time.perf_counter()
            await service.write_pages(ctx=ctx, store=store, pages=pages, job_id=None)
            pipeline_s.append(time.perf_counter() - started)
        kz_pages = pages[: max(2, len(pages) // 3)]
        kz_count = sum(len(g) for g in prepared[: len(kz_pages)])
        kz_runs: dict[str, float] = {}
        for label, chosen in (("kolzchut", kz_embedder), ("same_precision", embedder)):
            started = time.perf_counter()
            await kolzchut_method(
                store=cast(ElasticsearchStore, store),
                embedder=chosen,
                pages=kz_pages,
                prefix=settings.es_index_prefix,
            )
            kz_runs[label] = time.perf_counter() - started
        kz_s = kz_runs["kolzchut"]
        started = time.perf_counter()
        await service.write_pages(ctx=ctx, store=store, pages=kz_pages, job_id=None)
        ours_s = time.perf_counter() - started
        # Where kolzchut-ragbot's time goes: its model alone, one text per call and batched, on its texts.
        kz_texts = [str(sp.fields["content"]) for group in prepared[: len(kz_pages)] for sp in group]
        started = time.perf_counter()
        for text in kz_texts:
            kz_model.encode([text], convert_to_numpy=True)
        one_by_one_s = time.perf_counter() - started
        started = time.perf_counter()
        kz_model.encode(kz_texts, batch_size=BATCH, convert_to_numpy=True)
        batched_s = time.perf_counter() - started
    finally:
        await cast(ElasticsearchStore, store).drop_indices()
        await store.close()
        embedder.close()
        kz_embedder.close()
    ratios = [(len(texts) / p) / (len(texts) / r) for r, p in zip(raw_s, pipeline_s, strict=True)]
    return {
        "index_throughput_vs_encode": round(statistics.median(ratios), 3),
        "index_speedup_vs_seed": round(kz_s / ours_s, 2),
        "index_speedup_vs_seed_same_precision": round(kz_runs["same_precision"] / ours_s, 2),
        "precision": str(getattr(embedder, "resolved_precision", "")),
        "bench_pages": len(pages),
        "bench_paragraphs": count,
        "encode_paragraphs_per_s": round(len(texts) / statistics.median(raw_s), 1),
        "pipeline_paragraphs_per_s": round(count / statistics.median(pipeline_s), 1),
        "seed_paragraphs_per_s": round(kz_count / kz_s, 2),
        "seed_comparison_paragraphs": kz_count,
        # Its model's share of kolzchut-ragbot's time, and the most batching that float32 model could
        # gain over kolzchut-ragbot on this machine (its time / batched encode() of the same texts).
        "seed_model_share": round(one_by_one_s / kz_s, 3),
        "speedup_bound_batched_encode_vs_seed": round(kz_s / batched_s, 2),
    }


async def kolzchut_method(
    *, store: ElasticsearchStore, embedder: Embedder, pages: Sequence[Page], prefix: str
) -> None:
    """kolzchut-ragbot's update_docs: delete the page, then embed and index each paragraph on its own."""
    client = store._client
    for page in pages:
        index = index_name(prefix, page.page_id)
        paragraphs = prepare_paragraphs(
            page, definition=DEFINITION, embedders={MODEL: embedder}, max_tokens=512, link_targets="drop"
        )
        # kolzchut-ragbot's delete_by_query (the test distribution has no reindex module): same effect.
        await store.delete_page(page_id=page.page_id)
        for paragraph in paragraphs:
            paragraph.vectors[f"content_{MODEL}_vectors"] = embedder.embed_passages(
                [str(paragraph.fields["content"])]
            )[0]
            await client.index(
                index=index,
                id=paragraph.doc_id,
                document=store._document(paragraph, prepare_source(paragraph)),
            )
        await client.indices.refresh(index=index)


# --- 3 and 4: through the services ----------------------------------------------------------------------


@contextmanager
def services(
    *, redis_url: str, es_url: str, tmp: Path
) -> Iterator[tuple[str, FakeWiki, ServiceProcess, str, str]]:
    """Ingest and the worker as processes, on Elasticsearch, with a local wiki; cleaned up afterwards."""
    run = uuid.uuid4().hex[:10]
    prefix = f"bench-{run}"
    definition = tmp / "definition.json"
    definition.write_text(json.dumps(DEFINITION_RAW), encoding="utf-8")
    ports = {"ingest": free_port(), "worker": free_port()}
    env = stack_env(
        definition=definition,
        redis_url=redis_url,
        prefix=prefix,
        tmp=tmp,
        ports=ports,
        store="elasticsearch",
        es_url=es_url,
        overrides={"RAGBOT_LOG_LEVEL": "WARNING", "RAGBOT_INGEST_MAX_PAGE_BYTES": str(8 * 1024 * 1024)},
    )
    wiki = FakeWiki().start()
    procs = stack_processes(ports, env, log_dir=tmp, cwd=tmp)
    try:
        for proc in procs:
            proc.start()
        for proc in procs:
            proc.wait_healthy(timeout_s=600)
        metrics = f"http://127.0.0.1:{ports['worker']}/metrics"
        yield f"http://127.0.0.1:{ports['ingest']}", wiki, procs[1], prefix, metrics
    finally:
        for proc in procs:
            proc.stop()
        wiki.stop()
        delete_redis_prefix(redis_url, prefix)
        delete_es_prefix(es_url, prefix)


def wait_job(client: httpx.Client, job_id: str, timeout_s: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        record: dict[str, Any] = client.get(f"/v1/jobs/{job_id}").json()
        if record["state"] in ("done", "skipped", "failed"):
            return record
        time.sleep(0.05)
    raise TimeoutError(f"job {job_id} did not end in {timeout_s} s")


def ping_to_searchable(
    *, ingest_url: str, wiki: FakeWiki, es_url: str, prefix: str, pings: int, metrics_url: str
) -> dict[str, float]:
    """Seconds from the ping's POST until a search on Elasticsearch sees the new revision.

    The worker's own metrics split each ping's time: splitting and embedding (the model) against the
    rest (queue, fetch, page state, write, refresh, job records).
    """
    page_id = 500_001
    build_before: tuple[float, float] = (0.0, 0.0)
    search = httpx.Client(base_url=es_url, timeout=10)
    latencies: list[float] = []
    with httpx.Client(base_url=ingest_url, timeout=30) as client:
        for revision in range(1, pings + 2):
            wiki.put(english_page(page_id, revision, paragraphs=20, words=150, seed=revision))
            started = time.perf_counter()
            response = client.post("/v1/pages/changed", json=wiki.ping(page_id))
            response.raise_for_status()
            query = {
                "bool": {"filter": [{"term": {"page_id": page_id}}, {"term": {"revision_id": revision}}]}
            }
            while True:
                hits = search.post(f"/{prefix}_*/_count", json={"query": query}).json().get("count", 0)
                if hits:
                    break
                if time.perf_counter() - started > 120:
                    raise TimeoutError("the page never became searchable")
                time.sleep(0.01)
            elapsed = time.perf_counter() - started
            record = wait_job(client, response.json()["job_id"], 60)
            if revision == 1:
                paragraphs = int(str(record["detail"]).split()[1])
                build_before = _build_seconds(metrics_url)
                continue  # the first ping also creates the index: not part of the steady state
            latencies.append(elapsed)
    search.close()
    build_sum, build_count = (a - b for a, b in zip(_build_seconds(metrics_url), build_before, strict=True))
    build_mean = build_sum / max(1.0, build_count)
    latencies.sort()
    p95 = latencies[min(len(latencies) - 1, round(0.95 * len(latencies)) - 1)]
    return {
        "ping_to_searchable_p95_s": round(p95, 3),
        "ping_to_searchable_p50_s": round(statistics.median(latencies), 3),
        "ping_page_paragraphs": paragraphs,
        "pings": len(latencies),
        "ping_split_and_embed_mean_s": round(build_mean, 3),
        "ping_other_mean_s": round(statistics.fmean(latencies) - build_mean, 3),
    }


def _build_seconds(metrics_url: str) -> tuple[float, float]:
    """(sum, count) of the worker's ragbot_paragraph_build_seconds histogram."""
    values = {"sum": 0.0, "count": 0.0}
    for line in httpx.get(metrics_url, timeout=10).text.splitlines():
        for kind in values:
            if line.startswith(f"ragbot_paragraph_build_seconds_{kind} "):
                values[kind] = float(line.split()[1])
    return values["sum"], values["count"]


def peak_rss(*, ingest_url: str, worker: ServiceProcess, megabytes: float) -> dict[str, float]:
    """The worker's VmHWM after indexing one page of ``megabytes`` MB pushed inline."""
    pid = worker.process.pid if worker.process else 0
    before = _status_kb(pid, "VmHWM")
    page = english_page(500_002, 1, paragraphs=1, words=10, seed=7)
    rng = random.Random(5)
    chunks: list[str] = []
    size = 0
    section = 0
    while size < megabytes * 1024 * 1024:
        text = f"## Section {section}\n\n" + " ".join(rng.choice(WORDS) for _ in range(150)) + "."
        chunks.append(text)
        size += len(text) + 2
        section += 1
    page["content"] = "\n\n".join(chunks)
    body = json.dumps(page).encode()
    started = time.perf_counter()
    with httpx.Client(base_url=ingest_url, timeout=120) as client:
        response = client.post("/v1/pages", content=body, headers={"Content-Type": "application/json"})
        response.raise_for_status()
        record = wait_job(client, response.json()["job_id"], 3600)
    if record["state"] != "done":
        raise RuntimeError(f"the 5 MB page was not indexed: {record}")
    return {
        "index_peak_rss_gb_5mb_page": round(_status_kb(pid, "VmHWM") / 1024 / 1024, 3),
        "worker_rss_gb_before_5mb_page": round(before / 1024 / 1024, 3),
        "rss_page_mb": round(len(page["content"]) / 1024 / 1024, 2),
        "rss_page_paragraphs": int(str(record["detail"]).split()[1]),
        "rss_page_seconds": round(time.perf_counter() - started, 1),
    }


def _status_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} for process {pid}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pages", type=int, default=12, help="Kol-Zchut pages for the throughput runs")
    parser.add_argument("--rounds", type=int, default=5, help="alternating encode/pipeline rounds")
    parser.add_argument("--pings", type=int, default=20, help="pings for the p95")
    parser.add_argument("--rss-mb", type=float, default=5.0, help="size of the page for the memory figure")
    parser.add_argument(
        "--redis-url", default=os.environ.get("RAGBOT_TEST_REDIS_URL", "redis://127.0.0.1:6390/0")
    )
    parser.add_argument("--es-url", default=os.environ.get("RAGBOT_TEST_ES_URL", "http://127.0.0.1:9250"))
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()
    started = time.time()
    results: dict[str, Any] = {}
    results.update(
        asyncio.run(in_process(es_url=args.es_url, pages=load_pages(args.pages), rounds=args.rounds))
    )
    print(json.dumps(results), flush=True)
    with (
        tempfile.TemporaryDirectory(prefix="ragbot-bench-") as tmp,
        services(redis_url=args.redis_url, es_url=args.es_url, tmp=Path(tmp)) as (
            ingest_url,
            wiki,
            worker,
            prefix,
            metrics_url,
        ),
    ):
        results.update(
            ping_to_searchable(
                ingest_url=ingest_url,
                wiki=wiki,
                es_url=args.es_url,
                prefix=prefix,
                pings=args.pings,
                metrics_url=metrics_url,
            )
        )
        print(json.dumps(results), flush=True)
        results.update(peak_rss(ingest_url=ingest_url, worker=worker, megabytes=args.rss_mb))
    results.update(
        {
            "model": MODEL,
            "device": "cpu",
            "batch_size": BATCH,
            "store": "elasticsearch",
            "cpus": os.cpu_count() or 0,
            "load_average_1m_at_end": round(os.getloadavg()[0], 2),
            "machine": platform.machine(),
            "python": platform.python_version(),
            "seconds": round(time.time() - started, 1),
            **{f"target_{k}": v for k, v in TARGETS.items()},
        }
    )
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
