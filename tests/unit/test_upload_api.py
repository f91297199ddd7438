"""``POST /v1/documents``: every upload type, and every way an upload is refused, over in-memory fakes.

Files are parsed in ingest, so a refused file is a 4xx now (never a job that crashes a worker later);
accepted files become one ``IndexPage`` job each (kind ``upload``) with the page inline.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, cast

import pytest
from fastapi.testclient import TestClient
from fixtures.files.builders import make_docx, make_pdf, make_pptx, make_zip_bomb
from support.fakes import FakeIds, FakeJobs, FakeSender

from ragbot.errors import PartTooLarge
from ragbot.indexing.folder import content_revision
from ragbot.ports import SearchStore
from ragbot.schemas.jobs import JobKind, JobState
from ragbot.schemas.messages import INDEX_PAGE_TASK, IndexPage
from ragbot.settings import IngestSettings
from ragbot_ingest.app import create_app
from ragbot_ingest.deps import Resources
from ragbot_ingest.multipart import read_multipart
from ragbot_ingest.upload_ids import UPLOAD_PAGE_ID_BASE

CAP = 200_000


@dataclass
class World:
    client: TestClient
    jobs: FakeJobs
    sender: FakeSender
    ids: FakeIds

    def upload(self, *files: tuple[str, bytes], keys: list[str] | None = None) -> Any:
        data = {"key": keys} if keys is not None else None
        return self.client.post(
            "/v1/documents",
            files=[("file", (name, body, "application/octet-stream")) for name, body in files],
            data=data,
        )

    def commands(self) -> list[IndexPage]:
        assert all(task == INDEX_PAGE_TASK for task, _, _ in self.sender.sent)
        return [cast(IndexPage, message) for _, message, _ in self.sender.sent]


@pytest.fixture
def world() -> Iterator[World]:
    jobs, sender, ids = FakeJobs(), FakeSender(), FakeIds()
    settings = IngestSettings(max_upload_bytes=CAP, max_upload_files=4)

    @asynccontextmanager
    async def resources() -> AsyncIterator[Resources]:
        yield Resources(
            settings=settings, jobs=jobs, sender=sender, store=cast(SearchStore, None), uploads=ids
        )

    with TestClient(create_app(resources=resources)) as client:
        yield World(client=client, jobs=jobs, sender=sender, ids=ids)


HTML = (
    b"<html><head><title>Leave</title></head><body><h1>Leave</h1><p>Paid leave is 12 days.</p></body></html>"
)
MARKDOWN = b"# Overtime\n\nOvertime is paid at 125% for the first two hours.\n"
TEXT = "Sick pay starts on the second day. דמי מחלה משולמים מהיום השני.\n".encode()


@pytest.mark.parametrize(
    ("name", "body", "kind", "location"),
    [
        ("guide.pdf", make_pdf(["First page about leave.", "Second page about pay."]), "pdf", "page 2"),
        ("guide.docx", make_docx(), "docx", None),
        ("review.pptx", make_pptx(), "pptx", "slide 3"),
        ("leave.html", HTML, "html", None),
        ("overtime.md", MARKDOWN, "md", None),
        ("sick.txt", TEXT, "txt", None),
        ("no-extension", MARKDOWN, "md", None),
    ],
)
def test_every_type_becomes_an_upload_job_with_the_page_inline(
    world: World, name: str, body: bytes, kind: str, location: str | None
) -> None:
    response = world.upload((name, body))
    assert response.status_code == 202, response.text
    [document] = response.json()["documents"]
    assert document["filename"] == name and document["key"] == name and document["file_type"] == kind
    assert document["page_id"] >= UPLOAD_PAGE_ID_BASE
    assert document["revision_id"] == content_revision(hashlib.sha256(body).hexdigest())
    assert response.headers["Location"] == document["status_url"]
    [command] = world.commands()
    assert command.page is not None and command.page.source == "upload"
    assert command.page.page_id == command.page_id == document["page_id"]
    assert command.page.url == name and command.page.blocks
    if location is not None:
        assert location in [b.location for b in command.page.blocks]
    record = world.jobs.records[document["job_id"]]
    assert record.kind is JobKind.upload and record.state is JobState.queued
    assert IndexPage.model_validate(record.payload) == command
    status = world.client.get(f"/v1/jobs/{document['job_id']}")
    assert status.status_code == 200 and status.json()["kind"] == "upload"


def test_several_files_in_one_request_and_keys(world: World) -> None:
    response = world.upload(("a.md", MARKDOWN), ("b.txt", TEXT), keys=["docs/a.md", "docs/b.txt"])
    assert response.status_code == 202, response.text
    documents = response.json()["documents"]
    assert [d["key"] for d in documents] == ["docs/a.md", "docs/b.txt"]
    assert len({d["page_id"] for d in documents}) == 2 and len(world.commands()) == 2
    assert "Location" not in response.headers


def test_the_same_key_again_keeps_its_page_id(world: World) -> None:
    first = world.upload(("a.md", MARKDOWN)).json()["documents"][0]
    second = world.upload(("a.md", MARKDOWN + b"\nMore text here.\n")).json()["documents"][0]
    assert first["page_id"] == second["page_id"] and first["revision_id"] != second["revision_id"]


def _errors(response: Any) -> list[dict[str, Any]]:
    assert response.status_code == 422, response.text
    errors: list[dict[str, Any]] = response.json()["detail"]
    return errors


@pytest.mark.parametrize(
    ("name", "body", "reason"),
    [
        ("broken.pdf", b"%PDF-1.7\n" + b"\x00garbage" * 100, "corrupt"),
        ("empty.docx", b"", "empty"),
        ("bomb.docx", make_zip_bomb(unpacked_mb=64), "bomb"),
        ("image.png", b"\x89PNG\r\n\x1a\n" + b"\x00" * 64, "support"),
        ("scan.pdf", make_pdf([""]), "no text"),
    ],
)
def test_refused_files_get_a_clear_422_and_nothing_is_queued(
    world: World, name: str, body: bytes, reason: str
) -> None:
    [error] = _errors(world.upload((name, body)))
    assert error["loc"] == ["body", "file", 0]
    assert name in error["msg"] and reason in error["msg"].lower(), error
    assert world.sender.sent == [] and world.jobs.records == {}


def test_one_bad_file_refuses_the_whole_request_naming_each(world: World) -> None:
    errors = _errors(
        world.upload(("good.md", MARKDOWN), ("bad.docx", b"PK\x03\x04 broken"), ("empty.txt", b""))
    )
    assert [e["loc"][-1] for e in errors] == [1, 2]
    assert "bad.docx" in errors[0]["msg"] and "empty.txt" in errors[1]["msg"]
    assert world.sender.sent == []


def test_a_file_over_the_cap_is_413_before_it_is_read_whole(world: World) -> None:
    response = world.upload(("big.txt", b"word " * (CAP // 5 + 10)))
    assert response.status_code == 413, response.text
    assert "big.txt" in response.json()["detail"] and str(CAP) in response.json()["detail"]
    assert world.sender.sent == []


def test_a_body_declared_over_every_cap_is_413_at_once(world: World) -> None:
    response = world.client.post(
        "/v1/documents",
        content=b"x",
        headers={"Content-Type": "multipart/form-data; boundary=b", "Content-Length": str(CAP * 100)},
    )
    assert response.status_code == 413


def test_not_multipart_is_415_and_no_file_is_422(world: World) -> None:
    assert world.client.post("/v1/documents", json={"file": "x"}).status_code == 415
    response = world.client.post("/v1/documents", data={"key": "a"}, files={"other": ("x", b"")})
    assert response.status_code == 422
    assert world.client.post("/v1/documents", files=[]).status_code in (415, 422)


def test_too_many_files_and_mismatched_keys_are_422(world: World) -> None:
    [error] = _errors(world.upload(*[(f"{i}.md", MARKDOWN) for i in range(5)]))
    assert "at most 4 files" in error["msg"]
    [error] = _errors(world.upload(("a.md", MARKDOWN), ("b.md", MARKDOWN), keys=["only-one"]))
    assert error["loc"] == ["body", "key"]


def test_a_failed_upload_job_can_be_retried(world: World) -> None:
    job_id = world.upload(("a.md", MARKDOWN)).json()["documents"][0]["job_id"]
    world.jobs.records[job_id] = world.jobs.records[job_id].model_copy(update={"state": JobState.failed})
    response = world.client.post(f"/v1/jobs/{job_id}/retry")
    assert response.status_code == 202, response.text
    first, again = world.commands()
    assert again.page == first.page and again.job_id == first.job_id


async def _stream(*parts: bytes) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


async def test_the_reader_stops_at_the_cap_without_reading_the_rest() -> None:
    boundary = "XyZ"
    head = (f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="a.bin"\r\n\r\n').encode()
    consumed: list[int] = []

    async def body() -> AsyncIterator[bytes]:
        yield head
        for n in range(1000):
            consumed.append(n)
            yield b"x" * 1024

    with pytest.raises(PartTooLarge, match=r"a\.bin"):
        await read_multipart(
            body(),
            content_type=f"multipart/form-data; boundary={boundary}",
            max_file_bytes=10_000,
            max_files=1,
        )
    assert len(consumed) <= 11


async def test_the_reader_keeps_files_and_fields_in_order() -> None:
    boundary = "b0"
    raw = io.BytesIO()
    for name, filename, value in [("key", None, b"k1"), ("file", "x.txt", b"hello"), ("file", "y.txt", b"")]:
        disposition = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename else "")
        raw.write(f"--{boundary}\r\nContent-Disposition: {disposition}\r\n\r\n".encode() + value + b"\r\n")
    raw.write(f"--{boundary}--\r\n".encode())
    data = raw.getvalue()
    form = await read_multipart(
        _stream(data[:7], data[7:40], data[40:]),
        content_type=f"multipart/form-data; boundary={boundary}",
        max_file_bytes=100,
        max_files=5,
    )
    try:
        assert form.fields == {"key": ["k1"]}
        assert [(f.filename, f.read()) for f in form.files] == [("x.txt", b"hello"), ("y.txt", b"")]
    finally:
        form.close()
