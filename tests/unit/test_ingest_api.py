"""Ingest's HTTP API over in-memory fakes of the job records, the sender and the store."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

import pytest
from fastapi.testclient import TestClient
from support.fakes import FakeJobs, FakeSender, MemoryStore

from ragbot.ports import SearchStore
from ragbot.schemas.jobs import JobKind, JobState
from ragbot.schemas.messages import DELETE_PAGE_TASK, INDEX_PAGE_TASK, DeletePage, IndexPage
from ragbot.schemas.pages import PageState
from ragbot.settings import IngestSettings
from ragbot_ingest.app import create_app
from ragbot_ingest.deps import Resources

CALLBACK = "http://wiki.test/w/rest.php/cbragcontent/v0/page_id/"
PING = {"page_id": 123, "revision_id": 456, "revision_date": "20250101120000", "callback_url": CALLBACK}


@dataclass
class World:
    client: TestClient
    jobs: FakeJobs
    sender: FakeSender
    store: MemoryStore


@pytest.fixture
def world() -> Iterator[World]:
    jobs, sender, store = FakeJobs(), FakeSender(), MemoryStore()
    settings = IngestSettings(allowed_callback_hosts=["wiki.test", "*.kolzchut.org.il"])

    @asynccontextmanager
    async def resources() -> AsyncIterator[Resources]:
        yield Resources(settings=settings, jobs=jobs, sender=sender, store=cast(SearchStore, store))

    with TestClient(create_app(resources=resources)) as client:
        yield World(client=client, jobs=jobs, sender=sender, store=store)


def test_ping_is_accepted_queued_and_sent_with_the_request_id(world: World) -> None:
    response = world.client.post("/v1/pages/changed", json=PING, headers={"X-Request-ID": "req-42"})
    assert response.status_code == 202, response.text
    body = response.json()
    assert body["status"] == "queued"
    assert body["status_url"].endswith(f"/v1/jobs/{body['job_id']}")
    assert response.headers["Location"] == body["status_url"]
    assert response.headers["X-Request-ID"] == "req-42"
    [(task, message, request_id)] = world.sender.sent
    assert task == INDEX_PAGE_TASK and request_id == "req-42"
    assert isinstance(message, IndexPage)
    assert (message.job_id, message.page_id, message.revision_id) == (body["job_id"], 123, 456)
    assert message.callback_url == CALLBACK and message.request_id == "req-42"
    assert message.revision_date == datetime(2025, 1, 1, 12, tzinfo=UTC)
    record = world.jobs.records[body["job_id"]]
    assert record.kind is JobKind.index_page and record.state is JobState.queued
    assert IndexPage.model_validate(record.payload) == message

    job = world.client.get(body["status_url"])
    assert job.status_code == 200 and job.json()["page_id"] == 123


def test_request_id_is_generated_when_missing_or_unsafe(world: World) -> None:
    first = world.client.post("/v1/pages/changed", json=PING)
    second = world.client.post(
        "/v1/pages/changed", json=PING, headers={"X-Request-ID": "bad id\twith spaces"}
    )
    ids = [first.headers["X-Request-ID"], second.headers["X-Request-ID"]]
    assert all(len(i) == 32 for i in ids) and ids[0] != ids[1]
    assert [s[2] for s in world.sender.sent] == ids


@pytest.mark.parametrize(
    ("change", "field_name"),
    [
        ({"page_id": None}, "page_id"),
        ({"page_id": "abc"}, "page_id"),
        ({"page_id": 0}, "page_id"),
        ({"revision_id": None}, "revision_id"),
        ({"revision_date": "yesterday"}, "revision_date"),
        ({"callback_url": "ftp://wiki.test/x/"}, "callback_url"),
        ({"callback_url": None}, "callback_url"),
    ],
)
def test_malformed_ping_is_422_naming_the_field(
    world: World, change: dict[str, Any], field_name: str
) -> None:
    body = {k: v for k, v in {**PING, **change}.items() if v is not None}
    response = world.client.post("/v1/pages/changed", json=body)
    assert response.status_code == 422
    locs = [tuple(e["loc"]) for e in response.json()["detail"]]
    assert ("body", field_name) in locs
    assert world.sender.sent == [] and world.jobs.records == {}


def test_non_json_body_is_422(world: World) -> None:
    response = world.client.post(
        "/v1/pages/changed", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert response.status_code == 422


@pytest.mark.parametrize(
    "url",
    [
        "http://evil.test/w/rest.php/cbragcontent/v0/page_id/",
        "http://169.254.169.254/latest/meta-data/",
        "http://wiki.test.evil.test/x/",
        "http://wiki.test@evil.test/x/",
    ],
)
def test_callback_host_not_allow_listed_is_refused(world: World, url: str) -> None:
    response = world.client.post("/v1/pages/changed", json={**PING, "callback_url": url})
    assert response.status_code == 422
    [error] = response.json()["detail"]
    assert error["loc"] == ["body", "callback_url"]
    assert "not allowed" in error["msg"] or "credentials" in error["msg"]
    assert world.sender.sent == [] and world.jobs.records == {}


def test_wildcard_allow_list_entry_accepts_subdomains(world: World) -> None:
    url = "https://www.kolzchut.org.il/w/rest.php/cbragcontent/v0/page_id/"
    assert world.client.post("/v1/pages/changed", json={**PING, "callback_url": url}).status_code == 202


def test_broker_down_is_503_and_the_job_says_why(world: World) -> None:
    world.sender.broken = True
    response = world.client.post("/v1/pages/changed", json=PING)
    assert response.status_code == 503
    assert response.json()["dependency"] == "redis"
    [record] = world.jobs.records.values()
    assert record.state is JobState.failed and record.error is not None and "not queued" in record.error


def test_unknown_job_is_404(world: World) -> None:
    assert world.client.get("/v1/jobs/nope").status_code == 404


def test_failed_jobs_are_listed_and_retried(world: World) -> None:
    job_id = world.client.post("/v1/pages/changed", json=PING).json()["job_id"]
    done_id = world.client.delete("/v1/pages/5").json()["job_id"]
    world.jobs.records[job_id] = world.jobs.records[job_id].model_copy(
        update={"state": JobState.failed, "error": "SourceError: 500", "attempts": 3}
    )
    world.jobs.records[done_id] = world.jobs.records[done_id].model_copy(update={"state": JobState.done})
    world.sender.sent.clear()

    listed = world.client.get("/v1/jobs", params={"state": "failed"}).json()
    assert listed["state"] == "failed"
    assert [(j["job_id"], j["error"], j["attempts"]) for j in listed["jobs"]] == [
        (job_id, "SourceError: 500", 3)
    ]
    assert world.client.get("/v1/jobs").json()["jobs"][0]["job_id"] == job_id

    retried = world.client.post(f"/v1/jobs/{job_id}/retry", headers={"X-Request-ID": "retry-1"})
    assert retried.status_code == 202 and retried.json()["status"] == "queued"
    [(task, message, rid)] = world.sender.sent
    assert task == INDEX_PAGE_TASK and rid == "retry-1"
    assert isinstance(message, IndexPage) and message.job_id == job_id and message.request_id == "retry-1"

    assert world.client.post(f"/v1/jobs/{done_id}/retry").status_code == 409
    assert world.client.post(f"/v1/jobs/{job_id}/retry").status_code == 409
    assert world.client.post("/v1/jobs/nope/retry").status_code == 404
    assert world.client.get("/v1/jobs", params={"state": "bogus"}).status_code == 422


def test_delete_sends_a_delete_command(world: World) -> None:
    response = world.client.delete("/v1/pages/77")
    assert response.status_code == 202
    [(task, message, _)] = world.sender.sent
    assert task == DELETE_PAGE_TASK and isinstance(message, DeletePage) and message.page_id == 77
    assert world.jobs.records[response.json()["job_id"]].kind is JobKind.delete_page
    assert world.client.delete("/v1/pages/0").status_code == 422


def test_push_sends_the_page_inline(world: World) -> None:
    page = {
        "page_id": 9,
        "revision_id": 3,
        "title": "t",
        "content": "== h ==\nbody",
        "revision_date": "2025-01-01T00:00:00Z",
    }
    response = world.client.post("/v1/pages", json=page)
    assert response.status_code == 202, response.text
    [(task, message, _)] = world.sender.sent
    assert task == INDEX_PAGE_TASK and isinstance(message, IndexPage)
    assert (
        message.page is not None and message.page.content == "== h ==\nbody" and message.page.source == "push"
    )
    assert (message.page_id, message.revision_id, message.callback_url) == (9, 3, None)
    bad = world.client.post("/v1/pages", json={"title": "no id"})
    assert bad.status_code == 422 and ["body", "page_id"] in [e["loc"] for e in bad.json()["detail"]]


def test_page_state_comes_from_the_store(world: World) -> None:
    world.store.states[5] = PageState(page_id=5, revision_id=8, paragraphs=3, paragraphs_per_model={"m": 3})
    assert world.client.get("/v1/pages/5").json()["paragraphs_per_model"] == {"m": 3}
    missing = world.client.get("/v1/pages/6")
    assert missing.status_code == 404 and "not indexed" in missing.json()["detail"]


def test_indexed_pages_are_listed_by_id_in_windows(world: World) -> None:
    for page_id in (9, 2, 5):
        world.store.states[page_id] = PageState(page_id=page_id, revision_id=1, paragraphs=page_id, title="t")
    body = world.client.get("/v1/pages", params={"limit": 2, "offset": 1}).json()
    assert [p["page_id"] for p in body["pages"]] == [5, 9]
    assert (body["limit"], body["offset"], body["indexed_paragraphs"]) == (2, 1, 16)
    assert world.client.get("/v1/pages").json()["limit"] == 100
    assert world.client.get("/v1/pages", params={"limit": 0}).status_code == 422
    assert world.client.get("/v1/pages", params={"offset": -1}).status_code == 422


def test_health_readiness_and_metrics_by_route_template(world: World) -> None:
    assert world.client.get("/healthz").json() == {"status": "ok", "service": "ingest"}
    assert world.client.get("/readyz").json() == {"ready": True, "checks": {"redis": True}}
    world.jobs.up = False
    not_ready = world.client.get("/readyz")
    assert not_ready.status_code == 503 and not_ready.json()["checks"] == {"redis": False}

    world.client.get("/v1/jobs/some-raw-id-123")
    world.client.get("/no/such/path/xyz")
    text = world.client.get("/metrics").text
    assert (
        'ragbot_http_requests_total{method="GET",route="/v1/jobs/{job_id}",service="ingest",status="404"}'
        in text
    )
    assert 'route="<unmatched>"' in text
    assert "some-raw-id-123" not in text and "xyz" not in text
    assert 'ragbot_http_request_duration_seconds_count{route="/v1/jobs/{job_id}",service="ingest"}' in text
