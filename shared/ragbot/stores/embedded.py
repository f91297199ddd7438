"""The embedded store: one SQLite file (stdlib sqlite3, WAL) for one machine and no server.

* Source of truth, all in SQLite: ``paragraphs`` (ids, page, revision, paragraph number, JSON
  source, and the paragraph's lexical data: term ids, per-field term frequencies and field lengths
  of its ``ragbot.text.analyze`` tokens), ``terms`` (term -> id), ``vectors`` (one float32 BLOB per
  paragraph and vector field) and ``filter_values`` (the filterable fields, indexed).
* Searches run on indices derived in-process from those rows: an L2-normalised float32 matrix per
  vector field, with a float16 copy (exact cosine top-k: screened in float16, rescored in float32,
  ``stores.dense``) and a BM25 inverted index (``stores.lexical``).
  They load lazily on the first search of their kind. Every write bumps a generation counter in the
  same transaction; a search that finds a newer generation first catches up: rows with ids above
  the last one it holds are appended (ids come from AUTOINCREMENT, so they only grow) and the ids
  the writes removed, logged in ``removed_log`` by generation, are marked dead. This is how the
  writes of another process (the embedder worker) reach a reader (the retriever) without a reload;
  a full reload happens only when dead rows or patches pile up, or a reader fell too far behind.
* A page replace is one transaction (delete the page's rows, insert the revision's), so a reader, or
  a crash (kill -9), sees the old or the new revision, never a mix or a gap.
* Blocking SQLite work runs in threads (``asyncio.to_thread``), one connection per thread.

Why not FTS5 for BM25: measured at 100k paragraphs (docs/decisions/0001-embedded-store.md), FTS5's
``bm25()`` scores every matching row through a callback, so queries with common words took
100-350 ms; the numpy index scores the same postings in a few milliseconds and uses Lucene's BM25
formula, as Elasticsearch does.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar

import numpy as np
import numpy.typing as npt

from ragbot.definition import DocumentDefinition
from ragbot.errors import ConfigurationError, StoreUnavailable
from ragbot.ports import Filters, PageWrite, SearchHit, StoredParagraph, Vector
from ragbot.schemas.pages import PageState
from ragbot.stores import lexical
from ragbot.stores.common import (
    FILTERABLE_TYPES,
    INTEGER_TYPES,
    Filter,
    analyzed_text,
    bm25_fields,
    check_k,
    check_knn_query,
    check_window,
    dumps_source,
    parse_last_update,
    prepare_writes,
    query_tokens,
    strip_internal,
    text_fields_of,
    validate_filters,
)
from ragbot.stores.dense import screened_scores
from ragbot.stores.lexical import LexicalIndex, LexicalRow, positions_of, top_positions

logger = logging.getLogger(__name__)

SCHEMA_VERSION = "1"
_T = TypeVar("_T")
_IntArray = npt.NDArray[np.int64]
# Filters on these go to the paragraphs table's own columns; the rest to filter_values.
_COLUMNS = {"doc_id": "doc_id", "page_id": "page_id", "revision_id": "revision_id", "paragraph": "paragraph"}
_CHUNK = 500  # bound parameters per IN (...)
# Ids removed by each write are logged for this many generations, so that readers catch up without
# scanning every id; a reader further behind reloads its indices.
REMOVED_LOG_KEEP = 10_000

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS generation (id INTEGER PRIMARY KEY CHECK (id = 1), value INTEGER NOT NULL);
INSERT OR IGNORE INTO generation (id, value) VALUES (1, 0);
CREATE TABLE IF NOT EXISTS paragraphs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    doc_id TEXT NOT NULL UNIQUE,
    page_id INTEGER NOT NULL,
    revision_id INTEGER NOT NULL,
    paragraph INTEGER NOT NULL,
    source TEXT NOT NULL,
    terms BLOB NOT NULL,
    tfs BLOB NOT NULL,
    lengths BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS paragraphs_by_page ON paragraphs (page_id, paragraph);
CREATE TABLE IF NOT EXISTS terms (id INTEGER PRIMARY KEY, term TEXT NOT NULL UNIQUE);
CREATE TABLE IF NOT EXISTS vectors (
    field TEXT NOT NULL,
    id INTEGER NOT NULL,
    vector BLOB NOT NULL,
    PRIMARY KEY (field, id)
);
CREATE INDEX IF NOT EXISTS vectors_by_id ON vectors (id);
CREATE TABLE IF NOT EXISTS filter_values (field TEXT NOT NULL, value NOT NULL, id INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS filter_values_by_value ON filter_values (field, value, id);
CREATE INDEX IF NOT EXISTS filter_values_by_id ON filter_values (id);
CREATE TABLE IF NOT EXISTS removed_log (generation INTEGER NOT NULL, id INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS removed_log_by_generation ON removed_log (generation)
"""


