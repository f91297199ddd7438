"""Hostile uploads: path traversal in file names, XML entity bombs in docx/pptx, huge PDF page trees,
overlapping and duplicate zip entries, mislabelled types. Each file is built here by a small generator;
each refusal is a 422 naming the file and what to do, and what was accepted before stays accepted."""

from __future__ import annotations

import io
import struct
import zipfile
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, cast

import pytest
from fastapi.testclient import TestClient
from fixtures.files.builders import make_docx, make_pdf, make_pptx
from support.fakes import FakeIds, FakeJobs, FakeSender

from ragbot.errors import ValidationFailed
from ragbot.ports import SearchStore
from ragbot.settings import IngestSettings
from ragbot.sources.detect import safe_filename
from ragbot.sources.files import parse_upload
from ragbot.sources.files.pdf import parse_pdf
from ragbot_ingest.app import create_app
from ragbot_ingest.deps import Resources

MB = 1024 * 1024
TEXT = b"Sick pay starts on the second day.\n"

BILLION_LAUGHS = (
    b'<?xml version="1.0"?>\n<!DOCTYPE lolz [<!ENTITY lol "lol">'
    + b"".join(
        b'<!ENTITY lol%d "%s">' % (i, (b"&lol%d;" % (i - 1) if i > 1 else b"&lol;") * 10)
        for i in range(1, 10)
    )
    + b"]>\n"
)


def rewrite(container: bytes, member: str, transform: Any) -> bytes:
    """A copy of a zip container with one member's bytes transformed."""
    out = io.BytesIO()
    with (
        zipfile.ZipFile(io.BytesIO(container)) as source,
        zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as sink,
    ):
        for info in source.infolist():
            data = source.read(info)
            sink.writestr(info.filename, transform(data) if info.filename == member else data)
    return out.getvalue()


def with_prolog(prolog: bytes) -> Any:
    def transform(xml: bytes) -> bytes:
        body = xml.split(b"?>", 1)[1] if xml.startswith(b"<?xml") else xml
        return prolog + body.lstrip()

    return transform


def overlapping_zip() -> bytes:
    """A docx whose second central-directory entry points at the first entry's bytes (non-recursive bomb)."""
    data = bytearray(make_docx())
    entries = [i for i in range(len(data)) if data[i : i + 4] == b"PK\x01\x02"]
    first_offset = struct.unpack("<I", data[entries[0] + 42 : entries[0] + 46])[0]
    data[entries[1] + 42 : entries[1] + 46] = struct.pack("<I", first_offset)
    return bytes(data)


def duplicate_entries() -> bytes:
    out = io.BytesIO()
    source = zipfile.ZipFile(io.BytesIO(make_docx()))
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as sink:
        for info in source.infolist():
            sink.writestr(info.filename, source.read(info))
        with pytest.warns(UserWarning, match="Duplicate"):
            sink.writestr("word/document.xml", b"<w:document/>")
    return out.getvalue()


def refusal(data: bytes, filename: str, **kwargs: Any) -> str:
    with pytest.raises(ValidationFailed) as caught:
        parse_upload(data, filename=filename, max_bytes=20 * MB, page_id=1, **kwargs)
    assert caught.value.field == "file"
    return str(caught.value)


# -- the parsers -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "member", "name"),
    [
        (make_docx, "word/document.xml", "bomb.docx"),
        (make_docx, "word/styles.xml", "bomb.docx"),
        (make_pptx, "ppt/presentation.xml", "bomb.pptx"),
        (make_pptx, "[Content_Types].xml", "bomb.pptx"),
    ],
)
def test_an_entity_bomb_in_an_office_part_is_refused_before_lxml_sees_it(
    make: Any, member: str, name: str
) -> None:
    bomb = rewrite(make(), member, with_prolog(BILLION_LAUGHS))
    message = refusal(bomb, name)
    assert name in message and "DTD" in message and member in message and "Save the file again" in message


def test_a_dtd_hidden_after_comments_or_in_utf16_is_still_found() -> None:
    hidden = b'<?xml version="1.0"?>\n<!-- ' + b"x" * 100_000 + b" -->\n" + BILLION_LAUGHS.split(b"\n", 1)[1]
    assert "DTD" in refusal(rewrite(make_docx(), "word/document.xml", with_prolog(hidden)), "a.docx")
    utf16 = b"\xff\xfe" + BILLION_LAUGHS.decode().encode("utf-16-le")
    assert "DTD" in refusal(rewrite(make_docx(), "word/document.xml", lambda x: utf16 + x), "b.docx")


def test_an_external_entity_is_refused() -> None:
    xxe = b'<?xml version="1.0"?>\n<!DOCTYPE d [<!ENTITY x SYSTEM "file:///etc/passwd">]>\n'
    assert "DTD" in refusal(rewrite(make_docx(), "word/document.xml", with_prolog(xxe)), "xxe.docx")


def test_a_pdf_declaring_a_huge_page_tree_is_refused_before_the_tree_is_walked() -> None:
    pdf = make_pdf([["one page"]]).replace(b"/Count 1 >>", b"/Count 9 >>")
    assert "declares 9 pages (limit 3)" in refusal(pdf, "tree.pdf", max_pdf_pages=3)


def test_a_pdf_lying_about_its_page_count_is_refused_after_the_walk() -> None:
    pdf = make_pdf([[f"page {i}"] for i in range(5)]).replace(b"/Count 5 >>", b"/Count 1 >>")
    assert "has 5 pages (limit 3)" in refusal(pdf, "liar.pdf", max_pdf_pages=3)


