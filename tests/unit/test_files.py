"""Uploads: every kind parsed by content into located blocks; every bad file refused with a reason."""

from __future__ import annotations

import io
import zipfile
from typing import Any

import pytest
from fixtures.files.builders import forge_declared_size, make_docx, make_pdf, make_pptx, make_zip_bomb

from ragbot.errors import ValidationFailed
from ragbot.indexing.paragraphs import split_page
from ragbot.schemas.pages import Block, Page
from ragbot.sources.detect import ZipLimits, detect_kind
from ragbot.sources.files import fix_rtl_order, parse_upload, rtl_vote, visual_to_logical

MB = 1024 * 1024
HEBREW_LOGICAL = "זכויות עובדים בשנת 2024 לפי חוק ABC."
# How a right-to-left paragraph is displayed, left to right: what many PDF producers store.
HEBREW_VISUAL = ".ABC קוח יפל 2024 תנשב םידבוע תויוכז"


def parse(data: bytes, filename: str, *, max_bytes: int = 10 * MB, **kwargs: Any) -> Page:
    return parse_upload(data, filename=filename, max_bytes=max_bytes, page_id=7, **kwargs)


def refusal(data: bytes, filename: str, **kwargs: Any) -> str:
    with pytest.raises(ValidationFailed) as caught:
        parse(data, filename, **kwargs)
    assert caught.value.field == "file"
    return str(caught.value)


def texts(page: Page) -> list[str]:
    assert page.blocks is not None
    return [b.text for b in page.blocks]


# --- every kind -------------------------------------------------------------------------------------


def test_pdf_keeps_page_numbers_outline_headings_and_title() -> None:
    data = make_pdf(
        [["Introduction", "", "First paragraph."], ["Second page text."], ["Third page text."]],
        title="Rights Handbook",
        outline=[("Intro", 0), ("Details", 2)],
    )
    page = parse(data, "handbook.pdf")
    assert page.title == "Rights Handbook"
    assert page.source == "upload" and page.page_id == 7 and page.revision_id == 1
    assert page.blocks == [
        Block(text="Introduction\n\nFirst paragraph.", heading="Intro", location="page 1"),
        Block(text="Second page text.", heading="Intro", location="page 2"),
        Block(text="Third page text.", heading="Details", location="page 3"),
    ]
    assert page.extra["file_type"] == "pdf" and page.extra["pages"] == 3


def test_pdf_title_falls_back_to_first_heading_then_file_name() -> None:
    with_outline = make_pdf([["Body"]], outline=[("Chapter One", 0)])
    assert parse(with_outline, "report-2024.pdf").title == "Chapter One"
    assert parse(make_pdf([["Body"]]), "report-2024.pdf").title == "report-2024"


def test_pdf_hebrew_stored_in_visual_order_comes_out_in_logical_order() -> None:
    data = make_pdf([[HEBREW_VISUAL, "Plain English stays as it is."], [HEBREW_LOGICAL]])
    page = parse(data, "hebrew.pdf")
    assert texts(page) == [f"{HEBREW_LOGICAL}\nPlain English stays as it is.", HEBREW_LOGICAL]


def test_pdf_scanned_without_text_is_refused() -> None:
    assert "no text could be extracted" in refusal(make_pdf([[]]), "scan.pdf")


def test_encrypted_pdf_is_refused() -> None:
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(make_pdf([["Secret"]]))))
    writer.encrypt(user_password="pw", algorithm="RC4-128")
    out = io.BytesIO()
    writer.write(out)
    assert "encrypted" in refusal(out.getvalue(), "secret.pdf")


def test_docx_headings_lists_tables_and_pages() -> None:
    page = parse(make_docx(), "guide.docx")
    assert page.title == "Workers' Rights Guide"  # the Title-style paragraph, no core title
    assert page.blocks == [
        Block(
            text="Every employee is entitled to paid leave.\n\n- Full-time workers",
            heading="Eligibility",
            location="page 1",
        ),
        Block(
            text="| Years | Days |\n| --- | --- |\n| 1-4 | 12 |\n| 5+ | 16 |",
            heading="Eligibility > Amounts",
            location="page 1",
            is_table=True,
        ),
        Block(text="Appeal within 45 days.", heading="Appeals", location="page 2"),
    ]


def test_docx_core_title_wins_and_no_page_breaks_means_no_location() -> None:
    page = parse(make_docx(title="Official Title", page_break=False), "guide.docx")
    assert page.title == "Official Title"
    assert page.blocks is not None and {b.location for b in page.blocks} == {None}


