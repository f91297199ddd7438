"""``ragbot reembed``: build the configured definition's index generation in the background, then switch.

It compares the definition file (with its models' dimensions and the paragraph options) with the
live generation's; when they differ it records the new generation, marks the build in Redis and
queues every live page for it (``ragbot.messaging.reembed.start_reembed``); workers fetch each page
from ``--callback-url`` and embed it with the new definition, while queries keep reading the live
generation. The command then follows the job until the workers have switched (exit 0), some pages
failed (exit 1: ``POST /v1/jobs/<id>/retry`` re-queues them), or nothing was started (exit 2).
``--status`` only prints the live generation, the configured one and any build in progress;
``--abort`` stops the build in progress (``ragbot.messaging.reembed.abort_reembed``): the live
generation stays, the one being built is dropped.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import Any

from ragbot.definition import load_definition
from ragbot.errors import DependencyUnavailable, ValidationFailed
from ragbot.messaging.jobs import JobStore
from ragbot.messaging.queue import TaskSender, create_celery_app
from ragbot.messaging.redis import build_redis
from ragbot.messaging.reembed import (
    ReembedStates,
    abort_reembed,
    generation_of,
    split_options,
    start_reembed,
    worker_max_tokens,
)
from ragbot.ports import Generation
from ragbot.schemas.jobs import JobState
from ragbot.settings import (
    get_contextual_settings,
    get_ingest_settings,
    get_model_settings,
    get_redis_settings,
    get_store_settings,
    get_worker_settings,
)
from ragbot.sources.wiki import check_callback_url
from ragbot.stores.generations import build_generations, open_generation

FINAL = frozenset({JobState.done, JobState.failed})


def register(subparsers: Any) -> None:
    """Add ``reembed`` to the ``ragbot`` parser."""
    parser = subparsers.add_parser(
        "reembed",
        help="re-embed every page into a new index generation for the current definition, then switch",
        description="Build the definition file's index generation beside the live one (every page fetched "
        "again from --callback-url by the workers, pings written to both), then switch readers to it "
        "atomically and drop the old one.",
    )
    add = parser.add_argument
    add("--callback-url", help="the content API base pages are fetched from (as in pings)")
    add("--status", action="store_true", help="print the live and configured generations, start nothing")
    add("--abort", action="store_true", help="stop the build in progress and drop its generation")
    add("--no-wait", action="store_true", help="print the job id and return once the pages are queued")
    add("--poll", type=float, default=1.0, help="seconds between status polls (default 1)")
    add("--timeout", type=float, default=0.0, help="give up waiting after this many seconds (0: never)")
    parser.set_defaults(handler=run_reembed)


def run_reembed(args: argparse.Namespace) -> int:
    """``ragbot reembed``."""
    if args.abort:
        return asyncio.run(_abort())
    if not args.status and not args.callback_url:
        sys.stderr.write("ragbot reembed: give --callback-url (or --status, --abort)\n")
        return 2
    return asyncio.run(_run(args))


async def _abort() -> int:
    """Stop the running build; exit 2 when none runs."""
    redis_settings = get_redis_settings()
    worker = get_worker_settings()
    redis = build_redis(redis_settings)
    app = create_celery_app(redis_settings=redis_settings, queue=worker.queue)
    sender = TaskSender(app, queue=worker.queue)
    try:
        state = await abort_reembed(
            states=ReembedStates(redis=redis, key_prefix=redis_settings.key_prefix),
            jobs=JobStore(redis=redis, key_prefix=redis_settings.key_prefix),
            sender=sender,
            drop_after_s=worker.reembed_drop_after_s,
        )
    except ValidationFailed as exc:
        sys.stderr.write(f"ragbot reembed: {exc}\n")
        return 2
    finally:
        sender.close()
        await redis.aclose()
    sys.stdout.write(
        f"re-embed job {state.job_id} aborted: {state.source} stays live, {state.target} is dropped in "
        f"{worker.reembed_drop_after_s:g} s\n"
    )
    return 0


def configured_generation() -> Generation:
    """The generation the definition file, its models and the worker's paragraph options make."""
    from ragbot.embedders import build_embedders

    model_settings = get_model_settings()
    definition = load_definition(model_settings.document_definition)
    embedders = build_embedders(settings=model_settings, definition=definition)
    for embedder in embedders.values():
        embedder.warm_up()
    try:
        dimensions = {v.name: embedders[v.model].dimension for v in definition.vector_fields}
    finally:
        for embedder in embedders.values():
            embedder.close()
    worker = get_worker_settings()
    split = split_options(
        max_tokens=worker_max_tokens(worker=worker, contextual=get_contextual_settings()),
        link_targets=worker.link_targets,
    )
    return generation_of(definition, dimensions=dimensions, split=split)


