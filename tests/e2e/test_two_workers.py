"""Two embedder worker processes on one queue index every pinged page exactly once into Elasticsearch.

Real processes (ingest and two ``python -m ragbot_embedder`` workers) on the real Redis and the shared
Elasticsearch, with their own key, queue and index prefix. After all jobs end, the store must hold
every page, each with the paragraph count ingest reports and no paragraph twice, and the workers' logs
and metrics must show each job finished by exactly one worker, with both workers having taken a share.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support.worker_stack import synthetic_pages, worker_stack

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(900)]

PAGES = 12


def test_two_workers_index_every_page_once(redis_url: str, es_url: str, tmp_path: Path) -> None:
    pages = synthetic_pages(PAGES)
    with worker_stack(redis_url=redis_url, es_url=es_url, workers=2, pages=pages, tmp=tmp_path) as stack:
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
