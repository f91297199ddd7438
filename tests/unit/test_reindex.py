"""Bulk reindex without services: the API's batching, the wiki listing contract, parent progress,
the worker's batch handler (micro-batching, partial failures) and the ``ragbot reindex`` CLI."""

from __future__ import annotations

import io
import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
from celery.exceptions import Retry
from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry
from support.chat_fakes import serve_app
from support.fakes import (
    FakeEvents,
    FakeJobs,
    FakeRuntime,
    FakeSender,
    FakeSource,
    FakeTask,
    HashEmbedder,
    MemoryStore,
)

from ragbot.cli import main as cli
from ragbot.cli.reindex import follow
from ragbot.definition import parse_definition
from ragbot.errors import SourceError, SourceRefused, StoreUnavailable, ValidationFailed
from ragbot.messaging.events import EventPublisher
from ragbot.messaging.jobs import JobStore
from ragbot.messaging.reindex import WikiLister, batch_job_id, combine_batches, page_from_line
from ragbot.observability.metrics import worker_metrics
from ragbot.ports import SearchStore, StoredParagraph
from ragbot.schemas.jobs import JobKind, JobRecord, JobState
from ragbot.schemas.messages import INDEX_PAGES_TASK, IndexPage, IndexPages, PageRef
from ragbot.schemas.pages import Page
from ragbot.settings import IngestSettings, WorkerSettings
from ragbot_embedder import service
from ragbot_embedder.tasks import TaskRunner
from ragbot_ingest.app import create_app
from ragbot_ingest.deps import Resources

WIKI = "http://wiki.test"
CALLBACK = f"{WIKI}/w/rest.php/cbragcontent/v0/page_id/"


def content_line(page_id: int, revision_id: int = 1, text: str = "") -> bytes:
    body = {
        "page_id": page_id,
        "revision_id": revision_id,
        "title": f"Page {page_id}",
        "content": text or f"## About {page_id}\n\nParagraph one of page {page_id}.\n\nParagraph two.",
        "url": f"{WIKI}/p/{page_id}",
    }
    return json.dumps(body).encode() + b"\n"


# --- the API ------------------------------------------------------------------------------------------


def mock_wiki(handler: Any) -> WikiLister:
    return WikiLister(
        allowed_hosts=["wiki.test"], timeout_s=5, max_pages=100, transport=httpx.MockTransport(handler)
    )


@dataclass
class Api:
    client: TestClient
    jobs: FakeJobs
    sender: FakeSender

    def batches(self) -> list[IndexPages]:
        assert all(task == INDEX_PAGES_TASK for task, _, _ in self.sender.sent)
        return [cast(IndexPages, m) for _, m, _ in self.sender.sent]


@pytest.fixture
def api() -> Iterator[Api]:
    jobs, sender = FakeJobs(), FakeSender()
    settings = IngestSettings(
        reindex_batch_pages=2, max_page_bytes=4000, max_reindex_pages=50, allowed_callback_hosts=["wiki.test"]
    )

    def listing(request: httpx.Request) -> httpx.Response:
        if request.url.params.get("apcontinue") == "C":
            return httpx.Response(200, json={"batchcomplete": "", "query": {"allpages": [{"pageid": 3}]}})
        pages = [{"pageid": 1, "ns": 0, "title": "A"}, {"pageid": 2, "ns": 0, "title": "B"}]
        return httpx.Response(
            200, json={"continue": {"apcontinue": "C", "continue": "-||"}, "query": {"allpages": pages}}
        )

    @asynccontextmanager
    async def resources() -> AsyncIterator[Resources]:
        yield Resources(
            settings=settings,
            jobs=jobs,
            sender=sender,
            store=cast(SearchStore, None),
            lister=mock_wiki(listing),
        )

    with TestClient(create_app(resources=resources)) as client:
        yield Api(client=client, jobs=jobs, sender=sender)


