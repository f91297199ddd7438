"""What an uploaded file really is, decided by its bytes (the extension only breaks ties for text).

Magic bytes first: ``%PDF-`` (within the first KiB, as readers allow), a zip (``PK``) whose central
directory names ``word/document.xml`` (docx) or ``ppt/presentation.xml`` (pptx), then known binary
formats that are refused by name, then text: HTML when it starts like HTML (the WHATWG sniffing
rule), markdown when the name says so or a line is an ATX heading, plain text otherwise.

Zip containers are checked from their central directory BEFORE anything is decompressed: entry count,
declared total uncompressed size, compression ratio and overlapping entries. ``zipfile`` never
inflates an entry past its declared size, so these checks bound what the parsers can unpack.
"""

from __future__ import annotations

import codecs
import io
import re
import zipfile
from dataclasses import dataclass
from pathlib import PurePath
from typing import Literal

from ragbot.errors import ValidationFailed

__all__ = [
    "SUPPORTED_EXTENSIONS",
    "DocumentKind",
    "ZipLimits",
    "check_zip",
    "decode_text",
    "detect_kind",
    "refuse",
]

DocumentKind = Literal["pdf", "docx", "pptx", "html", "md", "txt"]

SUPPORTED_EXTENSIONS: dict[str, DocumentKind] = {
    ".pdf": "pdf",
    ".docx": "docx",
    ".pptx": "pptx",
    ".html": "html",
    ".htm": "html",
    ".xhtml": "html",
    ".md": "md",
    ".markdown": "md",
    ".txt": "txt",
    ".text": "txt",
}

# Formats we recognise only to refuse them with a useful message.
_REFUSED_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1", "a legacy Office file (.doc/.ppt/.xls): save it as .docx or .pptx"),
    (b"\x89PNG\r\n\x1a\n", "a PNG image"),
    (b"\xff\xd8\xff", "a JPEG image"),
    (b"GIF87a", "a GIF image"),
    (b"GIF89a", "a GIF image"),
    (b"\x1f\x8b", "a gzip archive"),
    (b"7z\xbc\xaf\x27\x1c", "a 7-zip archive"),
    (b"Rar!", "a RAR archive"),
    (b"{\\rtf", "an RTF document: save it as .docx"),
)
_HTML_START = re.compile(
    rb"<(?:!doctype\s+html|html|head|body|script|iframe|h[1-6]|div|font|table|a|style|title|b|br|p|!--)"
    rb"(?:[\s>/]|$)",
    re.IGNORECASE,
)
_XML_DECL = re.compile(rb"<\?xml[^>]*\?>", re.IGNORECASE)
_ATX_LINE = re.compile(r"^ {0,3}#{1,6}[ \t]+\S", re.MULTILINE)
_META_CHARSET = re.compile(rb"<meta[^>]+charset\s*=\s*[\"']?\s*([A-Za-z0-9_.:-]+)", re.IGNORECASE)
_SNIFF = 1024


@dataclass(frozen=True, slots=True)
class ZipLimits:
    """Bounds on a zip container (docx, pptx), checked from its central directory before unpacking."""

    max_entries: int = 5000
    max_unpacked_bytes: int = 256 * 1024 * 1024
    # Deflate reaches ~1030:1 on zeros; real Office XML compresses 5-30:1. Ratios only matter for
    # containers that unpack to more than ``ratio_floor_bytes`` (a tiny file may compress very well).
    max_ratio: float = 100.0
    ratio_floor_bytes: int = 8 * 1024 * 1024


def refuse(filename: str, reason: str) -> ValidationFailed:
    """The one way an upload is refused: a 4xx-worthy error naming the file and what is wrong."""
    name = PurePath(filename).name or "the file"
    return ValidationFailed(f"{name}: {reason}", field="file")


