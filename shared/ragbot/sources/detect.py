"""What an uploaded file really is, decided by its bytes (the extension only breaks ties for text).

Magic bytes first: ``%PDF-`` (within the first KiB, as readers allow), a zip (``PK``) whose central
directory names ``word/document.xml`` (docx) or ``ppt/presentation.xml`` (pptx), then known binary
formats that are refused by name, then text: HTML when it starts like HTML (the WHATWG sniffing
rule), markdown when the name says so or a line is an ATX heading, plain text otherwise.

Zip containers are checked from their central directory BEFORE anything is decompressed: entry count,
declared total uncompressed size, compression ratio, duplicate names and overlapping entries (two
entries whose local records share bytes, the trick of non-recursive zip bombs). ``zipfile`` never
inflates an entry past its declared size, so these checks bound what the parsers can unpack. Then the
prolog of every XML part is read: Office XML never has a DTD, so a part declaring one (the home of
entity bombs such as "billion laughs" and of external entities) is refused before lxml sees it.

File names are only ever labels: ``safe_filename`` keeps the last component of a name (``/`` and
``\\`` both separate), without control or bidi characters; no name is used as a path.
"""

from __future__ import annotations

import codecs
import io
import itertools
import re
import zipfile
from dataclasses import dataclass
from pathlib import PurePath
from typing import Literal

from ragbot.errors import ValidationFailed
from ragbot.text.clean import strip_unsafe

__all__ = [
    "SUPPORTED_EXTENSIONS",
    "DocumentKind",
    "ZipLimits",
    "check_zip",
    "decode_text",
    "detect_kind",
    "refuse",
    "safe_filename",
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
    (b"\x7fELF", "an ELF executable"),
    (b"\xcf\xfa\xed\xfe", "a Mach-O executable"),
    (b"\xca\xfe\xba\xbe", "a Mach-O or Java class file"),
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


def safe_filename(filename: str) -> str:
    """An uploaded file's name as a label: its last component, no controls or bidi overrides, bounded."""
    name = strip_unsafe(filename).replace("\\", "/").rsplit("/", 1)[-1].strip()
    return "upload" if name in ("", ".", "..") else name[:255]


def refuse(filename: str, reason: str) -> ValidationFailed:
    """The one way an upload is refused: a 4xx-worthy error naming the file and what is wrong."""
    name = safe_filename(filename) if filename else "the file"
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
    if head.startswith(b"MZ") and (b"PE\x00\x00" in head or b"This program cannot be run" in head):
        raise refuse(filename, "unsupported file type: a Windows executable")
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
    if packed > size or _overlapping(infos):
        raise refuse(filename, "refused as a possible zip bomb: its entries overlap")
    names = [i.filename for i in infos]
    if len(set(names)) != len(names):
        raise refuse(filename, "the file is corrupt or unreadable (a zip with duplicate entries)")
    if any(i.flag_bits & 0x1 for i in infos):
        raise refuse(filename, "the file is encrypted (password protected)")


_LOCAL_HEADER = 30  # the fixed part of a zip local file header


def _overlapping(infos: list[zipfile.ZipInfo]) -> bool:
    """True when an entry's local record (header, name, data) runs into the next entry's."""
    ordered = sorted(infos, key=lambda i: i.header_offset)
    for this, following in itertools.pairwise(ordered):
        end = this.header_offset + _LOCAL_HEADER + len(this.filename.encode("utf-8")) + this.compress_size
        if end > following.header_offset:
            return True
    return False


_PROLOG_BYTES = 1024 * 1024
_PROLOG_SKIPS = ((b"<?", b"?>"), (b"<!--", b"-->"))


def check_xml_parts(archive: zipfile.ZipFile, *, filename: str) -> None:
    """Refuse a container any of whose XML parts declares a DTD (entity bombs, external entities)."""
    for info in archive.infolist():
        if not info.filename.lower().endswith((".xml", ".rels")):
            continue
        with archive.open(info) as part:
            head = part.read(_PROLOG_BYTES)
        if _declares_dtd(head):
            raise refuse(
                filename,
                f"refused: its part {info.filename} declares a DTD (<!DOCTYPE>), which Office files never "
                "do; entity declarations can expand into gigabytes. Save the file again from Office",
            )


def _declares_dtd(head: bytes) -> bool:
    """True when the XML prolog (before the root element) holds a DOCTYPE, or never ends in ``head``."""
    if head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        head = head.decode("utf-16", "ignore").encode("utf-8")
    position = 3 if head.startswith(codecs.BOM_UTF8) else 0
    while True:
        while position < len(head) and head[position : position + 1].isspace():
            position += 1
        for start, end in _PROLOG_SKIPS:
            if head.startswith(start, position):
                close = head.find(end, position + len(start))
                if close < 0:
                    return True
                position = close + len(end)
                break
        else:
            return head[position : position + 9].upper() == b"<!DOCTYPE"


def _zip_kind(data: bytes, *, filename: str, limits: ZipLimits) -> DocumentKind:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            check_zip(archive, size=len(data), filename=filename, limits=limits)
            names = set(archive.namelist())
            if "word/document.xml" in names or "ppt/presentation.xml" in names:
                check_xml_parts(archive, filename=filename)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, EOFError) as exc:
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
