"""The embedded store's in-process indices (vector matrices, BM25), kept in step with the file's
generation counter: loaded lazily, then caught up from the rows and removed-ids log of newer writes."""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ragbot.errors import ConfigurationError
from ragbot.stores.embedded import schema
from ragbot.stores.embedded.matrix import IntArray, Matrix
from ragbot.stores.lexical import LexicalIndex, LexicalRow

logger = logging.getLogger(__name__)


@dataclass
class Derived:
    """The in-process indices and the database state they reflect."""

    generation: int | None = None
    max_id: int = 0
    matrices: dict[str, Matrix] | None = None
    lexical: LexicalIndex | None = None


class DerivedIndexes:
    """Holds the derived indices of one file; ``sync`` loads them or catches them up."""

    def __init__(self, *, path: Path, dimensions: Mapping[str, int], text_fields: int) -> None:
        self._path = path
        self._dimensions = dimensions
        self._fields = text_fields
        self._sync_lock = threading.Lock()
        self.state_lock = threading.Lock()  # held to read or patch the indices in place
        self.current = Derived()

    def reset(self) -> None:
        """Drop the indices (the store closed)."""
        with self.state_lock:
            self.current = Derived()

    def sync(self, conn: sqlite3.Connection, *, matrices: bool = False, bm25: bool = False) -> Derived:
        """The derived indices, loaded or caught up to the latest committed write."""
        generation = schema.generation(conn)
        with self.state_lock:
            d = self.current
            if (
                d.generation == generation
                and (d.matrices is not None or not matrices)
                and (d.lexical is not None or not bm25)
            ):
                return d
        with self._sync_lock:
            d = self.current
            with schema.snapshot(conn):
                generation = schema.generation(conn)
                max_id = int(conn.execute("SELECT COALESCE(MAX(id), 0) FROM paragraphs").fetchone()[0])
                # The removed-rows log only reaches REMOVED_LOG_KEEP generations back.
                stale = d.generation is None or generation - d.generation >= schema.REMOVED_LOG_KEEP
                load_m = (matrices or d.matrices is not None) and (d.matrices is None or stale)
                load_l = (bm25 or d.lexical is not None) and (
                    d.lexical is None or stale or d.lexical.needs_rebuild
                )
                new_m = self._load_matrices(conn) if load_m else None
                new_l = self._load_lexical(conn) if load_l else None
                catch_up = d.generation is not None and d.generation != generation
                removed = np.empty(0, dtype=np.int64)
                added_vectors: dict[str, tuple[IntArray, npt.NDArray[np.float32]]] = {}
                added_rows: list[LexicalRow] = []
                if catch_up:
                    removed = np.fromiter(
                        (
                            r[0]
                            for r in conn.execute(
                                "SELECT id FROM removed_log WHERE generation > ?", (d.generation,)
                            )
                        ),
                        dtype=np.int64,
                    )
                    removed.sort()
                    if d.matrices is not None and not load_m:
                        added_vectors = self._vectors_after(conn, d.max_id)
                    if d.lexical is not None and not load_l:
                        added_rows = self._lexical_after(conn, d.max_id)
            with self.state_lock:
                if catch_up:
                    if d.matrices is not None and not load_m:
                        for name, matrix in d.matrices.items():
                            matrix.remove(removed)
                            if name in added_vectors:
                                matrix.append(*added_vectors[name])
                    if d.lexical is not None and not load_l:
                        d.lexical.remove(removed)
                        d.lexical.add(added_rows)
                self.current = Derived(
                    generation=generation,
                    max_id=max_id,
                    matrices=new_m if new_m is not None else d.matrices,
                    lexical=new_l if new_l is not None else d.lexical,
                )
                if load_m or load_l:
                    logger.info(
                        "loaded %s from %s (generation %d)",
                        " and ".join(
                            n for n, f in (("vector matrices", load_m), ("BM25 index", load_l)) if f
                        ),
                        self._path,
                        generation,
                    )
                return self.current

    def _vectors_after(self, conn: sqlite3.Connection, after: int) -> dict[str, tuple[IntArray, Any]]:
        out: dict[str, tuple[IntArray, Any]] = {}
        for name, dim in self._dimensions.items():
            rows = conn.execute(
                "SELECT id, vector FROM vectors WHERE field = ? AND id > ? ORDER BY id", (name, after)
            ).fetchall()
            if rows:
                out[name] = self._decode_vectors(name, dim, rows)
        return out

    def _decode_vectors(self, name: str, dim: int, rows: Sequence[tuple[int, bytes]]) -> tuple[IntArray, Any]:
        blob = b"".join(r[1] for r in rows)
        if len(blob) != len(rows) * dim * 4:
            raise ConfigurationError(
                f"{self._path}: stored {name} vectors are not {dim}-dimensional; reindex"
            )
        ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
        return ids, np.frombuffer(blob, dtype="<f4").reshape(len(rows), dim)

    def _load_matrices(self, conn: sqlite3.Connection) -> dict[str, Matrix]:
        matrices: dict[str, Matrix] = {}
        for name, dim in self._dimensions.items():
            matrix = Matrix(dim)
            rows = conn.execute(
                "SELECT id, vector FROM vectors WHERE field = ? ORDER BY id", (name,)
            ).fetchall()
            if rows:
                matrix.append(*self._decode_vectors(name, dim, rows))
            matrices[name] = matrix
        return matrices

    def _lexical_after(self, conn: sqlite3.Connection, after: int) -> list[LexicalRow]:
        return [
            LexicalRow.from_blobs(row_id, t, f, ln, self._fields)
            for row_id, t, f, ln in conn.execute(
                "SELECT id, terms, tfs, lengths FROM paragraphs WHERE id > ? ORDER BY id", (after,)
            )
        ]

    def _load_lexical(self, conn: sqlite3.Connection) -> LexicalIndex:
        rows = conn.execute("SELECT id, terms, tfs, lengths FROM paragraphs ORDER BY id").fetchall()
        return LexicalIndex.from_blobs(rows, self._fields)