def test_jsonl_body_becomes_a_parent_job_and_batches(api: Api) -> None:
    body = b"".join(content_line(i) for i in range(1, 6)) + b"\n"
    response = api.client.post(
        "/v1/reindex",
        content=body,
        headers={"Content-Type": "application/x-ndjson"},
        params={"force": "true"},
    )
    assert response.status_code == 202, response.text
    parent_id = response.json()["job_id"]
    parent = api.jobs.records[parent_id]
    assert parent.kind is JobKind.reindex and parent.state is JobState.running
    assert parent.payload == {"source": "jsonl", "total": 5, "batches": 3, "force": True}
    sent = api.batches()
    assert [len(b.pages) for b in sent] == [2, 2, 1]
    assert [b.job_id for b in sent] == [batch_job_id(parent_id, n) for n in range(3)]
    assert all(b.parent_job_id == parent_id and b.force and not b.refs for b in sent)
    assert [p.page_id for b in sent for p in b.pages] == [1, 2, 3, 4, 5]
    child = api.jobs.records[sent[0].job_id]
    assert child.kind is JobKind.index_pages and IndexPages.model_validate(child.payload) == sent[0]


@pytest.mark.parametrize("content_type", ["application/jsonl", "text/plain; charset=utf-8", ""])
def test_other_jsonl_content_types(api: Api, content_type: str) -> None:
    headers = {"Content-Type": content_type} if content_type else {}
    response = api.client.post("/v1/reindex", content=content_line(4), headers=headers)
    assert response.status_code == 202, response.text
    assert [p.page_id for b in api.batches() for p in b.pages] == [4]


def test_jsonl_as_a_multipart_file(api: Api) -> None:
    body = content_line(7) + content_line(8)
    response = api.client.post("/v1/reindex", files={"file": ("pages.jsonl", body, "application/x-ndjson")})
    assert response.status_code == 202, response.text
    assert [p.page_id for b in api.batches() for p in b.pages] == [7, 8]


def test_bad_lines_are_named_and_nothing_is_queued(api: Api) -> None:
    body = content_line(1) + b"{not json\n" + b'{"title": "no id"}\n' + b"[1, 2]\n"
    response = api.client.post("/v1/reindex", content=body, headers={"Content-Type": "application/x-ndjson"})
    assert response.status_code == 422, response.text
    message = response.json()["detail"][0]["msg"]
    assert "line 2: not JSON" in message and "line 3: no page_id" in message and "line 4" in message
    assert api.sender.sent == [] and api.jobs.records == {}


def test_empty_and_oversized_bodies(api: Api) -> None:
    headers = {"Content-Type": "application/x-ndjson"}
    assert api.client.post("/v1/reindex", content=b"\n\n", headers=headers).status_code == 422
    long_line = content_line(1, text="word " * 2000)
    assert api.client.post("/v1/reindex", content=long_line, headers=headers).status_code == 413
    many = b"".join(content_line(i) for i in range(1, 60))
    response = api.client.post("/v1/reindex", content=many, headers=headers)
    assert response.status_code == 413 and "50 pages" in response.json()["detail"]
    assert (
        api.client.post("/v1/reindex", content=b"x", headers={"Content-Type": "image/png"}).status_code == 415
    )


def test_wiki_listing_follows_mediawiki_continuation(api: Api) -> None:
    body = {
        "source": "wiki",
        "list_url": f"{WIKI}/w/api.php?action=query&list=allpages",
        "callback_url": CALLBACK,
    }
    response = api.client.post("/v1/reindex", json=body)
    assert response.status_code == 202, response.text
    sent = api.batches()
    assert [[r.page_id for r in b.refs] for b in sent] == [[1, 2], [3]]
    assert all(r.callback_url == CALLBACK and r.revision_id == 0 for b in sent for r in b.refs)
    parent = api.jobs.records[response.json()["job_id"]]
    assert parent.payload["source"] == "wiki" and parent.payload["total"] == 3


def test_wiki_listing_refuses_hosts_not_allowed(api: Api) -> None:
    body = {"source": "wiki", "list_url": "http://169.254.169.254/list", "callback_url": CALLBACK}
    response = api.client.post("/v1/reindex", json=body)
    assert response.status_code == 422 and "not allowed" in response.text
    response = api.client.post(
        "/v1/reindex", json={"source": "cms", "list_url": "x" * 9, "callback_url": CALLBACK}
    )
    assert response.status_code == 422


