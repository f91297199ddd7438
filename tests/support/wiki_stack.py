"""A stack that follows a real MediaWiki: ingest, the embedder worker and the retriever as real processes,
on the embedded store, with a Redis key prefix and queue of their own.

- ``polling_stack``: Celery beat sends ``embedder.poll_mediawiki``; nothing pings or pushes, ingest is
  there to report what is indexed (tests/e2e/test_mediawiki_polling.py, bench/indexing/wiki.py).
- ``ping_stack``: no beat; the wiki's ChatbotRagContent pings ingest's ``/v1/pages/changed``, and its
  delete ping (``page_id: 0``) makes ingest reconcile against ``list_url`` (bench/indexing/wiki.py
  ``--chatbotragcontent``)."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx
import redis

from ragbot.dev.servers import ServiceProcess, free_port
from ragbot.messaging.wiki_poll import cursor_key
from support.processes import delete_redis_prefix, stack_env, stack_processes

T = TypeVar("T")
START_TIMEOUT_S = 300.0


@dataclass
class WikiStack:
    """The running worker and retriever, and how to ask the retriever what it serves."""

    retriever: httpx.Client
    ingest: httpx.Client
    processes: list[ServiceProcess]
    redis_url: str
    key_prefix: str
    api_url: str
    poll_interval_s: float

    def retrieve(self, query: str, *, mode: str = "lexical", pages: int = 10) -> list[dict[str, Any]]:
        """The retriever's documents for ``query`` (lexical by default: a marker word finds its page)."""
        response = self.retriever.post(
            "/v1/retrieve", json={"query": query, "mode": mode, "paragraphs_per_page": [3] * pages}
        )
        response.raise_for_status()
        documents: list[dict[str, Any]] = response.json()["documents"]
        return documents

    def holding(self, text: str) -> list[dict[str, Any]]:
        """Documents whose content holds ``text`` (searched for by it)."""
        return [d for d in self.retrieve(text) if text in str(d.get("content") or "")]

    def indexed_revision(self, page_id: int) -> int | None:
        """The revision ingest reports indexed for ``page_id``; None when the page is not indexed."""
        response = self.ingest.get(f"/v1/pages/{page_id}")
        if response.status_code == 404:
            return None
        response.raise_for_status()
        revision: int = response.json()["revision_id"]
        return revision

    def dead_letters(self) -> list[dict[str, Any]]:
        """The jobs that failed for good (ingest's ``GET /v1/jobs?state=failed``)."""
        response = self.ingest.get("/v1/jobs", params={"state": "failed"})
        response.raise_for_status()
        jobs: list[dict[str, Any]] = response.json()["jobs"]
        return jobs

    def polled_once(self) -> bool:
        """Whether a poll has stored its cursor (the first one is the full sync)."""
        client = redis.Redis.from_url(self.redis_url)
        try:
            return bool(client.exists(f"{self.key_prefix}:{cursor_key(self.api_url)}"))
        finally:
            client.close()

    def assert_alive(self) -> None:
        for proc in self.processes:
            assert proc.alive(), f"{proc.name} died:\n{proc.log_tail()}"

    def wait_for(
        self, check: Callable[[], T | None], *, timeout_s: float, what: str, every_s: float = 0.1
    ) -> T:
        """Call ``check`` until it returns something truthy (a found list, True); fail naming ``what``
        and what the last check returned, with the processes' log tails."""
        deadline = time.monotonic() + timeout_s
        while True:
            found = check()
            if found:
                return found
            self.assert_alive()
            if time.monotonic() >= deadline:
                raise AssertionError(
                    f"{what}: not seen after {timeout_s:.0f} s (last check: {found!r})\n{self.logs()}"
                )
            time.sleep(every_s)

    def logs(self) -> str:
        """The end of every process's log."""
        return "\n".join(f"--- {p.name} ---\n{p.log_tail(20)}" for p in self.processes)