async def _run(args: argparse.Namespace) -> int:
    redis_settings = get_redis_settings()
    store_settings = get_store_settings()
    worker = get_worker_settings()
    target = await asyncio.to_thread(configured_generation)
    generations = build_generations(store_settings)
    redis = build_redis(redis_settings)
    jobs = JobStore(redis=redis, key_prefix=redis_settings.key_prefix)
    states = ReembedStates(redis=redis, key_prefix=redis_settings.key_prefix)
    try:
        live = await generations.live()
        if args.status:
            running = await states.get()
            status = {
                "live": live.generation_id,
                "live_fingerprint": live.fingerprint,
                "configured": target.generation_id,
                "configured_fingerprint": target.fingerprint,
                "differs": live.fingerprint != target.fingerprint,
                "building": running.model_dump(mode="json") if running else None,
            }
            sys.stdout.write(json.dumps(status, indent=2) + "\n")
            return 0
        check_callback_url(args.callback_url, get_ingest_settings().allowed_callback_hosts)
        opened = open_generation(
            settings=store_settings,
            generation=live,
            configured=load_definition(get_model_settings().document_definition),
            configured_dimensions=target.dimensions,
        )
        app = create_celery_app(redis_settings=redis_settings, queue=worker.queue)
        sender = TaskSender(app, queue=worker.queue)
        try:
            started = await start_reembed(
                target=target,
                generations=generations,
                source_store=opened.store,
                states=states,
                jobs=jobs,
                sender=sender,
                callback_url=args.callback_url,
                batch_pages=get_ingest_settings().reindex_batch_pages,
                drop_after_s=worker.reembed_drop_after_s,
            )
        finally:
            sender.close()
            await opened.store.close()
        sys.stdout.write(
            f"re-embed job {started.job.job_id}: {started.pages} pages from {started.source} "
            f"into {started.target}\n"
        )
        if args.no_wait:
            return 0
        return await _follow(jobs, started.job.job_id, poll_s=args.poll, timeout_s=args.timeout)
    finally:
        await generations.close()
        await redis.aclose()


async def _follow(jobs: JobStore, job_id: str, *, poll_s: float, timeout_s: float) -> int:
    """Print the job's progress until it ends."""
    deadline = time.monotonic() + timeout_s if timeout_s > 0 else None
    last = ""
    while True:
        record = await jobs.get(job_id=job_id)
        if record is None:
            sys.stderr.write(f"ragbot reembed: job {job_id} is gone\n")
            return 1
        p = record.progress
        done, total, failed = p.get("done", 0), p.get("total", 0), p.get("failed", 0)
        line = f"{record.state.value}: {done} of {total} pages, {failed} failed"
        if line != last:
            sys.stdout.write(line + (f" ({record.detail})" if record.detail else "") + "\n")
            last = line
        if record.state in FINAL:
            if record.error:
                sys.stdout.write(f"{record.error}\n")
            return 0 if record.state is JobState.done else 1
        if deadline is not None and time.monotonic() > deadline:
            raise DependencyUnavailable(
                f"re-embed job {job_id} still {record.state.value} after {timeout_s:g} s", dependency="worker"
            )
        await asyncio.sleep(poll_s)
