"""One ingest and several embedder worker processes on one Celery queue, indexing into real Elasticsearch.

Used by ``tests/e2e/test_two_workers.py`` and ``bench/operations/workers.py``: the pages are the
Kol-Zchut samples copied under new ids spread over several index buckets, every worker is a real
``python -m ragbot_embedder`` process with its own metrics port, and ``audit()`` reads back what the
store holds and what each worker's JSON log says it did, so a page indexed twice or lost shows.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from support.fake_wiki import FakeWiki, load_pages
from support.processes import (
    ServiceProcess,
    delete_es_prefix,
    delete_redis_prefix,
    free_port,
    local_service,
    service_env,
)

DEFINITION = {
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
FIRST_PAGE_ID = 700_000
PAGE_ID_STEP = 250  # four pages per index bucket (page_id // 1000), so several indices are written


def synthetic_pages(count: int) -> list[dict[str, Any]]:
    """``count`` distinct pages: the samples in turn, each under a new id with its own first line."""
    samples = load_pages()
    pages = []
    for n in range(count):
        page_id = FIRST_PAGE_ID + n * PAGE_ID_STEP
        base = samples[n % len(samples)]
        pages.append(
            {
                **base,
                "page_id": page_id,
                "title": f"{base['title']} ({n})",
                "content": f"עמוד בדיקה מספר {n} לשני עובדים.\n{base['content']}",
            }
        )
    return pages


@dataclass(frozen=True)
class Audit:
    """What the store holds and what the workers' logs and metrics say they did."""

    documents: int  # paragraphs in the store
    distinct_ids: int
    pages_in_store: int
    pages_lost: list[int]  # pinged pages the store does not hold
    duplicate_paragraphs: int  # paragraphs stored more than once for one page (same text)
    wrong_counts: dict[int, tuple[int, int]]  # page -> (paragraphs in the store, what ingest reports)
    runs_per_job: dict[str, int]  # job id -> how many times a worker finished it (log lines)
    jobs_per_worker: dict[str, int]
    done_per_worker_metric: dict[str, float]
    revisions: dict[int, list[int]]  # page -> the revisions its stored paragraph ids name

    @property
    def double_work(self) -> int:
        """Jobs a worker finished more than once: the work two workers must never share."""
        return sum(n - 1 for n in self.runs_per_job.values() if n > 1)

    @property
    def duplicates(self) -> int:
        """Every way a page can have been indexed twice."""
        return self.double_work + self.duplicate_paragraphs + (self.documents - self.distinct_ids)


@dataclass
class WorkerStack:
    """The running processes and their clients."""

    ingest: httpx.Client
    es_url: str
    index_prefix: str
    wiki: FakeWiki
    workers: list[ServiceProcess]
    metrics_urls: dict[str, str]
    processes: list[ServiceProcess]
    jobs: dict[str, int] = field(default_factory=dict)  # job id -> page id

    def ping_all(self, page_ids: list[int]) -> None:
        """Ping every page once, as fast as ingest takes them."""
        for page_id in page_ids:
            response = self.ingest.post("/v1/pages/changed", json=self.wiki.ping(page_id))
            assert response.status_code == 202, response.text
            self.jobs[response.json()["job_id"]] = page_id

    def wait_all(self, *, timeout_s: float) -> dict[str, dict[str, Any]]:
        """Every job's final record; fails with the logs when one does not end in time."""
        deadline = time.monotonic() + timeout_s
        records: dict[str, dict[str, Any]] = {}
        while len(records) < len(self.jobs):
            for job_id in self.jobs.keys() - records.keys():
                record = self.ingest.get(f"/v1/jobs/{job_id}").json()
                if record["state"] in FINAL:
                    records[job_id] = record
            for proc in self.processes:
                if not proc.alive():
                    raise AssertionError(f"{proc.name} died:\n{proc.log_tail()}")
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{len(self.jobs) - len(records)} jobs unfinished after {timeout_s} s\n{self.logs()}"
                )
            time.sleep(0.2)
        return records

    def logs(self) -> str:
        """The end of every process's log."""
        return "\n".join(f"--- {p.name} ---\n{p.log_tail(30)}" for p in self.processes)

    def audit(self) -> Audit:
        """Read back the store (every paragraph under the prefix), the worker logs and their metrics."""
        httpx.post(f"{self.es_url}/{self.index_prefix}_*/_refresh", timeout=30).raise_for_status()
        response = httpx.post(
            f"{self.es_url}/{self.index_prefix}_*/_search",
            json={"size": 10_000, "_source": ["page_id", "content"], "query": {"match_all": {}}},
            timeout=60,
        )
        response.raise_for_status()
        hits = response.json()["hits"]["hits"]
        per_page: dict[int, Counter[str]] = {}
        revisions: dict[int, set[int]] = {}
        for hit in hits:
            page_part, revision_part, _ = str(hit["_id"]).split("-")  # <page>-<revision>-<paragraph>
            revisions.setdefault(int(page_part), set()).add(int(revision_part))
            per_page.setdefault(int(hit["_source"]["page_id"]), Counter())[
                str(hit["_source"]["content"])
            ] += 1
        pinged = set(self.jobs.values())
        wrong: dict[int, tuple[int, int]] = {}
        for page_id in sorted(pinged & per_page.keys()):
            reported = self.ingest.get(f"/v1/pages/{page_id}").json()["paragraphs"]
            stored = sum(per_page[page_id].values())
            if stored != reported:
                wrong[page_id] = (stored, reported)
        runs: Counter[str] = Counter()
        per_worker: dict[str, int] = {}
        for worker in self.workers:
            finished = 0
            for line in worker.log_path.read_text(encoding="utf-8").splitlines():
                with contextlib.suppress(ValueError):
                    entry = json.loads(line)
                    if (
                        entry.get("message") in ("task done", "task skipped")
                        and entry.get("job_id") in self.jobs
                    ):
                        runs[entry["job_id"]] += 1
                        finished += 1
            per_worker[worker.name] = finished
        return Audit(
            documents=len(hits),
            distinct_ids=len({hit["_id"] for hit in hits}),
            pages_in_store=len(per_page),
            pages_lost=sorted(pinged - per_page.keys()),
            duplicate_paragraphs=sum(n - 1 for texts in per_page.values() for n in texts.values() if n > 1),
            wrong_counts=wrong,
            runs_per_job=dict(runs),
            jobs_per_worker=per_worker,
            done_per_worker_metric={name: done_tasks(url) for name, url in self.metrics_urls.items()},
            revisions={page: sorted(revs) for page, revs in revisions.items()},
        )