def test_retrying_a_reindex_requeues_its_failed_batches(api: Api) -> None:
    body = b"".join(content_line(i) for i in range(1, 6))
    parent_id = api.client.post(
        "/v1/reindex", content=body, headers={"Content-Type": "application/x-ndjson"}
    ).json()["job_id"]
    assert api.client.post(f"/v1/jobs/{parent_id}/retry").status_code == 409
    failed = batch_job_id(parent_id, 1)
    api.jobs.records[failed] = api.jobs.records[failed].model_copy(update={"state": JobState.failed})
    api.sender.sent.clear()
    assert api.client.post(f"/v1/jobs/{parent_id}/retry").status_code == 202
    [again] = api.batches()
    assert again.job_id == failed and [p.page_id for p in again.pages] == [3, 4]


# --- the listing contract -------------------------------------------------------------------------------


async def test_listing_with_revisions_and_the_plain_shape() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/w/api.php":
            pages = {"5": {"pageid": 5, "lastrevid": 50}, "-1": {"missing": "", "title": "X"}}
            return httpx.Response(200, json={"batchcomplete": "", "query": {"pages": pages}})
        if request.url.path == "/list/2":
            return httpx.Response(200, json={"pages": [{"page_id": 6, "revision_id": 60}], "next": None})
        return httpx.Response(200, json={"pages": [{"page_id": 7}, {"page_id": 6}], "next": "/list/2"})

    lister = mock_wiki(handler)
    refs = await lister.refs(list_url=f"{WIKI}/w/api.php?generator=allpages&prop=info", callback_url=CALLBACK)
    assert [(r.page_id, r.revision_id) for r in refs] == [(5, 50)]
    refs = await lister.refs(list_url=f"{WIKI}/list/1", callback_url=CALLBACK)
    assert [(r.page_id, r.revision_id) for r in refs] == [(7, 0), (6, 0)]


async def test_listing_failures_say_what_went_wrong() -> None:
    def status(code: int) -> WikiLister:
        return mock_wiki(lambda _: httpx.Response(code, json={}))

    with pytest.raises(SourceError, match="503"):
        await status(503).refs(list_url=f"{WIKI}/l", callback_url=CALLBACK)
    with pytest.raises(SourceRefused, match="403"):
        await status(403).refs(list_url=f"{WIKI}/l", callback_url=CALLBACK)
    with pytest.raises(SourceRefused, match="not a listing"):
        await status(200).refs(list_url=f"{WIKI}/l", callback_url=CALLBACK)
    redirect_away = mock_wiki(lambda _: httpx.Response(200, json={"pages": [], "next": "http://evil.test/x"}))
    with pytest.raises(SourceRefused, match="not allowed"):
        await redirect_away.refs(list_url=f"{WIKI}/l", callback_url=CALLBACK)


def test_page_from_line() -> None:
    page = page_from_line(content_line(3, 9), line_number=1)
    assert (page.page_id, page.revision_id, page.source) == (3, 9, "wiki")
    for bad in (b'{"page_id": 0}', b'{"page_id": "x"}', b"null"):
        with pytest.raises(ValidationFailed, match="line 4"):
            page_from_line(bad, line_number=4)


# --- parent progress ------------------------------------------------------------------------------------


def record(job_id: str, state: JobState, **progress: int) -> JobRecord:
    now = datetime.now(UTC)
    return JobRecord(
        job_id=job_id,
        kind=JobKind.index_pages,
        state=state,
        created_at=now,
        updated_at=now,
        progress=progress,
    )


