"""The two faults real deployments see, played against a ``FaultStack``, each returning what it measured.

- ``es_node_loss``: pings and queries run while the data-only node is ``kill -9``-ed; it comes back on
  its own data dir; every page must then be indexed once at the wiki's last revision, on both nodes.
- ``redis_restart``: Redis (AOF on) is stopped and started between two turns of a conversation and while
  a bulk reindex is queued and running; sessions, job records and the queued work must survive.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from support.chat_fakes import parse_sse
from support.fault_stack import FINAL, FaultStack
from support.waits import holds_within

QUERY = "annual leave for workers"
KILLED = "node-2"


@dataclass
class QueryLoad:
    """Queries to the retriever in a thread; counts answers and failures, and answers while a node is down."""

    url: str
    answered: int = 0
    failed: int = 0
    answered_while_down: int = 0
    node_down: threading.Event = field(default_factory=threading.Event)
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> QueryLoad:
        self._thread = threading.Thread(target=self._run, name="query-load", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=15) as client:
            while not self._stop.is_set():
                try:
                    response = client.post("/v1/retrieve", json={"query": QUERY, "retrieval_size": 10})
                    ok = response.status_code == 200
                    detail = f"{response.status_code} {response.text[:200]}"
                except httpx.HTTPError as exc:
                    ok, detail = False, repr(exc)
                if ok:
                    self.answered += 1
                    self.answered_while_down += self.node_down.is_set()
                else:
                    self.failed += 1
                    self.errors.append(detail)
                self._stop.wait(0.1)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)


@dataclass
class NodeLoss:
    """What ``es_node_loss`` saw."""

    pages: int
    pages_lost: int
    queries: int
    failed_queries: int
    answered_while_down: int
    jobs_not_done: int
    primaries_on_killed_node: int
    copies_per_node: dict[str, int]
    expected_paragraphs: int
    down_s: float
    problems: list[str]


def _page_ids(base: int, count: int) -> list[int]:
    """Page ids over four index buckets (``page_id // 1000``), so both nodes hold primaries."""
    return [base + (n % 4) * 1000 + n for n in range(count)]


def _move_primaries_to(stack: FaultStack, node: str) -> None:
    """Make ``node`` hold half the primaries: Elasticsearch puts new primaries where it likes (often all
    on one node), and the case worth testing is losing primaries, not only replicas. Cancelling a primary
    that has an in-sync replica promotes the replica, and a fresh replica recovers on the other node."""
    primaries = [s for s in stack.shards() if s["prirep"] == "p" and s["node"] != node]
    wanted = len(stack.shards()) // 4 - (len(stack.shards()) // 2 - len(primaries))
    commands = [
        {"cancel": {"index": s["index"], "shard": int(s["shard"]), "node": s["node"], "allow_primary": True}}
        for s in primaries[: max(0, wanted)]
    ]
    if commands:
        response = httpx.post(
            f"{stack.cluster.master_url}/_cluster/reroute", json={"commands": commands}, timeout=60
        )
        assert response.status_code == 200, response.text
        stack.cluster.wait_status("green", nodes=2)


def es_node_loss(stack: FaultStack, *, pages: int = 8, timeout_s: float = 180.0) -> NodeLoss:
    """Index, then re-ping every page (and some twice) while the data-only node is killed and restarted."""
    ids = _page_ids(1_000_000, pages)
    first = [stack.ping(stack.page(page_id, 1)) for page_id in ids]
    records = stack.wait_jobs(first, timeout_s=timeout_s)
    assert all(r["state"] == "done" for r in records.values()), (records, stack.logs())
    stack.cluster.wait_status("green", nodes=2)
    _move_primaries_to(stack, KILLED)
    primaries = sum(1 for s in stack.shards() if s["prirep"] == "p" and s["node"] == KILLED)

    load = QueryLoad(str(stack.retriever.base_url)).start()
    jobs: list[str] = []
    try:
        holds_within(lambda: load.answered > 0, timeout_s=60)  # queries flow before anything breaks
        for n, page_id in enumerate(ids):
            jobs.append(stack.ping(stack.page(page_id, 2)))
            if n == pages // 3:
                stack.cluster.kill_node(KILLED)
                killed_at = time.monotonic()
                load.node_down.set()
        for page_id in ids[: pages // 2]:  # a second edit while the node is down: the last one must win
            jobs.append(stack.ping(stack.page(page_id, 3)))
        records = stack.wait_jobs(jobs, timeout_s=timeout_s)
        # The node stays down 5 s at least, until a query was answered without it (the caller asserts).
        holds_within(
            lambda: load.answered_while_down > 0 and time.monotonic() - killed_at >= 5.0, timeout_s=60
        )
        stack.cluster.restart_node(KILLED)
        stack.cluster.wait_status("green", nodes=2, timeout_s=timeout_s)
        load.node_down.clear()
        down_s = time.monotonic() - killed_at
        answered = load.answered
        holds_within(lambda: load.answered > answered, timeout_s=60)  # and queries go on once it is back
    finally:
        load.stop()

    # A ping whose revision was already overtaken by the next edit may end "skipped": that is success.
    unfinished = {j: r for j, r in records.items() if r.get("state") not in ("done", "skipped")}
    problems: list[str] = [f"job {j}: {r}" for j, r in unfinished.items()]
    stack.refresh()
    lost = 0
    expected = 0
    for page_id in ids:
        revision = int(stack.wiki.pages[page_id]["revision_id"])
        state = stack.page_state(page_id)
        on_page = {"term": {"page_id": page_id}}
        total = stack.es_count(on_page)
        stale = stack.es_count(
            {"bool": {"filter": [on_page], "must_not": [{"term": {"revision_id": revision}}]}}
        )
        if state is None or state["revision_id"] != revision or state["paragraphs"] != total or stale:
            lost += 1
            problems.append(
                f"page {page_id}: state {state}, {total} paragraphs, {stale} stale, want r{revision}"
            )
        else:
            expected += total
    copies = {
        name: stack.es_count({"match_all": {}}, preference=f"_only_nodes:{name}")
        for name in stack.cluster.nodes
    }
    return NodeLoss(
        pages=pages,
        pages_lost=lost,
        queries=load.answered + load.failed,
        failed_queries=load.failed,
        answered_while_down=load.answered_while_down,
        jobs_not_done=len(unfinished),
        primaries_on_killed_node=primaries,
        copies_per_node=copies,
        expected_paragraphs=expected,
        down_s=down_s,
        problems=problems + load.errors[:5],
    )


@dataclass
class RedisRestart:
    """What ``redis_restart`` saw."""

    sessions: int
    sessions_lost: int
    turns_after: list[int]
    reindex: dict[str, Any]
    reindex_pages_stale: int
    old_job_state: str
    unreachable_s: float
    problems: list[str]


def ask(stack: FaultStack, session_id: str, question: str) -> str:
    """One turn of a conversation; the answer's ``done`` event, or the events when there is none."""
    response = stack.chat.post(
        f"/v1/sessions/{session_id}/messages", json={"question": question}, timeout=180
    )
    assert response.status_code == 200, response.text
    events = parse_sse(response.text)
    assert events and events[-1].event == "done", (events, stack.logs())
    return str(events[-1].data["answer"])


def redis_restart(
    stack: FaultStack, *, sessions: int = 3, pages: int = 8, timeout_s: float = 180.0
) -> RedisRestart:
    """Talk, queue a reindex, restart Redis while the worker is on it, then check what survived."""
    old_job = stack.ping(stack.page(3_000_001, 1))
    stack.wait_jobs([old_job], timeout_s=timeout_s)
    ids = [stack.chat.post("/v1/sessions", json={}).json()["session_id"] for _ in range(sessions)]
    for session_id in ids[:2]:
        ask(stack, session_id, "How many days of annual leave?")
    turns_before = [len(stack.chat.get(f"/v1/sessions/{s}").json()["turns"]) for s in ids]

    body = "\n".join(json.dumps(stack.page(2_000_000 + n, 5), ensure_ascii=False) for n in range(pages))
    response = stack.ingest.post(
        "/v1/reindex", content=body.encode(), headers={"Content-Type": "application/x-ndjson"}
    )
    assert response.status_code == 202, response.text
    parent = str(response.json()["job_id"])
    # Restart once the worker is inside the reindex: some batches done, some queued.
    holds_within(
        lambda: (stack.job(parent).get("progress") or {}).get("done", 0) > 0, timeout_s=120, every_s=0.05
    )
    unreachable_s = stack.redis.restart()

    records = stack.wait_jobs([parent], timeout_s=timeout_s)
    problems = [] if records[parent].get("state") == "done" else [f"reindex: {records[parent]}"]
    ask(stack, ids[0], "And sick days?")
    lost = 0
    turns_after: list[int] = []
    for n, session_id in enumerate(ids):
        view = stack.chat.get(f"/v1/sessions/{session_id}")
        turns = len(view.json()["turns"]) if view.status_code == 200 else -1
        turns_after.append(turns)
        if turns < turns_before[n]:
            lost += 1
            problems.append(f"session {session_id}: {view.status_code} {view.text[:200]}")
    stale = 0
    for n in range(pages):
        state = stack.page_state(2_000_000 + n)
        if state is None or state["revision_id"] != 5:
            stale += 1
            problems.append(f"page {2_000_000 + n}: {state}")
    stack.assert_alive()
    old = stack.job(old_job)
    return RedisRestart(
        sessions=sessions,
        sessions_lost=lost,
        turns_after=turns_after,
        reindex=records[parent],
        reindex_pages_stale=stale,
        old_job_state=str(old.get("state")),
        unreachable_s=unreachable_s,
        problems=problems,
    )


__all__ = ["FINAL", "NodeLoss", "QueryLoad", "RedisRestart", "ask", "es_node_loss", "redis_restart"]