def test_pptx_one_block_per_slide_with_title_heading_and_tables() -> None:
    page = parse(make_pptx(), "review.pptx")
    assert page.title == "Quarterly Review"
    assert page.blocks == [
        Block(text="Prepared by the rights team", heading="Quarterly Review", location="slide 1"),
        Block(
            text="Claims rose by 12 percent\n  Mostly unemployment benefits",
            heading="Key Findings",
            location="slide 2",
        ),
        Block(
            text="| Region | Claims |\n| --- | --- |\n| North | 340 |",
            heading="Numbers",
            location="slide 3",
            is_table=True,
        ),
    ]
    assert page.extra["slides"] == 3
    assert parse(make_pptx(title="Deck Title"), "review.pptx").title == "Deck Title"


HTML = b"""<!DOCTYPE html>
<html><head><title>Leave &amp; Pay</title><style>p { color: red }</style></head>
<body><nav><a href="/">Home</a></nav>
<script>document.write("<p>injected</p>")</script>
<h1>Annual leave</h1><p>Workers   get
leave.<br>Every year.</p><ul><li>One</li><li>Two</li></ul>
<h2>Days</h2><table><tr><th>Years</th><th>Days</th></tr><tr><td>1</td><td>12</td></tr></table>
</body></html>"""


def test_html_headings_paragraphs_tables_without_script_or_style() -> None:
    page = parse(HTML, "leave.html")
    assert page.title == "Leave & Pay"
    assert page.blocks == [
        Block(text="Workers get leave.\nEvery year.\n\n- One\n- Two", heading="Annual leave"),
        Block(
            text="| Years | Days |\n| --- | --- |\n| 1 | 12 |", heading="Annual leave > Days", is_table=True
        ),
    ]
    assert "injected" not in page.content and "color" not in page.content and "Home" not in page.content


def test_html_without_closing_head_or_body_tags() -> None:
    page = parse(b"<html><head><title>T</title><meta charset=utf-8><p>Body text.", "a.html")
    assert (page.title, texts(page)) == ("T", ["Body text."])


def test_html_in_a_declared_legacy_charset() -> None:
    html = '<html><head><meta charset="windows-1255"></head><body><p>שלום</p></body></html>'
    assert texts(parse(html.encode("cp1255"), "a.html")) == ["שלום"]


def test_markdown_sections_front_matter_title_and_fenced_code() -> None:
    md = (
        "---\ntitle: Front Title\n---\nIntro text.\n\n# First\n\nBody.\n\n```\n# not a heading\n```\n\n"
        "Second\n------\n\n| a | b |\n|---|---|\n| 1 | 2 |\n"
    )
    page = parse(md.encode(), "notes.md")
    assert page.title == "Front Title"
    assert page.blocks == [
        Block(text="Intro text."),
        Block(text="Body.\n\n```\n# not a heading\n```", heading="First"),
        Block(text="| a | b |\n|---|---|\n| 1 | 2 |", heading="First > Second"),
    ]
    assert parse(b"# Heading One\n\nText.", "notes.md").title == "Heading One"


def test_plain_text_titled_by_file_name() -> None:
    page = parse("Line one.\r\n\r\nשורה שתיים.".encode(), "notes/readme.txt")
    assert page.title == "readme"
    assert texts(page) == ["Line one.\n\nשורה שתיים."]
    assert page.extra["filename"] == "readme.txt"


def test_utf16_with_bom_is_read() -> None:
    page = parse("שלום עולם".encode("utf-16"), "hello.txt")
    assert texts(page) == ["שלום עולם"]


def test_explicit_title_and_source_are_kept() -> None:
    page = parse(b"text", "a.txt", title="Given", source="file", revision_id=5, url="refs/a.txt")
    assert (page.title, page.source, page.revision_id, page.url) == ("Given", "file", 5, "refs/a.txt")


def test_blocks_split_into_paragraphs_that_keep_page_and_slide_numbers() -> None:
    def words(text: str) -> int:
        return len(text.split())

    for data, name, expected in [
        (make_pdf([["One."], ["Two."], ["Three."]]), "a.pdf", ["page 1", "page 2", "page 3"]),
        (make_pptx(), "b.pptx", ["slide 1", "slide 2", "slide 3"]),
    ]:
        paragraphs = split_page(parse(data, name), token_counters=[words], max_tokens=100)
        assert [p.location for p in paragraphs] == expected


def test_parsing_is_deterministic() -> None:
    for data, name in [(make_docx(), "a.docx"), (make_pptx(), "b.pptx"), (make_pdf([["x"]]), "c.pdf")]:
        assert parse(data, name) == parse(data, name)


# --- content decides, not the extension -------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "filename", "kind"),
    [
        (make_pdf([["A pdf named docx."]]), "report.docx", "pdf"),
        (make_docx(), "report.pdf", "docx"),
        (make_pptx(), "slides.docx", "pptx"),
        (HTML, "page.txt", "html"),
        (b"# A heading\n\ntext", "notes.txt", "md"),
        (b"plain words", "notes.html", "txt"),
        (b"<?xml version='1.0'?>\n<html><body><p>x</p></body></html>", "page", "html"),
    ],
)
def test_kind_is_decided_by_content(data: bytes, filename: str, kind: str) -> None:
    assert detect_kind(data, filename=filename) == kind
    assert parse(data, filename).extra["file_type"] == kind


