"""Two embedder worker processes on one queue index every pinged page exactly once into Elasticsearch.

Real processes (ingest and two ``python -m ragbot_embedder`` workers, started once for the module) on
the real Redis and the shared Elasticsearch, with their own key, queue and index prefix. After all jobs
end, the store must hold every page, each with the paragraph count ingest reports and no paragraph
twice, and the workers' logs and metrics must show each job finished by exactly one worker, with both
workers having taken a share. Then a new revision of some pages is pinged twice at once, so both
workers may index the same page together: the store must end with exactly the new revision of each, once.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from support.worker_stack import WorkerStack, synthetic_pages, worker_stack

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(900)]

PAGES = 12
RACED = 4


@pytest.fixture(scope="module")
def pages() -> list[dict[str, Any]]:
    return synthetic_pages(PAGES)


@pytest.fixture(scope="module")
def stack(
    redis_url: str, es_url: str, pages: list[dict[str, Any]], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WorkerStack]:
    tmp = tmp_path_factory.mktemp("two-workers")
    with worker_stack(redis_url=redis_url, es_url=es_url, workers=2, pages=pages, tmp=tmp) as running:
        yield running


def test_two_workers_index_every_page_once(stack: WorkerStack, pages: list[dict[str, Any]]) -> None:
    stack.jobs.clear()
    stack.ping_all([int(p["page_id"]) for p in pages])
    records = stack.wait_all(timeout_s=600)
    states = {job: r["state"] for job, r in records.items()}
    assert set(states.values()) == {"done"}, (states, stack.logs())
    assert all(r["attempts"] == 1 for r in records.values()), records

    audit = stack.audit()
    assert audit.pages_lost == [], stack.logs()
    assert audit.pages_in_store == PAGES
    assert audit.documents == audit.distinct_ids
    assert audit.duplicate_paragraphs == 0
    assert audit.wrong_counts == {}
    # Each job finished once, by one worker; both workers did part of the work.
    assert audit.runs_per_job == dict.fromkeys(stack.jobs, 1)
    assert sum(audit.jobs_per_worker.values()) == PAGES
    assert all(n > 0 for n in audit.jobs_per_worker.values()), audit.jobs_per_worker
    assert audit.jobs_per_worker == {k: int(v) for k, v in audit.done_per_worker_metric.items()}
    assert audit.duplicates == 0

    # The same pings again: every page is already indexed, so nothing is written twice.
    stack.jobs.clear()
    stack.ping_all([int(p["page_id"]) for p in pages])
    again = stack.wait_all(timeout_s=300)
    assert {r["state"] for r in again.values()} == {"skipped"}, again
    after = stack.audit()
    assert (after.documents, after.distinct_ids) == (audit.documents, audit.documents)
    assert after.duplicates == 0


def test_two_workers_racing_on_one_page_leave_it_stored_once(
    stack: WorkerStack, pages: list[dict[str, Any]]
) -> None:
    raced = pages[:RACED]
    ids = [int(p["page_id"]) for p in raced]
    stack.jobs.clear()
    stack.ping_all(ids)  # indexed already when the test above ran first; indexed now otherwise
    assert {r["state"] for r in stack.wait_all(timeout_s=300).values()} <= {"done", "skipped"}
    for page in raced:
        stack.wiki.put({**page, "revision_id": 2, "content": f"{page['content']}\nשורה חדשה בגרסה 2."})
    stack.jobs.clear()
    stack.ping_all([page_id for page_id in ids for _ in range(2)])  # each twice, back to back
    records = stack.wait_all(timeout_s=300)
    assert {r["state"] for r in records.values()} <= {"done", "skipped"}, records
    audit = stack.audit()
    stored = {page_id: audit.revisions[page_id] for page_id in ids}
    assert all(revisions == [2] for revisions in stored.values()), stored
    assert audit.documents == audit.distinct_ids and audit.duplicate_paragraphs == 0
    assert audit.wrong_counts == {}
    for page_id in ids:
        assert stack.ingest.get(f"/v1/pages/{page_id}").json()["revision_id"] == 2
