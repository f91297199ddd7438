"""Index generations of the embedded store: one SQLite file each, and a pointer file replaced atomically.

* A generation's file is ``<stem>.g<fp8><suffix>`` beside the configured path
  (``stores.generations.embedded_file``); ``LEGACY`` is the configured file itself.
* Its meta (fingerprint, definition, dimensions, paragraph options) is the ``generation`` row of
  that file's ``meta`` table, so a file carries what built it wherever it is copied.
* The live generation is named by the pointer file ``<name>.live`` (JSON ``{"generation": id}``); no
  pointer means ``LEGACY``. ``switch`` writes a temporary file, fsyncs it and ``os.replace``s the
  pointer: a reader reads the old pointer or the new one, never a torn one.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sqlite3
from pathlib import Path
from typing import Any

from ragbot.errors import ConfigurationError, StoreUnavailable
from ragbot.ports import Generation
from ragbot.stores.generation_rules import LEGACY, check_generation_id, embedded_file

_META_KEY = "generation"


def pointer_file(path: Path) -> Path:
    """The file naming the live generation of the store configured at ``path``."""
    return path.with_name(f"{path.name}.live")


def read_pointer(path: Path) -> str:
    """The live generation's id (``LEGACY`` when there is no pointer)."""
    try:
        raw = json.loads(pointer_file(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return LEGACY
    except (OSError, ValueError) as exc:
        raise StoreUnavailable(f"{pointer_file(path)}: {exc}", dependency="embedded store") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("generation"), str):
        raise ConfigurationError(f"{pointer_file(path)} does not name a generation")
    return check_generation_id(raw["generation"])


class EmbeddedGenerations:
    """``Generations`` over SQLite files beside the configured path; see the module docstring."""

    def __init__(self, *, path: Path) -> None:
        self._path = Path(path)

    async def live(self) -> Generation:
        """The generation the pointer names, with its meta when recorded."""
        generation_id = await asyncio.to_thread(read_pointer, self._path)
        return await self.get(generation_id=generation_id) or Generation(generation_id)

    async def get(self, *, generation_id: str) -> Generation | None:
        """The meta row of the generation's file, or None (no file, or no row)."""
        file = embedded_file(self._path, generation_id)

        def read() -> Generation | None:
            if not file.exists():
                return None
            conn = sqlite3.connect(f"file:{file}?mode=ro", uri=True, timeout=10.0)
            try:
                row = conn.execute("SELECT value FROM meta WHERE key = ?", (_META_KEY,)).fetchone()
            except sqlite3.OperationalError:  # no meta table yet: a file still being created
                return None
            finally:
                conn.close()
            if row is None:
                return None
            doc: dict[str, Any] = json.loads(row[0])
            return Generation(
                generation_id=generation_id,
                fingerprint=doc.get("fingerprint"),
                definition=doc.get("definition"),
                dimensions=dict(doc.get("dimensions") or {}),
                split=dict(doc.get("split") or {}),
            )

        return await asyncio.to_thread(read)

    async def record(self, generation: Generation) -> None:
        """Create the generation's file (tables included) and write its meta row (idempotent)."""
        file = embedded_file(self._path, generation.generation_id)
        body = json.dumps(
            {
                "fingerprint": generation.fingerprint,
                "definition": dict(generation.definition) if generation.definition is not None else None,
                "dimensions": dict(generation.dimensions),
                "split": dict(generation.split),
            },  # not sorted: the order of fields and models is part of the definition
        )

        def write() -> None:
            file.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(file, timeout=10.0, isolation_level=None)
            try:
                conn.execute("PRAGMA journal_mode=WAL")
                # The store creates its other tables when it first opens the file.
                conn.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
                conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (_META_KEY, body))
            finally:
                conn.close()

        await asyncio.to_thread(write)

    async def switch(self, *, to: str) -> None:
        """Replace the pointer file atomically (write, fsync, ``os.replace``, fsync the folder)."""
        check_generation_id(to)
        target = pointer_file(self._path)

        def write() -> None:
            if not embedded_file(self._path, to).exists():
                raise ConfigurationError(f"generation {to} has no file; record it before switching")
            tmp = target.with_name(f"{target.name}.{os.getpid()}.tmp")
            with open(tmp, "w", encoding="utf-8") as out:
                json.dump({"generation": to}, out)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, target)
            fd = os.open(target.parent, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

        await asyncio.to_thread(write)

    async def drop(self, *, generation_id: str) -> None:
        """Delete the generation's file (and its WAL); refuses the live one."""
        if await asyncio.to_thread(read_pointer, self._path) == generation_id:
            raise ConfigurationError(f"generation {generation_id} is live; switch away before dropping it")
        file = embedded_file(self._path, generation_id)

        def remove() -> None:
            for suffix in ("", "-wal", "-shm"):
                with contextlib.suppress(FileNotFoundError):
                    file.with_name(file.name + suffix).unlink()

        await asyncio.to_thread(remove)

    async def close(self) -> None:
        """Nothing held between calls."""