# --- refusals -----------------------------------------------------------------------------------------


def test_empty_file_is_refused() -> None:
    assert refusal(b"", "empty.pdf") == "empty.pdf: the file is empty"
    assert "no text" in refusal(b"  \n\n ", "blank.txt")


def test_file_over_the_cap_is_refused_before_parsing() -> None:
    message = refusal(make_docx(), "big.docx", max_bytes=1000)
    assert "over the 1000-byte limit" in message


@pytest.mark.parametrize(
    ("data", "filename"),
    [
        (b"%PDF-1.4\nthis is not a pdf body\n", "broken.pdf"),
        (make_docx()[:4000], "truncated.docx"),
        (make_pptx()[:-300], "truncated.pptx"),
    ],
)
def test_corrupt_files_are_refused(data: bytes, filename: str) -> None:
    assert "corrupt or unreadable" in refusal(data, filename)


def test_office_container_with_broken_xml_is_refused() -> None:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("[Content_Types].xml", "<Types")
        archive.writestr("word/document.xml", "<w:document>not closed")
    assert "corrupt or unreadable as docx" in refusal(out.getvalue(), "broken.docx")


@pytest.mark.parametrize(
    ("data", "filename", "reason"),
    [
        (b"\x89PNG\r\n\x1a\n" + bytes(64), "photo.pdf", "a PNG image"),
        (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(64), "old.doc", "legacy Office"),
        (bytes(range(256)) * 4, "blob.txt", "binary data"),
        ("café".encode("latin-1"), "latin1.txt", "not UTF-8"),
    ],
)
def test_unsupported_types_are_refused(data: bytes, filename: str, reason: str) -> None:
    message = refusal(data, filename)
    assert "unsupported file type" in message and reason in message


def test_other_zip_containers_are_refused() -> None:
    def container(name: str) -> bytes:
        out = io.BytesIO()
        with zipfile.ZipFile(out, "w") as archive:
            archive.writestr(name, "<x/>")
        return out.getvalue()

    assert "spreadsheets" in refusal(container("xl/workbook.xml"), "sheet.docx")
    assert "not docx or pptx" in refusal(container("readme.txt"), "archive.docx")


def test_zip_bomb_disguised_as_docx_is_refused() -> None:
    bomb = make_zip_bomb(unpacked_mb=64)
    assert len(bomb) < MB
    message = refusal(bomb, "innocent.docx")
    assert "zip bomb" in message and "compression ratio" in message


def test_zip_bomb_is_refused_from_the_central_directory_before_unpacking() -> None:
    # The entry claims 2 GiB; nothing that large exists, so only the declared size can refuse it.
    forged = forge_declared_size(make_docx(), member="word/document.xml", size=2**31)
    assert "unpacks to" in refusal(forged, "forged.docx")


def test_zip_entry_count_and_size_limits() -> None:
    docx = make_docx()
    few = ZipLimits(max_entries=3)
    assert "entries (limit 3)" in refusal(docx, "many.docx", zip_limits=few)
    small = ZipLimits(max_unpacked_bytes=10_000)
    assert "unpacks to" in refusal(docx, "large.docx", zip_limits=small)


# --- right-to-left order ------------------------------------------------------------------------------


def test_rtl_vote_reads_final_letters() -> None:
    assert rtl_vote("מלך העולם") < 0  # finals at word ends: logical
    assert rtl_vote("םלועה ךלמ") > 0  # finals at word starts: reversed
    assert rtl_vote("plain English 2024") == 0


@pytest.mark.parametrize(
    ("visual", "logical"),
    [
        (HEBREW_VISUAL, HEBREW_LOGICAL),
        ("2025 2024 תנשב", "בשנת 2024 2025"),  # numbers apart stay apart, in logical order
        ("ךכ (2024) תנשב", "בשנת (2024) כך"),  # brackets mirror back
        ("50% לש החנה", "הנחה של 50%"),  # percent stays with its number
        ("1.1.2024-ה זא", "אז ה-1.1.2024"),  # a date reads as written
        ("Hello םולש world", "Hello שלום world"),  # a left-to-right line: only the Hebrew run turns
    ],
)
def test_visual_to_logical(visual: str, logical: str) -> None:
    assert visual_to_logical(visual) == logical


def test_fix_rtl_order_leaves_logical_lines_and_follows_the_majority_when_unsure() -> None:
    assert fix_rtl_order("מלך העולם\nשלום עולם") == "מלך העולם\nשלום עולם"
    # "אבג דה" has no final letters; the other lines say the text is reversed, so it is too.
    assert fix_rtl_order("םלועה ךלמ\nדה גבא\nEnglish") == "מלך העולם\nאבג הד\nEnglish"