@contextmanager
def polling_stack(
    *,
    redis_url: str,
    api_url: str,
    tmp: Path,
    poll_interval_s: float,
    definition: Mapping[str, Any] | Path,
    namespaces: Sequence[int] = (0,),
    extra_env: Mapping[str, str] | None = None,
) -> Iterator[WikiStack]:
    """Start the worker (with beat) and the retriever, wait until the first poll (a full sync) is stored,
    and stop both and delete the run's Redis keys afterwards."""
    polling = {
        "RAGBOT_WORKER_BEAT": "true",
        "RAGBOT_MEDIAWIKI_API_URL": api_url,
        "RAGBOT_MEDIAWIKI_NAMESPACES": json.dumps(list(namespaces)),
        "RAGBOT_MEDIAWIKI_POLL_INTERVAL_S": str(poll_interval_s),
    }
    with _stack(
        redis_url=redis_url,
        api_url=api_url,
        tmp=tmp,
        poll_interval_s=poll_interval_s,
        definition=definition,
        overrides={**polling, **(extra_env or {})},
        name="wikipoll",
    ) as stack:
        stack.wait_for(
            stack.polled_once, timeout_s=START_TIMEOUT_S, what="the first poll (full sync)", every_s=0.5
        )
        yield stack


@contextmanager
def ping_stack(
    *,
    redis_url: str,
    list_url: str,
    tmp: Path,
    definition: Mapping[str, Any] | Path,
    delete_window_s: float,
    extra_env: Mapping[str, str] | None = None,
) -> Iterator[WikiStack]:
    """Start ingest, the worker (no beat: nothing polls) and the retriever for a wiki that pings; a delete
    ping reconciles against ``list_url`` ``delete_window_s`` after it came. Stop all and delete the run's
    Redis keys afterwards."""
    pinged = {
        "RAGBOT_WORKER_BEAT": "false",
        "RAGBOT_INGEST_WIKI_LIST_URL": list_url,
        "RAGBOT_INGEST_DELETE_RECONCILE_DELAY_S": str(delete_window_s),
    }
    with _stack(
        redis_url=redis_url,
        api_url=list_url,
        tmp=tmp,
        poll_interval_s=0.0,
        definition=definition,
        overrides={**pinged, **(extra_env or {})},
        name="wikiping",
    ) as stack:
        yield stack


@contextmanager
def _stack(
    *,
    redis_url: str,
    api_url: str,
    tmp: Path,
    poll_interval_s: float,
    definition: Mapping[str, Any] | Path,
    overrides: Mapping[str, str],
    name: str,
) -> Iterator[WikiStack]:
    """Ingest, the worker and the retriever with ``overrides`` on top of what every stack shares."""
    run_id = uuid.uuid4().hex[:10]
    prefix = queue = f"{name}-{run_id}"
    if isinstance(definition, Path):
        definition_path = definition
    else:
        definition_path = tmp / "definition.json"
        definition_path.write_text(json.dumps(definition), encoding="utf-8")
    ports = {"ingest": free_port(), "retriever": free_port(), "worker": free_port()}
    env = stack_env(
        definition=definition_path,
        redis_url=redis_url,
        prefix=prefix,
        tmp=tmp,
        ports=ports,
        queue=queue,
        overrides=overrides,
    )
    processes = stack_processes(ports, env, log_dir=tmp, cwd=tmp)
    retriever = httpx.Client(base_url=f"http://127.0.0.1:{ports['retriever']}", timeout=60.0)
    ingest = httpx.Client(base_url=f"http://127.0.0.1:{ports['ingest']}", timeout=60.0)
    try:
        for proc in processes:
            proc.start()
        for proc in processes:
            proc.wait_healthy(timeout_s=START_TIMEOUT_S)
        yield WikiStack(
            retriever=retriever,
            ingest=ingest,
            processes=processes,
            redis_url=redis_url,
            key_prefix=prefix,
            api_url=api_url,
            poll_interval_s=poll_interval_s,
        )
    finally:
        for proc in processes:
            proc.stop()
        retriever.close()
        ingest.close()
        delete_redis_prefix(redis_url, prefix)
