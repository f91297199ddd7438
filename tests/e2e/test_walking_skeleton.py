"""The walking skeleton through real processes: wiki ping -> ingest -> Celery on Redis -> embedder ->
store -> retriever, on the embedded store and on Elasticsearch.

Each store gets its own stack (ingest, worker, retriever as ``python -m`` children), its own Redis key
prefix, Celery queue and index prefix, a fake wiki serving the sample pages, and tiny retry backoff;
everything is torn down afterwards. Bad input is exercised against the same running processes, which
must keep running.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from support.fake_wiki import FakeWiki, load_pages
from support.processes import (
    ServiceProcess,
    delete_es_prefix,
    delete_redis_prefix,
    free_port,
    stack_env,
    stack_processes,
)
from support.waits import poll

from ragbot.messaging.queue import create_celery_app
from ragbot.schemas.messages import DELETE_PAGE_TASK, INDEX_PAGE_TASK
from ragbot.settings import RedisSettings

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(900)]

MAX_RETRIES = 2
TEST_DEFINITION = {
    "identifier_field": "page_id",
    "saved_fields": {
        "title": "text",
        "page_id": "integer",
        "url": "keyword",
        "content": "text",
        "revision_date": "date",
        "categories": "keyword",
    },
    "field_for_llm": "content",
    "models": {"all-MiniLM-L6-v2": "content"},
}
FINAL = frozenset({"done", "skipped", "failed"})
START_TIMEOUT_S = 240.0
JOB_TIMEOUT_S = 120.0


@dataclass
class Stack:
    """A running set of services for one store backend."""

    backend: str
    ingest: httpx.Client
    retriever: httpx.Client
    worker_metrics_url: str
    wiki: FakeWiki
    processes: list[ServiceProcess]
    key_prefix: str
    redis_url: str
    queue: str

    def ping(self, body: dict[str, Any], **kwargs: Any) -> httpx.Response:
        return self.ingest.post("/v1/pages/changed", json=body, **kwargs)

    def wait_job(self, job_id: str, *, timeout_s: float = JOB_TIMEOUT_S) -> dict[str, Any]:
        """Poll a job until it ends; fail with the services' logs if it does not."""

        def ended() -> dict[str, Any] | None:
            self.assert_alive()
            response = self.ingest.get(f"/v1/jobs/{job_id}")
            assert response.status_code == 200, response.text
            record: dict[str, Any] = response.json()
            return record if record["state"] in FINAL else None

        return poll(f"job {job_id} to end", ended, timeout_s=timeout_s, detail=self.logs)

    def assert_alive(self) -> None:
        for proc in self.processes:
            assert proc.alive(), f"{proc.name} died:\n{proc.log_tail()}"

    def logs(self) -> str:
        return "\n".join(f"--- {p.name} ---\n{p.log_tail(30)}" for p in self.processes)

    def retrieve(self, query: str) -> list[dict[str, Any]]:
        response = self.retriever.post(
            "/v1/retrieve", json={"query": query, "paragraphs_per_page": [3, 3, 3]}
        )
        assert response.status_code == 200, response.text
        documents: list[dict[str, Any]] = response.json()["documents"]
        return documents