def test_a_pdf_that_takes_too_long_is_refused() -> None:
    with pytest.raises(ValidationFailed, match=r"took over 0 s .*split it"):
        parse_pdf(make_pdf([["a"], ["b"]]), filename="slow.pdf", max_pages=10, max_seconds=0.0)


def test_overlapping_zip_entries_are_refused() -> None:
    assert "entries overlap" in refusal(overlapping_zip(), "overlap.docx")


def test_duplicate_zip_entries_are_refused() -> None:
    assert "duplicate entries" in refusal(duplicate_entries(), "dup.docx")


@pytest.mark.parametrize(
    ("data", "name", "reason"),
    [
        (b"MZ\x90\x00" + b"\x00" * 60 + b"PE\x00\x00" + b"\x00" * 200, "report.pdf", "Windows executable"),
        (b"\x7fELF\x02\x01\x01" + b"\x00" * 100, "slides.pptx", "ELF executable"),
        (b"\xcf\xfa\xed\xfe" + b"\x00" * 100, "notes.txt", "Mach-O"),
        (b"\x89PNG\r\n\x1a\n" + b"\x00" * 100, "doc.docx", "PNG image"),
    ],
)
def test_a_binary_with_a_document_name_is_refused_by_its_content(data: bytes, name: str, reason: str) -> None:
    message = refusal(data, name)
    assert message.startswith(name) and reason in message


def test_a_text_that_merely_starts_with_mz_is_still_text() -> None:
    page = parse_upload(b"MZ is the name of our unit.\n", filename="mz.txt", max_bytes=MB, page_id=1)
    assert page.content.startswith("MZ is")


def test_a_pdf_named_docx_is_indexed_as_the_pdf_it_is() -> None:
    page = parse_upload(make_pdf([["Real PDF text"]]), filename="report.docx", max_bytes=MB, page_id=1)
    assert page.extra["file_type"] == "pdf" and "Real PDF text" in page.content


@pytest.mark.parametrize(
    ("name", "safe"),
    [
        ("../../etc/passwd", "passwd"),
        ("/etc/passwd", "passwd"),
        ("..\\..\\windows\\win.ini", "win.ini"),
        ("a\x00b.txt", "ab.txt"),
        ("..", "upload"),
        ("dir/\u202etxt.exe", "txt.exe"),
        ("", "upload"),
    ],
)
def test_file_names_are_labels_never_paths(name: str, safe: str) -> None:
    assert safe_filename(name) == safe


# -- the upload API --------------------------------------------------------------------------------------


@dataclass
class World:
    client: TestClient
    jobs: FakeJobs

    def upload(self, name: str, body: bytes, key: str | None = None) -> Any:
        return self.client.post(
            "/v1/documents",
            files=[("file", (name, body, "application/pdf"))],
            data={"key": key} if key is not None else None,
        )


@pytest.fixture
def world() -> Iterator[World]:
    jobs, sender, ids = FakeJobs(), FakeSender(), FakeIds()
    settings = IngestSettings(max_upload_bytes=5 * MB, max_upload_files=4)

    @asynccontextmanager
    async def resources() -> AsyncIterator[Resources]:
        yield Resources(
            settings=settings, jobs=jobs, sender=sender, store=cast(SearchStore, None), uploads=ids
        )

    with TestClient(create_app(resources=resources)) as client:
        yield World(client=client, jobs=jobs)


@pytest.mark.parametrize("name", ["../../etc/passwd", "/etc/passwd", "..\\..\\boot.ini", "evil\x00.txt"])
def test_a_traversal_file_name_is_stored_as_its_last_component(world: World, name: str) -> None:
    response = world.upload(name, TEXT)
    assert response.status_code == 202, response.text
    [document] = response.json()["documents"]
    for field in ("filename", "key"):
        assert "/" not in document[field] and "\\" not in document[field] and "\x00" not in document[field]
        assert ".." not in document[field]


def test_a_key_with_a_nul_is_refused_naming_the_key(world: World) -> None:
    response = world.upload("a.txt", TEXT, key="a\x00b")
    assert response.status_code == 422
    [error] = response.json()["detail"]
    assert "control characters" in error["msg"]


HOSTILE_FILES = [
    ("bomb.docx", lambda: rewrite(make_docx(), "word/document.xml", with_prolog(BILLION_LAUGHS)), "DTD"),
    ("bomb.pptx", lambda: rewrite(make_pptx(), "ppt/presentation.xml", with_prolog(BILLION_LAUGHS)), "DTD"),
    ("tree.pdf", lambda: make_pdf([[str(i)] for i in range(5001)]), "limit 5000"),
    ("overlap.docx", overlapping_zip, "overlap"),
    ("setup.pdf", lambda: b"MZ\x90\x00" + b"\x00" * 60 + b"PE\x00\x00" + b"\x00" * 64, "executable"),
]


@pytest.mark.parametrize(("name", "make", "words"), HOSTILE_FILES)
def test_a_hostile_file_is_a_422_and_earlier_uploads_remain(
    world: World, name: str, make: Any, words: str
) -> None:
    accepted = world.upload("fine.txt", TEXT)
    assert accepted.status_code == 202
    response = world.upload(name, make())
    assert response.status_code == 422, response.text
    [error] = response.json()["detail"]
    assert error["loc"] == ["body", "file", 0] and name in error["msg"] and words in error["msg"]
    assert len(world.jobs.records) == 1  # the earlier upload's job, nothing from the refused one
