"""The embedded store's SQLite file: its tables, one connection per thread, transactions, migrations."""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal, TypeVar

from ragbot.errors import ConfigurationError, StoreUnavailable

logger = logging.getLogger(__name__)

SCHEMA_VERSION = "1"
_T = TypeVar("_T")
# Filters on these go to the paragraphs table's own columns; the rest to filter_values.
COLUMNS = {"doc_id": "doc_id", "page_id": "page_id", "revision_id": "revision_id", "paragraph": "paragraph"}
_CHUNK = 500  # bound parameters per IN (...)
# Ids removed by each write are logged for this many generations, so that readers catch up without
# scanning every id; a reader further behind reloads its indices. Read as ``schema.REMOVED_LOG_KEEP``
# at call time (writes prune by it, ``catchup`` reloads by it), so one setting governs both.
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


def chunks(items: Sequence[_T], size: int = _CHUNK) -> Iterator[Sequence[_T]]:
    """Slices of at most ``size`` items, to keep each ``IN (...)`` under SQLite's parameter limit."""
    for start in range(0, len(items), size):
        yield items[start : start + size]


def marks(n: int) -> str:
    """``?, ?, ...``: n parameter placeholders."""
    return ", ".join("?" for _ in range(n))


def generation(conn: sqlite3.Connection) -> int:
    """The counter every write bumps; readers compare it with the one their indices reflect."""
    return int(conn.execute("SELECT value FROM generation WHERE id = 1").fetchone()[0])


@contextmanager
def snapshot(conn: sqlite3.Connection) -> Iterator[None]:
    """One read transaction: every SELECT inside sees the same committed state."""
    conn.execute("BEGIN")
    try:
        yield
    finally:
        if conn.in_transaction:
            conn.execute("COMMIT")


def create_schema(
    conn: sqlite3.Connection,
    *,
    path: Path,
    dimensions: Mapping[str, int],
    derived_from: Mapping[str, Any],
    rederive: Callable[[sqlite3.Connection], None],
) -> None:
    """Create the tables, refuse another schema version or vector dimension, and call ``rederive``
    when the text or filter fields the stored rows were derived from changed."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        for statement in _SCHEMA.split(";"):
            conn.execute(statement)
        meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
        version = meta.get("schema_version")
        if version not in (None, SCHEMA_VERSION):
            raise ConfigurationError(
                f"{path} has schema version {version}; this ragbot expects {SCHEMA_VERSION}"
            )
        dims = json.loads(meta.get("dimensions", "{}"))
        for name, dim in dimensions.items():
            if name in dims and dims[name] != dim:
                raise ConfigurationError(
                    f"{path}: vector field {name} was stored with {dims[name]} dimensions but "
                    f"the model gives {dim}; delete the file or reindex into a new one"
                )
        dims.update(dimensions)
        stored = json.loads(meta.get("derived_from", "null"))
        if stored is not None and stored != derived_from:
            rederive(conn)
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


class Database:
    """The SQLite file: a WAL connection per thread, the schema made once, writes serialised."""

    def __init__(
        self,
        *,
        path: Path,
        synchronous: Literal["NORMAL", "FULL"],
        busy_timeout_s: float,
        create: Callable[[sqlite3.Connection], None],
    ) -> None:
        self.path = path
        self._synchronous = synchronous
        self._busy_timeout_s = busy_timeout_s
        self._create = create
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._connections_lock = threading.Lock()
        self._schema_lock = threading.Lock()
        self._schema_ready = False
        self._write_lock = threading.Lock()
        self._closed = False

    def _connect(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(
            self.path, timeout=self._busy_timeout_s, isolation_level=None, check_same_thread=False
        )
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"PRAGMA synchronous={self._synchronous}")
        conn.execute("PRAGMA temp_store=MEMORY")
        conn.execute("PRAGMA cache_size=-32000")
        return conn

    def conn(self) -> sqlite3.Connection:
        """This thread's connection, opened (and the schema created) on first use."""
        if self._closed:
            raise StoreUnavailable("the embedded store is closed", dependency="embedded store")
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            # One thread at a time opens its connection: two threads setting WAL mode on a new file at
            # once get "database is locked" at once, busy timeout or not (a batch's first reads did).
            with self._schema_lock:
                conn = self._connect()
            self._local.conn = conn
            with self._connections_lock:
                self._connections.append(conn)
        if not self._schema_ready:
            with self._schema_lock:
                if not self._schema_ready:
                    self._create(conn)
                    self._schema_ready = True
        return conn

    async def run(self, fn: Callable[[], _T]) -> _T:
        """Run blocking SQLite work in a thread; SQLite's errors become ``StoreUnavailable``."""

        def call() -> _T:
            try:
                return fn()
            except sqlite3.OperationalError as exc:
                raise StoreUnavailable(
                    f"embedded store {self.path}: {exc}", dependency="embedded store"
                ) from exc
            except sqlite3.DatabaseError as exc:
                raise StoreUnavailable(
                    f"embedded store {self.path} is unreadable: {exc}", dependency="embedded store"
                ) from exc

        return await asyncio.to_thread(call)

    @contextmanager
    def write(self, conn: sqlite3.Connection) -> Iterator[int]:
        """One write transaction; yields the generation it commits, which readers watch."""
        with self._write_lock:
            conn.execute("BEGIN IMMEDIATE")
            try:
                committed = generation(conn) + 1
                yield committed
                conn.execute("UPDATE generation SET value = ? WHERE id = 1", (committed,))
                conn.execute("DELETE FROM removed_log WHERE generation <= ?", (committed - REMOVED_LOG_KEEP,))
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise

    def close(self) -> None:
        """Close every thread's connection; later calls raise ``StoreUnavailable``."""
        self._closed = True
        with self._connections_lock:
            connections, self._connections = self._connections, []
        for conn in connections:
            try:
                conn.close()
            except sqlite3.Error as exc:  # a connection busy in another thread: log, do not mask close
                logger.warning("closing an embedded store connection failed: %s", exc)
