"""``bench/operations/reconcile.py``: ``reconcile_removed_wrong``, pages removed although the list named them.

A real embedded store (a temporary SQLite file) gets a few hundred synthetic pages, at revisions of
their own. The wiki's list is made the way Kol-Zchut's drifts: most pages kept, some edited since
(a newer revision), some deleted or excluded (left out), some created while ragbot was down (new
ids), shuffled, in ``GetRelevantPageIds.php --output=json --with-titles``'s shape. Ingest's own
``accept_reconcile`` plans it against the store and queues its commands on the real Redis (Celery's
sender); the delete commands are then read back off the queue and carried out by the worker's
``delete_page``. The figure compares the store before and after with the list (target 0); the
others say what the run did.

Run: ``uv run python -m bench.operations.reconcile [--pages 400]`` (Redis from
``RAGBOT_TEST_REDIS_URL``, default ``redis://127.0.0.1:6379/0``).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import random
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import redis
from prometheus_client import CollectorRegistry
from redis.asyncio import Redis

from ragbot.definition import parse_definition
from ragbot.messaging.events import EventPublisher
from ragbot.messaging.jobs import JobStore
from ragbot.messaging.queue import TaskSender, create_celery_app, queue_keys
from ragbot.messaging.reconcile import ReconcileRequest
from ragbot.messaging.reindex import WikiLister
from ragbot.observability.metrics import worker_metrics
from ragbot.ports import StoredParagraph
from ragbot.schemas.messages import DELETE_PAGE_TASK, DeletePage
from ragbot.settings import RedisSettings, StoreSettings
from ragbot.sources.wiki import WikiPageSource
from ragbot.stores import build_store, doc_id
from ragbot_embedder import service as worker
from ragbot_ingest.service import accept_reconcile

DEFINITION = parse_definition(
    {
        "identifier_field": "page_id",
        "saved_fields": {"title": "text", "page_id": "integer", "content": "text", "url": "keyword"},
        "field_for_llm": "content",
        "models": {"m": "content"},
    }
)
DIMENSIONS = {v.name: 16 for v in DEFINITION.vector_fields}
QUEUE = "bench.reconcile"
CALLBACK = "https://www.kolzchut.org.il/w/rest.php/cbragcontent/v0/page_id/"


def default_redis_url() -> str:
    """Redis as ``make bench`` sets it."""
    return os.environ.get("RAGBOT_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


def synthetic_wiki(pages: int, seed: int) -> tuple[dict[int, int], list[dict[str, Any]]]:
    """The indexed ``{page_id: revision}`` and the wiki's relevant list (with titles) drifted from it."""
    rng = random.Random(seed)
    ids = rng.sample(range(1, 200_000), pages)  # Kol-Zchut's ids are sparse and unordered
    indexed = {p: rng.randint(1_000, 900_000) for p in ids}
    gone = set(rng.sample(ids, pages * 6 // 100))  # deleted, excluded, moved out of scope
    new = [p for p in rng.sample(range(200_000, 250_000), pages * 3 // 100)]
    listing = [{"id": p, "title": f"Page {p}"} for p in ids if p not in gone]
    listing += [{"id": p, "title": f"New page {p}"} for p in new]
    rng.shuffle(listing)
    return indexed, listing


def paragraphs(page_id: int, revision_id: int, rng: np.random.Generator) -> list[StoredParagraph]:
    return [
        StoredParagraph(
            doc_id=doc_id(page_id, revision_id, n),
            page_id=page_id,
            revision_id=revision_id,
            paragraph=n,
            fields={"title": f"Page {page_id}", "content": f"paragraph {n} of {page_id}", "page_id": page_id},
            vectors={name: rng.standard_normal(dim).astype(np.float32) for name, dim in DIMENSIONS.items()},
        )
        for n in range(3)
    ]


def queued_deletes(redis_settings: RedisSettings) -> tuple[list[DeletePage], int]:
    """The delete commands on the queue (taken off it) and how many other commands there were."""
    client = redis.Redis.from_url(redis_settings.url)
    deletes: list[DeletePage] = []
    others = 0
    try:
        for key in queue_keys(redis_settings=redis_settings, queue=QUEUE):
            while (raw := client.rpop(key)) is not None:
                message = json.loads(raw)  # type: ignore[arg-type]
                body = message["body"]
                if message["properties"].get("body_encoding") == "base64":
                    body = base64.b64decode(body)
                _, kwargs, _ = json.loads(body)
                if message["headers"]["task"] == DELETE_PAGE_TASK:
                    deletes.append(DeletePage.model_validate(kwargs["message"]))
                else:
                    others += 1
    finally:
        client.close()
    return deletes, others


async def run(*, redis_url: str, pages: int, seed: int, workdir: Path) -> dict[str, float | int]:
    """Index, reconcile, carry out the deletes; the figures."""
    prefix = f"bench-reconcile-{uuid.uuid4().hex[:12]}"
    redis_settings = RedisSettings(url=redis_url, key_prefix=prefix)
    settings = StoreSettings(backend="embedded", embedded_path=workdir / "store.sqlite3")
    store = build_store(settings=settings, definition=DEFINITION, dimensions=DIMENSIONS)
    client = Redis.from_url(redis_url)
    jobs = JobStore(redis=client, key_prefix=prefix, ttl_s=3600)
    sender = TaskSender(create_celery_app(redis_settings=redis_settings, queue=QUEUE), queue=QUEUE)
    source = WikiPageSource(allowed_hosts=["www.kolzchut.org.il"], max_bytes=1024, timeout_s=1.0)
    try:
        await store.ensure_ready()
        indexed, listing = synthetic_wiki(pages, seed)
        rng = np.random.default_rng(seed)
        for page_id, revision in indexed.items():
            await store.replace_page(
                page_id=page_id, revision_id=revision, paragraphs=paragraphs(page_id, revision, rng)
            )
        before = await store.page_revisions()
        started = time.perf_counter()
        outcome = await accept_reconcile(
            request=ReconcileRequest(listing=listing, callback_url=CALLBACK),
            store=store,
            lister=WikiLister(allowed_hosts=["www.kolzchut.org.il"], timeout_s=1.0, max_pages=10),
            allowed_hosts=["www.kolzchut.org.il"],
            max_remove_share=0.2,
            batch_pages=32,
            max_pages=1_000_000,
            jobs=jobs,
            sender=sender,
        )
        accept_ms = (  # read the index, plan, record the job, queue every command
            time.perf_counter() - started
        ) * 1000
        deletes, index_batches = await asyncio.to_thread(queued_deletes, redis_settings)
        ctx = worker.IndexingContext(
            definition=DEFINITION,
            embedders={},
            store=store,
            source=source,
            jobs=jobs,
            events=EventPublisher(redis=client, key_prefix=prefix),
            metrics=worker_metrics(CollectorRegistry()),
            max_tokens=512,
        )
        for command in deletes:
            await worker.delete_page(ctx=ctx, command=command)
        after = await store.page_revisions()
        listed = {int(item["id"]) for item in listing}
        removed = set(before) - set(after)
        gone = set(before) - listed
        return {
            "reconcile_removed_wrong": len(removed & listed),
            "reconcile_pages_indexed": len(before),
            "reconcile_pages_listed": len(listed),
            "reconcile_removed": len(removed),
            "reconcile_left_unlisted": len(gone - removed),
            "reconcile_queued_missing": len(outcome.plan.missing),
            "reconcile_index_batches": index_batches,
            "reconcile_accept_ms": round(accept_ms, 1),
        }
    finally:
        sender.close()
        await source.aclose()
        await store.close()
        keys = [k async for k in client.scan_iter(match=f"{prefix}*", count=500)]
        if keys:
            await client.delete(*keys)
        await client.aclose()


def measure(*, redis_url: str | None = None, pages: int = 400, seed: int = 16) -> dict[str, float | int]:
    """The figures, on a temporary embedded store and the real Redis at ``redis_url``."""
    with tempfile.TemporaryDirectory(prefix="bench-reconcile-") as tmp:
        return asyncio.run(
            run(redis_url=redis_url or default_redis_url(), pages=pages, seed=seed, workdir=Path(tmp))
        )


def main() -> None:
    """Print the figures as JSON and write ``bench/results/operations_reconcile.json``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--redis-url", default=default_redis_url())
    parser.add_argument("--pages", type=int, default=400)
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).parents[1] / "results" / "operations_reconcile.json"
    )
    args = parser.parse_args()
    figures = measure(redis_url=args.redis_url, pages=args.pages)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