def done_tasks(metrics_url: str) -> float:
    """``ragbot_task_duration_seconds_count{outcome="done", task="embedder.index_page"}`` of one worker."""
    total = 0.0
    for line in httpx.get(metrics_url, timeout=10).text.splitlines():
        wanted = ('outcome="done"', 'task="embedder.index_page"')
        if line.startswith("ragbot_task_duration_seconds_count{") and all(w in line for w in wanted):
            total += float(line.rsplit(" ", 1)[1])
    return total


@contextlib.contextmanager
def worker_stack(
    *, redis_url: str, es_url: str, workers: int, pages: list[dict[str, Any]], tmp: Path
) -> Iterator[WorkerStack]:
    """Start ingest and ``workers`` embedder processes (healthy before yielding); remove everything after."""
    run_id = uuid.uuid4().hex[:10]
    prefix = f"e2e-workers-{run_id}"
    tmp.mkdir(parents=True, exist_ok=True)
    definition = tmp / "definition.json"
    definition.write_text(json.dumps(DEFINITION), encoding="utf-8")
    ingest_port = free_port()
    common = {
        "RAGBOT_DOCUMENT_DEFINITION": str(definition),
        "RAGBOT_DEVICE": "cpu",
        "RAGBOT_REDIS_URL": redis_url,
        "RAGBOT_REDIS_KEY_PREFIX": prefix,
        "RAGBOT_STORE_BACKEND": "elasticsearch",
        "RAGBOT_STORE_ES_URL": es_url,
        "RAGBOT_STORE_ES_INDEX_PREFIX": prefix,
        "RAGBOT_INGEST_HOST": "127.0.0.1",
        "RAGBOT_INGEST_PORT": str(ingest_port),
        "RAGBOT_INGEST_ALLOWED_CALLBACK_HOSTS": '["127.0.0.1:*"]',
        "RAGBOT_WORKER_QUEUE": prefix,
        "RAGBOT_WORKER_RETRY_BACKOFF_S": "0.05",
        "RAGBOT_WORKER_RETRY_BACKOFF_MAX_S": "0.2",
        "RAGBOT_WORKER_METRICS_HOST": "127.0.0.1",
    }
    wiki = FakeWiki(pages).start()
    ingest = local_service(
        "ingest", module="ragbot_ingest", port=ingest_port, env=service_env(common), log_dir=tmp, cwd=tmp
    )
    worker_processes: list[ServiceProcess] = []
    metrics_urls: dict[str, str] = {}
    for n in range(workers):
        port = free_port()
        name = f"worker-{n + 1}"
        env = service_env(
            {
                **common,
                "RAGBOT_WORKER_METRICS_PORT": str(port),
                "RAGBOT_PROMETHEUS_MULTIPROC_DIR": str(tmp / f"metrics-{name}"),
            }
        )
        worker_processes.append(
            local_service(
                name, module="ragbot_embedder", port=port, env=env, log_dir=tmp, cwd=tmp, health="readyz"
            )
        )
        metrics_urls[name] = f"http://127.0.0.1:{port}/metrics"
    processes = [ingest, *worker_processes]
    client = httpx.Client(base_url=f"http://127.0.0.1:{ingest_port}", timeout=30.0)
    try:
        for proc in processes:
            proc.start()
        for proc in processes:
            proc.wait_healthy(timeout_s=240.0)
        yield WorkerStack(
            ingest=client,
            es_url=es_url,
            index_prefix=prefix,
            wiki=wiki,
            workers=worker_processes,
            metrics_urls=metrics_urls,
            processes=processes,
        )
    finally:
        for proc in processes:
            proc.stop()
        client.close()
        wiki.stop()
        delete_redis_prefix(redis_url, prefix)
        delete_es_prefix(es_url, prefix)