def test_combine_batches_sums_progress_and_decides_the_state() -> None:
    now = datetime.now(UTC)
    parent = JobRecord(
        job_id="p",
        kind=JobKind.reindex,
        state=JobState.running,
        created_at=now,
        updated_at=now,
        payload={"total": 6, "batches": 3},
    )
    queued = combine_batches(parent, [record("p-b0", JobState.queued)] * 3)
    assert queued.state is JobState.queued and queued.progress == {
        "total": 6,
        "done": 0,
        "failed": 0,
        "batches": 3,
    }
    mid = combine_batches(
        parent,
        [
            record("p-b0", JobState.done, done=2),
            record("p-b1", JobState.retrying, done=1, pending=1),
            record("p-b2", JobState.queued),
        ],
    )
    assert mid.state is JobState.running and mid.progress["done"] == 3 and mid.progress["failed"] == 0
    end = combine_batches(
        parent,
        [
            record("p-b0", JobState.done, done=2),
            record("p-b1", JobState.failed, done=1, failed=1),
            None,
        ],
    )
    assert end.state is JobState.failed and end.progress == {"total": 6, "done": 3, "failed": 1, "batches": 3}
    assert end.error is not None and "p-b1" in end.error and "/v1/jobs/p/retry" in end.error
    ok = combine_batches(parent, [record(f"p-b{n}", JobState.done, done=2) for n in range(3)])
    assert ok.state is JobState.done and ok.error is None


# --- the worker's batch handler ---------------------------------------------------------------------------

DEFINITION = parse_definition(
    {
        "identifier_field": "page_id",
        "saved_fields": {"title": "text", "page_id": "integer", "content": "text", "url": "keyword"},
        "field_for_llm": "content",
        "models": {"hash-embedder": ["content", "title"]},
    }
)


def page(page_id: int, revision_id: int = 1, paragraphs: int = 2, marker: str = "") -> Page:
    body = "\n\n".join(f"Paragraph {n} of page {page_id} {marker}" for n in range(paragraphs))
    return Page(page_id=page_id, revision_id=revision_id, title=f"Title {page_id}", content=body)


@dataclass
class Batch:
    ctx: service.IndexingContext
    store: MemoryStore
    source: FakeSource
    embedder: HashEmbedder
    events: FakeEvents


@pytest.fixture
def batch() -> Batch:
    store, source, events = MemoryStore(require_vectors=True), FakeSource(), FakeEvents()
    embedder = HashEmbedder(max_tokens=9)
    ctx = service.IndexingContext(
        definition=DEFINITION,
        embedders={"hash-embedder": embedder},
        store=cast(SearchStore, store),
        source=source,
        jobs=cast(JobStore, None),
        events=cast(EventPublisher, events),
        metrics=worker_metrics(CollectorRegistry()),
        max_tokens=512,
        batch_max_paragraphs=100,
    )
    return Batch(ctx=ctx, store=store, source=source, embedder=embedder, events=events)


async def test_pages_of_a_batch_are_embedded_together(batch: Batch) -> None:
    command = IndexPages(job_id="b", pages=[page(i) for i in range(1, 11)])
    outcome = await service.index_pages(ctx=batch.ctx, command=command)
    assert outcome.state is JobState.done and outcome.progress == {
        "total": 10,
        "done": 10,
        "failed": 0,
        "pending": 0,
    }
    # One call per (model, field) for the whole batch: content (20 paragraphs) and title (10 titles).
    assert batch.embedder.calls == [20, 10]
    assert sorted(batch.store.pages) == list(range(1, 11))
    assert len(batch.events.published) == 10
    assert outcome.payload is not None and outcome.payload["page_ids"] == list(range(1, 11))


async def test_the_micro_batch_is_capped_in_paragraphs(batch: Batch) -> None:
    batch.ctx.batch_max_paragraphs = 5
    await service.index_pages(
        ctx=batch.ctx, command=IndexPages(job_id="b", pages=[page(i) for i in range(1, 7)])
    )
    assert batch.embedder.calls == [4, 2] * 3 and len(batch.store.pages) == 6


async def test_unchanged_duplicate_and_newer_pages(batch: Batch) -> None:
    await service.index_pages(ctx=batch.ctx, command=IndexPages(job_id="b", pages=[page(1, 5)]))
    command = IndexPages(job_id="b", pages=[page(1, 5), page(2, 1), page(2, 3, marker="newer"), page(2, 2)])
    outcome = await service.index_pages(ctx=batch.ctx, command=command)
    assert outcome.state is JobState.done and outcome.progress is not None
    assert outcome.progress["done"] == 4 and "3 unchanged" in outcome.detail
    assert batch.store.pages[2][0].revision_id == 3 and "newer" in batch.store.pages[2][0].fields["content"]


