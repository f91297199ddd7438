"""A streaming ``multipart/form-data`` reader that enforces size caps while the body arrives.

Starlette's form parser spools every file to disk before the route sees it; this one counts each
file's bytes as they come and stops reading (``PartTooLarge``) the moment one passes its cap, so an
oversized upload costs at most the cap in memory and time. Files are kept in spooled temporary
files (in memory up to ``spool_bytes``, then on disk). Form fields are small and kept as text.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from tempfile import SpooledTemporaryFile
from typing import IO

from python_multipart.exceptions import FormParserError
from python_multipart.multipart import MultipartParser, parse_options_header

from ragbot.errors import PartTooLarge, ValidationFailed

__all__ = ["FilePart", "MultipartForm", "read_multipart"]


@dataclass(slots=True)
class FilePart:
    """One uploaded file: its form field, file name, declared type and bytes (spooled)."""

    field: str
    filename: str
    content_type: str | None
    file: IO[bytes]
    size: int = 0

    def read(self) -> bytes:
        """All its bytes."""
        self.file.seek(0)
        return self.file.read()


@dataclass(slots=True)
class MultipartForm:
    """The files and text fields of a form, in the order they came."""

    files: list[FilePart] = field(default_factory=list)
    fields: dict[str, list[str]] = field(default_factory=dict)

    def close(self) -> None:
        """Release the spooled files."""
        for part in self.files:
            with contextlib.suppress(OSError):
                part.file.close()


@dataclass(slots=True)
class _State:
    headers: dict[bytes, bytes] = field(default_factory=dict)
    header_name: bytes = b""
    header_value: bytes = b""
    name: str = ""
    file: FilePart | None = None
    text: bytearray = field(default_factory=bytearray)


async def read_multipart(
    chunks: AsyncIterator[bytes],
    *,
    content_type: str,
    max_file_bytes: int,
    max_files: int,
    max_fields: int = 64,
    max_field_bytes: int = 64 * 1024,
    spool_bytes: int = 1024 * 1024,
) -> MultipartForm:
    """Parse the body; ``PartTooLarge`` for a file over ``max_file_bytes``, ``ValidationFailed``
    (field ``file``) for a malformed body or too many files or fields."""
    _, options = parse_options_header(content_type)
    boundary = options.get(b"boundary")
    if not boundary:
        raise ValidationFailed("multipart/form-data without a boundary", field="file")
    form = MultipartForm()
    state = _State()

    def on_part_begin() -> None:
        state.headers, state.file, state.name = {}, None, ""
        state.text = bytearray()

    def on_header_field(data: bytes, start: int, end: int) -> None:
        state.header_name += data[start:end]

    def on_header_value(data: bytes, start: int, end: int) -> None:
        state.header_value += data[start:end]

    def on_header_end() -> None:
        state.headers[state.header_name.lower()] = state.header_value
        state.header_name, state.header_value = b"", b""

    def on_headers_finished() -> None:
        _, disposition = parse_options_header(state.headers.get(b"content-disposition", b""))
        name = disposition.get(b"name")
        if name is None:
            raise ValidationFailed("a multipart part has no name", field="file")
        state.name = name.decode("utf-8", errors="replace")
        if b"filename" in disposition:
            if len(form.files) >= max_files:
                raise ValidationFailed(f"at most {max_files} files per request", field="file")
            raw_type = state.headers.get(b"content-type")
            state.file = FilePart(
                field=state.name,
                filename=disposition[b"filename"].decode("utf-8", errors="replace"),
                content_type=raw_type.decode("latin-1") if raw_type else None,
                file=SpooledTemporaryFile(max_size=spool_bytes),  # noqa: SIM115 - closed by the form
            )
            form.files.append(state.file)
        elif sum(len(v) for v in form.fields.values()) >= max_fields:
            raise ValidationFailed(f"at most {max_fields} form fields per request", field="file")

    def on_part_data(data: bytes, start: int, end: int) -> None:
        if state.file is not None:
            state.file.size += end - start
            if state.file.size > max_file_bytes:
                raise PartTooLarge(
                    f"{state.file.filename or 'a file'} is over the {max_file_bytes}-byte limit"
                )
            state.file.file.write(data[start:end])
        else:
            state.text += data[start:end]
            if len(state.text) > max_field_bytes:
                raise ValidationFailed(f"form field {state.name!r} is too long", field=state.name)

    def on_part_end() -> None:
        if state.file is None:
            value = bytes(state.text).decode("utf-8", errors="replace")
            form.fields.setdefault(state.name, []).append(value)

    parser = MultipartParser(
        boundary,
        {
            "on_part_begin": on_part_begin,
            "on_part_data": on_part_data,
            "on_part_end": on_part_end,
            "on_header_field": on_header_field,
            "on_header_value": on_header_value,
            "on_header_end": on_header_end,
            "on_headers_finished": on_headers_finished,
        },
    )
    try:
        async for chunk in chunks:
            parser.write(chunk)
        parser.finalize()
    except FormParserError as exc:
        form.close()
        raise ValidationFailed(f"malformed multipart body: {exc}", field="file") from None
    except BaseException:
        form.close()
        raise
    return form