@pytest.fixture(scope="module", params=["embedded", "elasticsearch"])
def stack(
    request: pytest.FixtureRequest, redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    backend: str = request.param
    es_url = request.getfixturevalue("es_url") if backend == "elasticsearch" else ""
    run_id = uuid.uuid4().hex[:10]
    prefix = queue = f"e2e-{run_id}"
    tmp = tmp_path_factory.mktemp(f"stack-{backend}")
    definition = tmp / "definition.json"
    definition.write_text(json.dumps(TEST_DEFINITION), encoding="utf-8")
    ports = {"ingest": free_port(), "retriever": free_port(), "worker": free_port()}
    env = stack_env(
        definition=definition,
        redis_url=redis_url,
        prefix=prefix,
        tmp=tmp,
        ports=ports,
        store=backend,
        es_url=es_url,
        queue=queue,
        overrides={
            "RAGBOT_INGEST_FETCH_TIMEOUT_S": "5",
            "RAGBOT_WORKER_MAX_RETRIES": str(MAX_RETRIES),
            "RAGBOT_WORKER_RETRY_BACKOFF_S": "0.05",
            "RAGBOT_WORKER_RETRY_BACKOFF_MAX_S": "0.2",
        },
    )
    wiki = FakeWiki(load_pages()).start()
    processes = stack_processes(ports, env, log_dir=tmp, cwd=tmp)
    ingest = httpx.Client(base_url=f"http://127.0.0.1:{ports['ingest']}", timeout=30.0)
    retriever = httpx.Client(base_url=f"http://127.0.0.1:{ports['retriever']}", timeout=60.0)
    try:
        for proc in processes:
            proc.start()
        for proc in processes:
            proc.wait_healthy(timeout_s=START_TIMEOUT_S)
        yield Stack(
            backend=backend,
            ingest=ingest,
            retriever=retriever,
            worker_metrics_url=f"http://127.0.0.1:{ports['worker']}/metrics",
            wiki=wiki,
            processes=processes,
            key_prefix=prefix,
            redis_url=redis_url,
            queue=queue,
        )
    finally:
        codes = {proc.name: proc.stop() for proc in processes}
        ingest.close()
        retriever.close()
        wiki.stop()
        delete_redis_prefix(redis_url, prefix)
        if es_url:
            delete_es_prefix(es_url, prefix)
        # A clean SIGTERM stop, not a crash, for every service.
        assert all(code in (0, -15, None) for code in codes.values()), codes


def _paragraph_query(page: dict[str, Any]) -> str:
    """A sentence of the page's body (not a heading), as a user might ask it."""
    for line in str(page["content"]).splitlines():
        line = line.strip()
        if len(line) > 40 and not line.startswith(("=", "#", "*", "|", "[")):
            return line[:200]
    return str(page["title"])


def test_ping_to_search_result(stack: Stack) -> None:
    pages = load_pages()
    jobs: dict[int, str] = {}
    rid = f"e2e-rid-{uuid.uuid4().hex[:8]}"
    for page in pages:
        response = stack.ping(stack.wiki.ping(int(page["page_id"])), headers={"X-Request-ID": rid})
        assert response.status_code == 202, response.text
        assert response.json()["status_url"].endswith(f"/v1/jobs/{response.json()['job_id']}")
        jobs[int(page["page_id"])] = response.json()["job_id"]
    for page_id, job_id in jobs.items():
        record = stack.wait_job(job_id)
        assert record["state"] == "done", (record, stack.logs())
        assert record["attempts"] == 1 and record["error"] is None
        state = stack.ingest.get(f"/v1/pages/{page_id}")
        assert state.status_code == 200, state.text
        assert state.json()["revision_id"] == 1 and state.json()["paragraphs"] > 0

    target = next(p for p in pages if p["page_id"] == 100029)
    query = _paragraph_query(target)
    documents = stack.retrieve(query)
    assert documents, "the retriever returned nothing"
    assert documents[0]["page_id"] == 100029, [(d["page_id"], d.get("title")) for d in documents[:5]]
    returned = [d for d in documents if d["page_id"] == 100029]
    assert all(d["_id"].startswith("100029-1-") for d in returned)
    assert all(not k.endswith("_vectors") for d in documents for k in d)
    # The paragraph the query was taken from is among the page's paragraphs that came back.
    assert any(query[:40] in str(d.get("content", "")) for d in returned), returned

    # The request id travelled from the HTTP call through the queue into the worker's logs.
    worker_log = next(p for p in stack.processes if p.name == "worker").log_path.read_text(encoding="utf-8")
    assert rid in worker_log


def test_duplicate_ping_is_a_no_op(stack: Stack) -> None:
    response = stack.ping(stack.wiki.ping(100035))
    record = stack.wait_job(response.json()["job_id"])
    assert record["state"] == "skipped" and "already indexed" in (record["detail"] or ""), record
    older = stack.wait_job(stack.ping(stack.wiki.ping(100035, revision_id=0)).json()["job_id"])
    assert older["state"] == "skipped" and "older" in (older["detail"] or ""), older


def test_fetch_404_removes_the_page(stack: Stack) -> None:
    page = {**load_pages()[0], "page_id": 900001, "title": "עמוד זמני לבדיקה"}
    stack.wiki.put(page)
    assert stack.wait_job(stack.ping(stack.wiki.ping(900001)).json()["job_id"])["state"] == "done"
    assert stack.ingest.get("/v1/pages/900001").status_code == 200

    stack.wiki.remove(900001)
    record = stack.wait_job(stack.ping(stack.wiki.ping(900001, revision_id=2)).json()["job_id"])
    assert record["state"] == "done" and "left scope" in (record["detail"] or ""), record
    assert stack.ingest.get("/v1/pages/900001").status_code == 404
    assert all(d["page_id"] != 900001 for d in stack.retrieve(_paragraph_query(page)))


def test_callback_host_not_allow_listed_is_refused(stack: Stack) -> None:
    body = {**stack.wiki.ping(100005), "callback_url": "http://169.254.169.254/latest/meta-data/"}
    response = stack.ping(body)
    assert response.status_code == 422
    [error] = response.json()["detail"]
    assert error["loc"] == ["body", "callback_url"] and "not allowed" in error["msg"]


def test_malformed_ping_is_422_naming_the_field(stack: Stack) -> None:
    body = stack.wiki.ping(100005)
    del body["page_id"]
    response = stack.ping(body)
    assert response.status_code == 422
    assert ["body", "page_id"] in [e["loc"] for e in response.json()["detail"]]
    response = stack.ping({**stack.wiki.ping(100005), "revision_date": "not a date"})
    assert response.status_code == 422
    assert ["body", "revision_date"] in [e["loc"] for e in response.json()["detail"]]


def test_failing_fetch_ends_failed_after_bounded_retries_and_can_be_retried(stack: Stack) -> None:
    page = {**load_pages()[1], "page_id": 900002}
    stack.wiki.put(page)
    stack.wiki.fail(900002, 500)
    job_id = stack.ping(stack.wiki.ping(900002)).json()["job_id"]
    record = stack.wait_job(job_id)
    assert record["state"] == "failed", record
    assert record["attempts"] == MAX_RETRIES + 1
    assert "SourceError" in record["error"] and "500" in record["error"]
    assert record["payload"]["callback_url"] == stack.wiki.callback_url
    assert stack.wiki.hits[900002] == MAX_RETRIES + 1
    dead = stack.ingest.get("/v1/jobs", params={"state": "failed"}).json()["jobs"]
    assert job_id in [j["job_id"] for j in dead]
    stack.assert_alive()

    stack.wiki.fail(900002, None)
    assert stack.ingest.post(f"/v1/jobs/{job_id}/retry").status_code == 202
    assert stack.wait_job(job_id)["state"] == "done"
    assert job_id not in [j["job_id"] for j in stack.ingest.get("/v1/jobs").json()["jobs"]]


def test_metrics_and_health(stack: Stack) -> None:
    worker = httpx.get(stack.worker_metrics_url, timeout=10).text
    assert 'ragbot_task_duration_seconds_count{outcome="done",task="embedder.index_page"}' in worker
    assert 'ragbot_paragraphs_indexed_total{model="all-MiniLM-L6-v2"}' in worker
    assert "ragbot_queue_depth{" in worker and "ragbot_freshness_lag_seconds_bucket" in worker
    assert 'ragbot_task_failures_total{reason="source_error",task="embedder.index_page"}' in worker
    ingest = stack.ingest.get("/metrics").text
    assert 'route="/v1/pages/changed"' in ingest and 'route="/v1/jobs/{job_id}"' in ingest
    assert stack.ingest.get("/readyz").json()["ready"] is True
    assert stack.retriever.get("/readyz").status_code == 200
    stack.assert_alive()


def test_garbage_on_the_queue_does_not_stop_the_worker(stack: Stack) -> None:
    app = create_celery_app(
        redis_settings=RedisSettings(url=stack.redis_url, key_prefix=stack.key_prefix), queue=stack.queue
    )
    try:
        app.send_task(INDEX_PAGE_TASK, kwargs={"message": {"job_id": 5, "page_id": "x"}}, ignore_result=True)
        app.send_task(INDEX_PAGE_TASK, args=[1, 2, 3], ignore_result=True)
        app.send_task(DELETE_PAGE_TASK, kwargs={"message": None}, ignore_result=True)
    finally:
        app.close()
    # The queue is FIFO with prefetch 1: once this ping's job ends, the garbage before it was consumed.
    record = stack.wait_job(stack.ping(stack.wiki.ping(100028)).json()["job_id"])
    assert record["state"] in ("done", "skipped"), record
    stack.assert_alive()