async def test_refs_are_fetched_and_each_fares_on_its_own(batch: Batch) -> None:
    batch.store.pages[9] = [StoredParagraph("9-1-0", 9, 1, 0, {}, {"v": cast(Any, [1.0])})]
    batch.source.pages = {1: page(1), 2: None, 3: page(3)}
    batch.source.errors = {4: SourceError("the wiki answered 503"), 5: SourceRefused("the wiki answered 403")}
    refs = [PageRef(page_id=i, callback_url=CALLBACK) for i in (1, 2, 3, 4, 5)]
    refs.append(PageRef(page_id=9, revision_id=1, callback_url=CALLBACK))  # already indexed: no fetch
    outcome = await service.index_pages(ctx=batch.ctx, command=IndexPages(job_id="b", refs=refs), final=False)
    assert outcome.state is JobState.failed and outcome.progress == {
        "total": 6,
        "done": 4,
        "failed": 1,
        "pending": 1,
    }
    assert outcome.error is not None and "page 5" in outcome.error and "403" in outcome.error
    assert outcome.retry is not None and "page 4" in outcome.retry
    assert sorted(batch.store.pages) == [1, 3, 9]
    final = await service.index_pages(ctx=batch.ctx, command=IndexPages(job_id="b", refs=refs), final=True)
    assert final.retry is None and final.progress is not None and final.progress["failed"] == 2


async def test_a_page_that_breaks_the_embedder_does_not_sink_the_batch(batch: Batch) -> None:
    batch.embedder.fail_on = "POISON"
    pages = [page(1), page(2, marker="POISON"), page(3)]
    outcome = await service.index_pages(ctx=batch.ctx, command=IndexPages(job_id="b", pages=pages))
    assert outcome.state is JobState.failed and outcome.error is not None and "page 2" in outcome.error
    assert sorted(batch.store.pages) == [1, 3]


async def test_a_page_the_store_refuses_is_reported_and_the_rest_written_in_one_call(batch: Batch) -> None:
    batch.store.refuse[2] = ValidationFailed("content_vectors expects 8 dimensions")
    pages = [page(1), page(2), page(3)]
    outcome = await service.index_pages(ctx=batch.ctx, command=IndexPages(job_id="b", pages=pages))
    assert outcome.state is JobState.failed and outcome.progress == {
        "total": 3,
        "done": 2,
        "failed": 1,
        "pending": 0,
    }
    assert outcome.error == "page 2: ValidationFailed: content_vectors expects 8 dimensions"
    assert "2 indexed, 4 paragraphs" in outcome.detail
    assert sorted(batch.store.pages) == [1, 3]
    assert [e.page_id for e in batch.events.published] == [1, 3]
    # One write for the batch, embedded once: no page-by-page retry of what the store refused.
    assert batch.store.batches == [[1, 2, 3]] and batch.embedder.calls == [6, 3]


async def test_a_page_the_store_cannot_take_now_retries_the_batch(batch: Batch) -> None:
    batch.store.refuse[2] = StoreUnavailable("elasticsearch indexing page 2: 1 item(s) failed (429)")
    command = IndexPages(job_id="b", pages=[page(1), page(2), page(3)])
    with pytest.raises(StoreUnavailable):
        await service.index_pages(ctx=batch.ctx, command=command)
    assert sorted(batch.store.pages) == [1, 3]
    assert [e.page_id for e in batch.events.published] == [1, 3]  # written pages are announced
    batch.store.refuse.clear()
    outcome = await service.index_pages(ctx=batch.ctx, command=command)
    assert outcome.state is JobState.done and outcome.progress is not None and outcome.progress["done"] == 3
    assert "2 unchanged" in outcome.detail and sorted(batch.store.pages) == [1, 2, 3]


async def test_a_single_page_the_store_refuses_raises(batch: Batch) -> None:
    batch.store.refuse[1] = ValidationFailed("bad paragraph")
    command = IndexPage(job_id="p", page_id=1, revision_id=1, page=page(1))
    with pytest.raises(ValidationFailed, match="bad paragraph"):
        await service.index_page(ctx=batch.ctx, command=command)
    assert batch.store.pages == {} and batch.events.published == []