def _chunks(items: Sequence[_T], size: int = _CHUNK) -> Iterator[Sequence[_T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _marks(n: int) -> str:
    return ", ".join("?" for _ in range(n))


@dataclass
class _Matrix:
    """One vector field's rows: ids ascending (AUTOINCREMENT never reuses one), unit vectors, liveness.

    ``half`` is a float16 copy of ``vecs`` for the screened exact search (``ragbot.stores.dense``).
    """

    # Compact when dead rows exceed max(compact_min, a quarter of the rows).
    compact_min: ClassVar[int] = 1024

    dim: int
    ids: _IntArray = field(init=False)
    vecs: npt.NDArray[np.float32] = field(init=False)
    half: npt.NDArray[np.float16] = field(init=False)
    alive: npt.NDArray[np.bool_] = field(init=False)
    size: int = 0
    dead: int = 0

    def __post_init__(self) -> None:
        self.ids = np.empty(0, dtype=np.int64)
        self.vecs = np.empty((0, self.dim), dtype=np.float32)
        self.half = np.empty((0, self.dim), dtype=np.float16)
        self.alive = np.empty(0, dtype=np.bool_)

    def append(self, ids: _IntArray, vecs: npt.NDArray[np.float32]) -> None:
        n = len(ids)
        if n == 0:
            return
        if self.size + n > len(self.ids):
            # 25% headroom: the matrices are the store's biggest memory cost; growing copies them.
            cap = max(1024, (self.size + n) * 5 // 4)
            new_ids = np.empty(cap, dtype=np.int64)
            new_vecs = np.empty((cap, self.dim), dtype=np.float32)
            new_half = np.empty((cap, self.dim), dtype=np.float16)
            new_alive = np.zeros(cap, dtype=np.bool_)
            new_ids[: self.size] = self.ids[: self.size]
            new_vecs[: self.size] = self.vecs[: self.size]
            new_half[: self.size] = self.half[: self.size]
            new_alive[: self.size] = self.alive[: self.size]
            self.ids, self.vecs, self.half, self.alive = new_ids, new_vecs, new_half, new_alive
        end = self.size + n
        norms = np.linalg.norm(vecs, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        self.ids[self.size : end] = ids
        self.vecs[self.size : end] = vecs / norms
        self.half[self.size : end] = self.vecs[self.size : end]
        self.alive[self.size : end] = True
        self.size = end

    def remove(self, ids: _IntArray) -> None:
        pos = positions_of(self.ids[: self.size], ids)
        pos = pos[self.alive[pos]]
        self.alive[pos] = False
        self.dead += len(pos)
        if self.dead > max(self.compact_min, self.size // 4):
            keep = np.flatnonzero(self.alive[: self.size])
            self.ids, self.vecs, self.alive = self.ids[keep], self.vecs[keep], self.alive[keep]
            self.half = self.half[keep]
            self.size, self.dead = len(keep), 0

    def view(self) -> _View:
        """Arrays to search without the owner's lock (appends never move rows below ``size``)."""
        n = self.size
        return self.ids[:n], self.vecs[:n], self.half[:n], self.alive[:n], self.dead


_View = tuple[_IntArray, npt.NDArray[np.float32], npt.NDArray[np.float16], npt.NDArray[np.bool_], int]


def _top_k(
    view: _View, query: npt.NDArray[np.float32], k: int, allowed: _IntArray | None
) -> list[tuple[int, float]]:
    """Exact top-k (id, cosine) among live rows, optionally only among ``allowed`` ids."""
    ids, vecs, half, alive, dead = view
    if allowed is not None and len(allowed) * 4 < len(ids):
        pos = positions_of(ids, allowed)
        pos = pos[alive[pos]]
        scores = vecs[pos] @ query
        cand = ids[pos]
    else:
        mask: npt.NDArray[np.bool_] | None = alive if dead else None
        if allowed is not None:
            mask = np.zeros(len(ids), dtype=np.bool_)
            mask[positions_of(ids, allowed)] = True
            mask &= alive
        pos, scores = screened_scores(vecs, half, query, k, mask)
        cand = ids[pos]
    finite = np.flatnonzero(np.isfinite(scores))
    if len(finite) < len(scores):
        scores, cand = scores[finite], cand[finite]
    return [(int(cand[i]), float(scores[i])) for i in top_positions(scores, cand, k)]


@dataclass
class _Derived:
    """The in-process indices and the database state they reflect."""

    generation: int | None = None
    max_id: int = 0
    matrices: dict[str, _Matrix] | None = None
    lexical: LexicalIndex | None = None


@dataclass(frozen=True, slots=True)
class _Analyzed:
    """What a paragraph's source contributes besides itself: terms, field lengths, filter values."""

    counts: dict[str, list[int]]  # term -> tf per text field
    lengths: list[int]
    filters: list[tuple[str, str | int]]


class EmbeddedStore:
    """SearchStore over one SQLite file; see the module docstring for the layout and guarantees."""

    def __init__(
        self,
        *,
        path: Path,
        definition: DocumentDefinition,
        dimensions: Mapping[str, int],
        synchronous: Literal["NORMAL", "FULL"] = "NORMAL",
        busy_timeout_s: float = 10.0,
    ) -> None:
        # ``dimensions`` may be partial (a reader of page state needs none); writes and searches of a
        # vector field without a known dimension are refused.
        self._path = Path(path)
        self._definition = definition
        self._dimensions = dict(dimensions)
        self._synchronous = synchronous
        self._busy_timeout_s = busy_timeout_s
        self._text_fields = text_fields_of(definition)
        self._filter_fields = {
            name: ftype
            for name, ftype in definition.all_fields.items()
            if ftype in FILTERABLE_TYPES and name not in _COLUMNS
        }
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._connections_lock = threading.Lock()
        self._schema_lock = threading.Lock()
        self._schema_ready = False
        self._write_lock = threading.Lock()
        self._sync_lock = threading.Lock()
        self._state_lock = threading.Lock()
        self._derived = _Derived()
        self._closed = False

    # ---- plumbing -------------------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        self._path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(
            self._path, timeout=self._busy_timeout_s, isolation_level=None, check_same_thread=False
        )
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"PRAGMA synchronous={self._synchronous}")
        conn.execute("PRAGMA temp_store=MEMORY")
        conn.execute("PRAGMA cache_size=-32000")
        return conn

    def _conn(self) -> sqlite3.Connection:
        if self._closed:
            raise StoreUnavailable("the embedded store is closed", dependency="embedded store")
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._connect()
            self._local.conn = conn
            with self._connections_lock:
                self._connections.append(conn)
        if not self._schema_ready:
            with self._schema_lock:
                if not self._schema_ready:
                    self._create_schema(conn)
                    self._schema_ready = True
        return conn

    async def _run(self, fn: Callable[[], _T]) -> _T:
        def call() -> _T:
            try:
                return fn()
            except sqlite3.OperationalError as exc:
                raise StoreUnavailable(
                    f"embedded store {self._path}: {exc}", dependency="embedded store"
                ) from exc
            except sqlite3.DatabaseError as exc:
                raise StoreUnavailable(
                    f"embedded store {self._path} is unreadable: {exc}", dependency="embedded store"
                ) from exc

        return await asyncio.to_thread(call)

    @contextmanager
    def _write(self, conn: sqlite3.Connection) -> Iterator[int]:
        """One write transaction; yields the generation it commits, which readers watch."""
        with self._write_lock:
            conn.execute("BEGIN IMMEDIATE")
            try:
                generation = self._generation(conn) + 1
                yield generation
                conn.execute("UPDATE generation SET value = ? WHERE id = 1", (generation,))
                conn.execute(
                    "DELETE FROM removed_log WHERE generation <= ?", (generation - REMOVED_LOG_KEEP,)
                )
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise

    @contextmanager
    def _snapshot(self, conn: sqlite3.Connection) -> Iterator[None]:
        """One read transaction: every SELECT inside sees the same committed state."""
        conn.execute("BEGIN")
        try:
            yield
        finally:
            if conn.in_transaction:
                conn.execute("COMMIT")

    def _create_schema(self, conn: sqlite3.Connection) -> None:
        conn.execute("BEGIN IMMEDIATE")
        try:
            for statement in _SCHEMA.split(";"):
                conn.execute(statement)
            meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
            version = meta.get("schema_version")
            if version not in (None, SCHEMA_VERSION):
                raise ConfigurationError(
                    f"{self._path} has schema version {version}; this ragbot expects {SCHEMA_VERSION}"
                )
            dims = json.loads(meta.get("dimensions", "{}"))
            for name, dim in self._dimensions.items():
                if name in dims and dims[name] != dim:
                    raise ConfigurationError(
                        f"{self._path}: vector field {name} was stored with {dims[name]} dimensions but "
                        f"the model gives {dim}; delete the file or reindex into a new one"
                    )
            dims.update(self._dimensions)
            derived_from = {"text_fields": list(self._text_fields), "filter_fields": self._filter_fields}
            stored = json.loads(meta.get("derived_from", "null"))
            if stored is not None and stored != derived_from:
                self._rederive(conn)
            conn.executemany(
                "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
                [
                    ("schema_version", SCHEMA_VERSION),
                    ("dimensions", json.dumps(dims, sort_keys=True)),
                    ("derived_from", json.dumps(derived_from, sort_keys=True)),
                ],
            )
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    def _rederive(self, conn: sqlite3.Connection) -> None:
        """The definition's text or filter fields changed: recompute lexical data and filter rows."""
        logger.warning(
            "text or filter fields changed; re-deriving the BM25 and filter data of %s", self._path
        )
        conn.execute("DELETE FROM filter_values")
        rows = conn.execute("SELECT id, source FROM paragraphs").fetchall()
        for start in range(0, len(rows), 1000):
            batch = [(row_id, self._analyze(json.loads(src))) for row_id, src in rows[start : start + 1000]]
            ids = self._term_ids(conn, {t for _, a in batch for t in a.counts})
            for row_id, analyzed in batch:
                blobs = self._encode(analyzed, ids)
                conn.execute(
                    "UPDATE paragraphs SET terms = ?, tfs = ?, lengths = ? WHERE id = ?", (*blobs, row_id)
                )
                self._insert_filters(conn, row_id, analyzed)
        conn.execute("UPDATE generation SET value = value + 1 WHERE id = 1")

    # ---- what a paragraph contributes -------------------------------------------------------------

    def _analyze(self, source: Mapping[str, Any]) -> _Analyzed:
        n = len(self._text_fields)
        counts: dict[str, list[int]] = {}
        lengths: list[int] = []
        for i, name in enumerate(self._text_fields):
            tokens = analyzed_text(source.get(name)).split()
            lengths.append(len(tokens))
            for term, tf in Counter(tokens).items():
                counts.setdefault(term, [0] * n)[i] = tf
        filters: list[tuple[str, str | int]] = []
        for name, ftype in self._filter_fields.items():
            raw = source.get(name)
            for value in raw if isinstance(raw, list) else [raw]:
                stored = _filter_value(ftype, value)
                if stored is not None:
                    filters.append((name, stored))
        return _Analyzed(counts, lengths, filters)

    @staticmethod
    def _term_ids(conn: sqlite3.Connection, terms: Iterable[str]) -> dict[str, int]:
        """Ids of the terms, creating the missing ones (inside the caller's write transaction)."""
        wanted = sorted(set(terms))
        ids: dict[str, int] = {}
        for chunk in _chunks(wanted):
            ids.update(
                conn.execute(f"SELECT term, id FROM terms WHERE term IN ({_marks(len(chunk))})", chunk)
            )
        for term in wanted:
            if term not in ids:
                ids[term] = int(conn.execute("INSERT INTO terms (term) VALUES (?)", (term,)).lastrowid or 0)
        return ids

    @staticmethod
    def _encode(analyzed: _Analyzed, ids: Mapping[str, int]) -> tuple[bytes, bytes, bytes]:
        terms = list(analyzed.counts)
        return lexical.encode([ids[t] for t in terms], [analyzed.counts[t] for t in terms], analyzed.lengths)

    @staticmethod
    def _insert_filters(conn: sqlite3.Connection, row_id: int, analyzed: _Analyzed) -> None:
        conn.executemany(
            "INSERT INTO filter_values (field, value, id) VALUES (?, ?, ?)",
            [(name, value, row_id) for name, value in analyzed.filters],
        )

    # ---- derived in-process indices ---------------------------------------------------------------

    def _generation(self, conn: sqlite3.Connection) -> int:
        return int(conn.execute("SELECT value FROM generation WHERE id = 1").fetchone()[0])

    def _sync(self, conn: sqlite3.Connection, *, matrices: bool = False, bm25: bool = False) -> _Derived:
        """The derived indices, loaded or caught up to the latest committed write."""
        generation = self._generation(conn)
        with self._state_lock:
            d = self._derived
            if (
                d.generation == generation
                and (d.matrices is not None or not matrices)
                and (d.lexical is not None or not bm25)
            ):
                return d
        with self._sync_lock:
            d = self._derived
            with self._snapshot(conn):
                generation = self._generation(conn)
                max_id = int(conn.execute("SELECT COALESCE(MAX(id), 0) FROM paragraphs").fetchone()[0])
                # The removed-rows log only reaches REMOVED_LOG_KEEP generations back.
                stale = d.generation is None or generation - d.generation >= REMOVED_LOG_KEEP
                load_m = (matrices or d.matrices is not None) and (d.matrices is None or stale)
                load_l = (bm25 or d.lexical is not None) and (
                    d.lexical is None or stale or d.lexical.needs_rebuild
                )
                new_m = self._load_matrices(conn) if load_m else None
                new_l = self._load_lexical(conn) if load_l else None
                catch_up = d.generation is not None and d.generation != generation
                removed = np.empty(0, dtype=np.int64)
                added_vectors: dict[str, tuple[_IntArray, npt.NDArray[np.float32]]] = {}
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
            with self._state_lock:
                if catch_up:
                    if d.matrices is not None and not load_m:
                        for name, matrix in d.matrices.items():
                            matrix.remove(removed)
                            if name in added_vectors:
                                matrix.append(*added_vectors[name])
                    if d.lexical is not None and not load_l:
                        d.lexical.remove(removed)
                        d.lexical.add(added_rows)
                self._derived = _Derived(
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
                return self._derived

    def _vectors_after(self, conn: sqlite3.Connection, after: int) -> dict[str, tuple[_IntArray, Any]]:
        out: dict[str, tuple[_IntArray, Any]] = {}
        for name, dim in self._dimensions.items():
            rows = conn.execute(
                "SELECT id, vector FROM vectors WHERE field = ? AND id > ? ORDER BY id", (name, after)
            ).fetchall()
            if rows:
                out[name] = self._decode_vectors(name, dim, rows)
        return out

    def _decode_vectors(
        self, name: str, dim: int, rows: Sequence[tuple[int, bytes]]
    ) -> tuple[_IntArray, Any]:
        blob = b"".join(r[1] for r in rows)
        if len(blob) != len(rows) * dim * 4:
            raise ConfigurationError(
                f"{self._path}: stored {name} vectors are not {dim}-dimensional; reindex"
            )
        ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
        return ids, np.frombuffer(blob, dtype="<f4").reshape(len(rows), dim)

    def _load_matrices(self, conn: sqlite3.Connection) -> dict[str, _Matrix]:
        matrices: dict[str, _Matrix] = {}
        for name, dim in self._dimensions.items():
            matrix = _Matrix(dim)
            rows = conn.execute(
                "SELECT id, vector FROM vectors WHERE field = ? ORDER BY id", (name,)
            ).fetchall()
            if rows:
                matrix.append(*self._decode_vectors(name, dim, rows))
            matrices[name] = matrix
        return matrices

    def _lexical_after(self, conn: sqlite3.Connection, after: int) -> list[LexicalRow]:
        n = len(self._text_fields)
        return [
            LexicalRow.from_blobs(row_id, t, f, ln, n)
            for row_id, t, f, ln in conn.execute(
                "SELECT id, terms, tfs, lengths FROM paragraphs WHERE id > ? ORDER BY id", (after,)
            )
        ]

    def _load_lexical(self, conn: sqlite3.Connection) -> LexicalIndex:
        rows = conn.execute("SELECT id, terms, tfs, lengths FROM paragraphs ORDER BY id").fetchall()
        return LexicalIndex.from_blobs(rows, len(self._text_fields))

    # ---- SearchStore ----------------------------------------------------------------------------

    async def ensure_ready(self) -> None:
        """Create the file and tables if missing (idempotent)."""

        def ready() -> None:
            self._conn()

        await self._run(ready)

    async def warm_up(self) -> None:
        """Build the vector matrices and the BM25 index now, not in the first query (100k paragraphs:
        seconds, more than a query's store timeout)."""
        await self._run(lambda: self._sync(self._conn(), matrices=True, bm25=True))

    async def ping(self) -> bool:
        """True when the file can be read."""
        try:
            await self._run(lambda: self._conn().execute("SELECT 1").fetchone())
        except (StoreUnavailable, ConfigurationError):
            return False
        return True

    async def replace_page(
        self, *, page_id: int, revision_id: int, paragraphs: Sequence[StoredParagraph]
    ) -> None:
        """Drop the page's rows and insert the revision's in one transaction: old or new, never a mix."""
        failed = await self.replace_pages([PageWrite(page_id, revision_id, paragraphs)])
        if page_id in failed:
            raise failed[page_id]

    async def replace_pages(self, writes: Sequence[PageWrite]) -> dict[int, Exception]:
        """Replace each page as ``replace_page`` does, all in one transaction; returns the pages refused."""
        ready, failed = prepare_writes(writes, dimensions=self._dimensions, definition=self._definition)
        if ready:
            await self._run(lambda: self._replace_many_sync(list(ready.items())))
        return failed

    def _replace_many_sync(
        self, pages: Sequence[tuple[int, Sequence[tuple[StoredParagraph, dict[str, Any]]]]]
    ) -> None:
        """Drop each page's rows and insert its revision's, all pages in one transaction (one
        generation, one term lookup): a reader sees every page old or new, never a mix."""
        conn = self._conn()
        analyzed = [[self._analyze(source) for _, source in prepared] for _, prepared in pages]
        with self._write(conn) as generation:
            ids = self._term_ids(conn, {t for page in analyzed for a in page for t in a.counts})
            for (page_id, prepared), page_analyzed in zip(pages, analyzed, strict=True):
                self._delete_rows(conn, page_id, generation)
                for (p, source), a in zip(prepared, page_analyzed, strict=True):
                    cur = conn.execute(
                        "INSERT INTO paragraphs "
                        "(doc_id, page_id, revision_id, paragraph, source, terms, tfs, lengths) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                        (
                            p.doc_id,
                            p.page_id,
                            p.revision_id,
                            p.paragraph,
                            dumps_source(source),
                            *self._encode(a, ids),
                        ),
                    )
                    row_id = int(cur.lastrowid or 0)
                    vectors = [
                        (n, row_id, np.asarray(v, dtype="<f4").tobytes()) for n, v in p.vectors.items()
                    ]
                    conn.executemany("INSERT INTO vectors (field, id, vector) VALUES (?, ?, ?)", vectors)
                    self._insert_filters(conn, row_id, a)

    @staticmethod
    def _delete_rows(conn: sqlite3.Connection, page_id: int, generation: int) -> int:
        sub = "SELECT id FROM paragraphs WHERE page_id = ?"
        conn.execute(
            f"INSERT INTO removed_log (generation, id) SELECT ?, id FROM ({sub})", (generation, page_id)
        )
        conn.execute(f"DELETE FROM vectors WHERE id IN ({sub})", (page_id,))
        conn.execute(f"DELETE FROM filter_values WHERE id IN ({sub})", (page_id,))
        return conn.execute("DELETE FROM paragraphs WHERE page_id = ?", (page_id,)).rowcount

    async def delete_page(self, *, page_id: int) -> int:
        """Remove every paragraph of the page; returns how many went."""

        def delete() -> int:
            conn = self._conn()
            with self._write(conn) as generation:
                return self._delete_rows(conn, page_id, generation)

        return await self._run(delete)

    async def page_state(self, *, page_id: int) -> PageState | None:
        """The page's revision, paragraph count, paragraphs per model, last update and title."""

        def state() -> PageState | None:
            conn = self._conn()
            with self._snapshot(conn):
                row = conn.execute(
                    "SELECT MAX(revision_id) FROM paragraphs WHERE page_id = ?", (page_id,)
                ).fetchone()
                if row is None or row[0] is None:
                    return None
                revision = int(row[0])
                rows = conn.execute(
                    "SELECT id, source FROM paragraphs WHERE page_id = ? AND revision_id = ? "
                    "ORDER BY paragraph",
                    (page_id, revision),
                ).fetchall()
                have: dict[str, set[int]] = {}
                for name, pid in conn.execute(
                    "SELECT v.field, v.id FROM vectors v JOIN paragraphs p ON p.id = v.id "
                    "WHERE p.page_id = ? AND p.revision_id = ?",
                    (page_id, revision),
                ):
                    have.setdefault(name, set()).add(pid)
            sources = [json.loads(src) for _, src in rows]
            ids = {pid for pid, _ in rows}
            per_model = {}
            for model in self._definition.model_names:
                fields = [v.name for v in self._definition.vector_fields_for(model)]
                per_model[model] = len(set.intersection(ids, *(have.get(f, set()) for f in fields)))
            updates = [u for u in (parse_last_update(s.get("last_update")) for s in sources) if u]
            title = sources[0].get("title") if sources else None
            return PageState(
                page_id=page_id,
                revision_id=revision,
                paragraphs=len(rows),
                paragraphs_per_model=per_model,
                last_update=max(updates) if updates else None,
                title=str(title) if title is not None else None,
            )

        return await self._run(state)

    async def list_pages(self, *, limit: int = 100, offset: int = 0) -> list[PageState]:
        """Pages by ascending id: one grouped scan picks the window, then its rows' titles and dates."""
        check_window(limit=limit, offset=offset)

        def fetch() -> list[PageState]:
            conn = self._conn()
            with self._snapshot(conn):
                window = conn.execute(
                    "SELECT page_id, MAX(revision_id) FROM paragraphs GROUP BY page_id "
                    "ORDER BY page_id LIMIT ? OFFSET ?",
                    (limit, offset),
                ).fetchall()
                rows: list[tuple[int, int, int, Any, Any]] = []
                for chunk in _chunks([page_id for page_id, _ in window]):
                    rows.extend(
                        conn.execute(
                            "SELECT page_id, revision_id, paragraph, json_extract(source, '$.title'), "
                            "json_extract(source, '$.last_update') FROM paragraphs "
                            f"WHERE page_id IN ({_marks(len(chunk))})",
                            chunk,
                        ).fetchall()
                    )
            return _page_states(window, rows)

        return await self._run(fetch)

    async def page_paragraphs(self, *, page_id: int) -> list[SearchHit]:
        """Every paragraph of the page in paragraph order (score 0)."""

        def fetch() -> list[SearchHit]:
            rows = self._conn().execute(
                "SELECT doc_id, source FROM paragraphs WHERE page_id = ? ORDER BY paragraph", (page_id,)
            )
            return [SearchHit(doc_id=d, score=0.0, source=strip_internal(json.loads(s))) for d, s in rows]

        return await self._run(fetch)

    def _allowed(self, conn: sqlite3.Connection, filters: Sequence[Filter]) -> _IntArray:
        """Ascending ids of the paragraphs that pass every filter (an indexed lookup per filter)."""
        clauses: list[str] = []
        params: list[Any] = []
        for f in filters:
            if not f.values:
                return np.empty(0, dtype=np.int64)
            values = [int(v) if isinstance(v, bool) else v for v in f.values]
            if f.field in _COLUMNS:
                clauses.append(f"{_COLUMNS[f.field]} IN ({_marks(len(values))})")
                params.extend(values)
            else:
                marks = _marks(len(values))
                clauses.append(f"id IN (SELECT id FROM filter_values WHERE field = ? AND value IN ({marks}))")
                params.extend([f.field, *values])
        sql = f"SELECT id FROM paragraphs WHERE {' AND '.join(clauses)}"
        ids = np.fromiter((r[0] for r in conn.execute(sql, params)), dtype=np.int64)
        ids.sort()
        return ids

    def _hits(self, conn: sqlite3.Connection, scored: Sequence[tuple[int, float]]) -> list[SearchHit]:
        if not scored:
            return []
        rows = conn.execute(
            f"SELECT id, doc_id, source FROM paragraphs WHERE id IN ({_marks(len(scored))})",
            [i for i, _ in scored],
        ).fetchall()
        by_id = {r[0]: r for r in rows}
        hits = []
        for row_id, score in scored:
            row = by_id.get(row_id)
            if row is not None:  # deleted by another writer since the indices caught up
                hits.append(SearchHit(doc_id=row[1], score=score, source=strip_internal(json.loads(row[2]))))
        return hits

    async def knn(
        self, *, vector_field: str, vector: Vector, k: int, filters: Filters | None = None
    ) -> list[SearchHit]:
        """Exact top-k by cosine over the field's matrix; score is cosine + 1 (0..2)."""
        checked = check_knn_query(
            vector_field=vector_field,
            vector=vector,
            k=k,
            filters=filters,
            dimensions=self._dimensions,
            definition=self._definition,
        )
        query = np.asarray(vector, dtype=np.float32)
        query = query / np.float32(np.linalg.norm(query))

        def search() -> list[SearchHit]:
            conn = self._conn()
            derived = self._sync(conn, matrices=True)
            assert derived.matrices is not None
            with self._state_lock:
                view = derived.matrices[vector_field].view()
            allowed = self._allowed(conn, checked) if checked else None
            top = _top_k(view, query, k, allowed)
            return self._hits(conn, [(i, min(2.0, max(0.0, s + 1.0))) for i, s in top])

        return await self._run(search)

    async def bm25(
        self, *, query: str, k: int, fields: Sequence[str] | None = None, filters: Filters | None = None
    ) -> list[SearchHit]:
        """Top-k by BM25F (Lucene's formula, k1 1.2, b 0.75) over the analyzed text fields."""
        check_k(k)
        weighted = dict(bm25_fields(fields, text_fields=self._text_fields))
        weights = np.asarray([weighted.get(f, 0.0) for f in self._text_fields], dtype=np.float32)
        checked = validate_filters(filters, definition=self._definition)
        tokens = query_tokens(query)
        if not tokens:
            return []

        def search() -> list[SearchHit]:
            conn = self._conn()
            derived = self._sync(conn, bm25=True)
            assert derived.lexical is not None
            known = dict(
                conn.execute(f"SELECT term, id FROM terms WHERE term IN ({_marks(len(tokens))})", tokens)
            )
            term_ids = [int(known[t]) for t in tokens if t in known]
            if not term_ids:
                return []
            with self._state_lock:
                view = derived.lexical.view()
            allowed = self._allowed(conn, checked) if checked else None
            top = lexical.search(view, terms=term_ids, weights=weights, k=k, allowed=allowed)
            return self._hits(conn, top)

        return await self._run(search)

    async def get(self, *, doc_ids: Sequence[str]) -> list[SearchHit]:
        """Paragraphs by id, in the order asked, missing ones left out."""
        wanted = list(dict.fromkeys(doc_ids))
        if not wanted:
            return []

        def fetch() -> list[SearchHit]:
            conn = self._conn()
            found: dict[str, str] = {}
            for chunk in _chunks(wanted):
                found.update(
                    conn.execute(
                        f"SELECT doc_id, source FROM paragraphs WHERE doc_id IN ({_marks(len(chunk))})", chunk
                    ).fetchall()
                )
            return [
                SearchHit(doc_id=d, score=0.0, source=strip_internal(json.loads(found[d])))
                for d in wanted
                if d in found
            ]

        return await self._run(fetch)

    async def count(self) -> int:
        """Number of paragraphs stored."""
        return await self._run(
            lambda: int(self._conn().execute("SELECT COUNT(*) FROM paragraphs").fetchone()[0])
        )

    async def close(self) -> None:
        """Close every thread's connection and drop the derived indices."""
        self._closed = True
        with self._connections_lock:
            connections, self._connections = self._connections, []
        for conn in connections:
            try:
                conn.close()
            except sqlite3.Error as exc:  # a connection busy in another thread: log, do not mask close
                logger.warning("closing an embedded store connection failed: %s", exc)
        with self._state_lock:
            self._derived = _Derived()


def _page_states(
    window: Sequence[tuple[int, int]], rows: Iterable[tuple[int, int, int, Any, Any]]
) -> list[PageState]:
    """PageStates of the listed (page, revision) pairs from their paragraphs' titles and dates."""
    newest = dict(window)
    counts: Counter[int] = Counter()
    first: dict[int, tuple[int, Any]] = {}
    updates: dict[int, list[datetime]] = {}
    for page_id, revision_id, number, title, last_update in rows:
        if revision_id != newest.get(page_id):  # only the newest revision counts, as in page_state
            continue
        counts[page_id] += 1
        if page_id not in first or number < first[page_id][0]:
            first[page_id] = (number, title)
        parsed = parse_last_update(last_update)
        if parsed is not None:
            updates.setdefault(page_id, []).append(parsed)
    states = []
    for page_id, revision_id in window:
        title = first.get(page_id, (0, None))[1]
        dates = updates.get(page_id)
        states.append(
            PageState(
                page_id=int(page_id),
                revision_id=int(revision_id),
                paragraphs=counts[page_id],
                last_update=max(dates) if dates else None,
                title=str(title) if title is not None else None,
            )
        )
    return states


def _filter_value(ftype: str, value: Any) -> str | int | None:
    """A source value as filter_values stores it (as Elasticsearch would index it), or None to skip."""
    if value is None or isinstance(value, dict | list):
        return None
    if ftype == "boolean":
        if isinstance(value, bool):
            return int(value)
        if isinstance(value, str) and value in ("true", "false"):
            return int(value == "true")
        return None
    if ftype in INTEGER_TYPES:
        if isinstance(value, bool):
            return None
        try:
            return int(value)
        except (TypeError, ValueError):
            return None
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