def detect_kind(data: bytes, *, filename: str = "", zip_limits: ZipLimits | None = None) -> DocumentKind:
    """The document kind of ``data``; the content wins over the extension when they disagree."""
    if not data:
        raise refuse(filename, "the file is empty")
    head = data[:_SNIFF]
    if b"%PDF-" in head:
        return "pdf"
    if data.startswith((b"PK\x03\x04", b"PK\x05\x06")):
        return _zip_kind(data, filename=filename, limits=zip_limits or ZipLimits())
    for magic, what in _REFUSED_MAGIC:
        if head.startswith(magic):
            raise refuse(filename, f"unsupported file type: {what}")
    text = decode_text(data, filename=filename)
    if looks_like_html(text[:_SNIFF].encode("utf-8", "ignore")):
        return "html"
    suffix = PurePath(filename).suffix.lower()
    if SUPPORTED_EXTENSIONS.get(suffix) == "md" or _ATX_LINE.search(text[:65536]):
        return "md"
    return "txt"


def looks_like_html(head: bytes) -> bool:
    """True when the text starts (after a BOM, whitespace or an XML declaration) like an HTML document."""
    start = head.lstrip(b"\xef\xbb\xbf").lstrip()
    xml = _XML_DECL.match(start)
    if xml:
        rest = start[xml.end() :].lstrip()
        return bool(re.match(rb"<(?:!doctype\s+html|html)[\s>]", rest, re.IGNORECASE))
    return bool(_HTML_START.match(start))


def decode_text(data: bytes, *, filename: str = "") -> str:
    """Text from bytes: a BOM decides, else UTF-8, else an HTML ``<meta charset>``; binary is refused."""
    boms = ((codecs.BOM_UTF8, "utf-8-sig"), (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"))
    for bom, codec in boms:
        if data.startswith(bom):
            try:
                return data.decode(codec)
            except UnicodeDecodeError:
                raise refuse(filename, f"the text is not valid {codec.upper()}") from None
    if b"\x00" in data[:8192]:
        raise refuse(filename, "unsupported file type: binary data that is not pdf, docx or pptx")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        pass
    declared = _META_CHARSET.search(data[:4096])
    if declared:
        name = declared.group(1).decode("ascii", "ignore")
        try:
            return data.decode(codecs.lookup(name).name)
        except (LookupError, UnicodeDecodeError):
            pass
    raise refuse(filename, "unsupported file type: text that is not UTF-8 (save it as UTF-8)")


def check_zip(archive: zipfile.ZipFile, *, size: int, filename: str, limits: ZipLimits) -> None:
    """Refuse zip bombs from the central directory alone: count, declared sizes, ratio, overlaps."""
    infos = archive.infolist()
    if len(infos) > limits.max_entries:
        raise refuse(
            filename, f"refused as a possible zip bomb: {len(infos)} entries (limit {limits.max_entries})"
        )
    unpacked = sum(i.file_size for i in infos)
    packed = sum(i.compress_size for i in infos)
    if unpacked > limits.max_unpacked_bytes:
        raise refuse(
            filename,
            f"refused as a possible zip bomb: it unpacks to {unpacked} bytes "
            f"(limit {limits.max_unpacked_bytes})",
        )
    if unpacked > limits.ratio_floor_bytes and unpacked > limits.max_ratio * max(size, 1):
        raise refuse(
            filename,
            f"refused as a possible zip bomb: compression ratio {unpacked / max(size, 1):.0f}:1 "
            f"(limit {limits.max_ratio:.0f}:1)",
        )
    if packed > size:
        raise refuse(filename, "refused as a possible zip bomb: its entries overlap")
    if any(i.flag_bits & 0x1 for i in infos):
        raise refuse(filename, "the file is encrypted (password protected)")


def _zip_kind(data: bytes, *, filename: str, limits: ZipLimits) -> DocumentKind:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            check_zip(archive, size=len(data), filename=filename, limits=limits)
            names = set(archive.namelist())
    except zipfile.BadZipFile as exc:
        raise refuse(filename, f"the file is corrupt or unreadable (broken zip container: {exc})") from None
    if "word/document.xml" in names:
        return "docx"
    if "ppt/presentation.xml" in names:
        return "pptx"
    if "xl/workbook.xml" in names:
        raise refuse(filename, "unsupported file type: spreadsheets (xlsx) are not supported")
    if "[Content_Types].xml" in names:
        raise refuse(filename, "the file is corrupt or unreadable (an Office container without a document)")
    raise refuse(filename, "unsupported file type: a zip archive that is not docx or pptx")