async def test_uploads_replace_whatever_revision_they_carry(batch: Batch) -> None:
    first = page(1, revision_id=900).model_copy(update={"source": "upload"})
    second = page(1, revision_id=12, marker="v2").model_copy(update={"source": "upload"})
    for p in (first, second):
        command = IndexPage(job_id="u", page_id=1, revision_id=p.revision_id, page=p)
        outcome = await service.index_page(ctx=batch.ctx, command=command)
        assert outcome.state is JobState.done
    assert batch.store.pages[1][0].revision_id == 12
    again = IndexPage(job_id="u", page_id=1, revision_id=12, page=second)
    assert (await service.index_page(ctx=batch.ctx, command=again)).state is JobState.skipped


# --- the task runner on a batch ----------------------------------------------------------------------


def test_partial_batch_retries_then_dead_letters_and_refreshes_the_parent(batch: Batch) -> None:
    jobs = FakeJobs()
    jobs.seed(job_id="p", kind=JobKind.reindex, payload={"batches": 0})
    jobs.seed(job_id="p-b0", kind=JobKind.index_pages)
    batch.ctx.jobs = cast(JobStore, jobs)
    batch.source.pages = {1: page(1)}
    batch.source.errors = {2: SourceError("the wiki answered 502")}
    message = IndexPages(
        job_id="p-b0",
        parent_job_id="p",
        refs=[PageRef(page_id=i, callback_url=CALLBACK) for i in (1, 2)],
    ).model_dump(mode="json")
    runtime = cast(Any, FakeRuntime(batch.ctx))
    runner = TaskRunner(
        name=INDEX_PAGES_TASK,
        model=IndexPages,
        handler=service.index_pages,
        runtime=lambda: runtime,
        settings=WorkerSettings(max_retries=1, retry_backoff_s=0.01, retry_backoff_max_s=0.01),
    )
    with pytest.raises(Retry):
        runner(cast(Any, FakeTask(retries=0)), message)
    assert any(u.get("progress", {}).get("pending") == 1 for u in jobs.updates)
    assert jobs.updates[-1]["state"] is JobState.retrying and jobs.dead == []
    assert runner(cast(Any, FakeTask(retries=1)), message) == "failed"
    [dead] = jobs.dead
    assert dead["job_id"] == "p-b0" and "page 2" in dead["error"] and "502" in dead["error"]
    assert jobs.gets == ["p", "p"]


# --- the CLI ---------------------------------------------------------------------------------------------


def test_follow_draws_progress_until_the_job_ends() -> None:
    states = iter(
        [
            {"job_id": "p", "state": "running", "progress": {"total": 4, "done": 0, "failed": 0}},
            {"job_id": "p", "state": "running", "progress": {"total": 4, "done": 2, "failed": 1}},
            {"job_id": "p", "state": "failed", "progress": {"total": 4, "done": 3, "failed": 1}},
        ]
    )
    out = io.StringIO()
    record = follow(lambda: next(states), poll_s=0.0, show=True, out=out)
    assert record["state"] == "failed" and "4/4" in out.getvalue() and "failed=1" in out.getvalue()


def test_the_cli_streams_the_file_and_reports_refusals(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    jobs, sender = FakeJobs(), FakeSender()
    settings = IngestSettings(reindex_batch_pages=2)

    @asynccontextmanager
    async def resources() -> AsyncIterator[Resources]:
        yield Resources(settings=settings, jobs=jobs, sender=sender, store=cast(SearchStore, None))

    good, bad = tmp_path / "good.jsonl", tmp_path / "bad.jsonl"
    good.write_bytes(b"".join(content_line(i) for i in range(1, 4)))
    bad.write_bytes(content_line(1) + b"oops\n")
    with serve_app(create_app(resources=resources)) as url:
        assert cli.main(["reindex", str(good), "--ingest-url", url, "--no-wait", "--force"]) == 0
        assert f"{url}/v1/jobs/" in capsys.readouterr().out
        assert [len(cast(IndexPages, m).pages) for _, m, _ in sender.sent] == [2, 1]
        assert all(cast(IndexPages, m).force for _, m, _ in sender.sent)
        assert cli.main(["reindex", str(bad), "--ingest-url", url]) == 2
        assert "422" in capsys.readouterr().err
    assert cli.main(["reindex"]) == 2
