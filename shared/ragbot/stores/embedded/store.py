"""``EmbeddedStore``: the ``SearchStore`` port over one SQLite file, composed of the file
(``schema``), its writes (``writes``), page reads (``pages``) and the in-process indices (``catchup``)."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from ragbot.definition import DocumentDefinition
from ragbot.errors import ConfigurationError, StoreUnavailable
from ragbot.observability.spans import span
from ragbot.ports import Filters, PageWrite, SearchHit, StoredParagraph, Vector
from ragbot.schemas.pages import PageState
from ragbot.stores import lexical
from ragbot.stores.common import (
    FILTERABLE_TYPES,
    Filter,
    bm25_fields,
    check_k,
    check_knn_query,
    check_window,
    prepare_writes,
    query_tokens,
    strip_internal,
    text_fields_of,
    validate_filters,
)
from ragbot.stores.dense import SCREEN_MIN_ROWS, screen_available
from ragbot.stores.embedded import pages
from ragbot.stores.embedded.catchup import Derived, DerivedIndexes
from ragbot.stores.embedded.matrix import IntArray, top_k
from ragbot.stores.embedded.schema import COLUMNS, Database, chunks, create_schema, marks
from ragbot.stores.embedded.writes import Analyzer, PreparedPage, delete_rows, rederive, replace_rows


class EmbeddedStore:
    """SearchStore over one SQLite file; see the package docstring for the layout and guarantees."""

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
        self._text_fields = text_fields_of(definition)
        self._analyzer = Analyzer(
            text_fields=self._text_fields,
            filter_fields={
                name: ftype
                for name, ftype in definition.all_fields.items()
                if ftype in FILTERABLE_TYPES and name not in COLUMNS
            },
        )
        self._db = Database(
            path=self._path,
            synchronous=synchronous,
            busy_timeout_s=busy_timeout_s,
            create=self._create_schema,
        )
        self._indexes = DerivedIndexes(
            path=self._path, dimensions=self._dimensions, text_fields=len(self._text_fields)
        )

    @property
    def _derived(self) -> Derived:
        """The derived indices as last synced (what a search would use)."""
        return self._indexes.current

    def _create_schema(self, conn: sqlite3.Connection) -> None:
        create_schema(
            conn,
            path=self._path,
            dimensions=self._dimensions,
            derived_from={
                "text_fields": list(self._text_fields),
                "filter_fields": dict(self._analyzer.filter_fields),
            },
            rederive=lambda c: rederive(c, analyzer=self._analyzer, path=self._path),
        )

    # ---- SearchStore ----------------------------------------------------------------------------

    async def ensure_ready(self) -> None:
        """Create the file and tables if missing (idempotent)."""

        def ready() -> None:
            self._db.conn()

        await self._db.run(ready)

    async def warm_up(self) -> None:
        """Build the vector matrices and the BM25 index now, not in the first query (100k paragraphs:
        seconds, more than a query's store timeout); import torch now when a matrix is big enough to
        screen (its first import takes seconds too)."""
        derived = await self._db.run(lambda: self._indexes.sync(self._db.conn(), matrices=True, bm25=True))
        if any(m.size >= SCREEN_MIN_ROWS for m in (derived.matrices or {}).values()):
            await asyncio.to_thread(screen_available)

    async def ping(self) -> bool:
        """True when the file can be read."""
        try:
            await self._db.run(lambda: self._db.conn().execute("SELECT 1").fetchone())
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
            with span("embedded replace_pages", _db_attributes("replace_pages", pages=len(ready))):
                await self._db.run(lambda: self._replace_many_sync(list(ready.items())))
        return failed

    def _replace_many_sync(self, prepared: Sequence[PreparedPage]) -> None:
        """Drop each page's rows and insert its revision's, all pages in one transaction (one
        generation, one term lookup): a reader sees every page old or new, never a mix."""
        conn = self._db.conn()
        analyzed = [[self._analyzer.analyze(source) for _, source in page] for _, page in prepared]
        with self._db.write(conn) as generation:
            replace_rows(conn, pages=prepared, analyzed=analyzed, generation=generation)

    async def delete_page(self, *, page_id: int) -> int:
        """Remove every paragraph of the page; returns how many went."""

        def delete() -> int:
            conn = self._db.conn()
            with self._db.write(conn) as generation:
                return delete_rows(conn, page_id=page_id, generation=generation)

        with span("embedded delete_page", _db_attributes("delete_page")):
            return await self._db.run(delete)

    async def page_state(self, *, page_id: int) -> PageState | None:
        """The page's revision, paragraph count, paragraphs per model, last update and title."""
        with span("embedded page_state", _db_attributes("page_state")):
            return await self._db.run(
                lambda: pages.page_state(self._db.conn(), page_id=page_id, definition=self._definition)
            )

    async def list_pages(self, *, limit: int = 100, offset: int = 0) -> list[PageState]:
        """Pages by ascending id: one grouped scan picks the window, then its rows' titles and dates."""
        check_window(limit=limit, offset=offset)
        return await self._db.run(lambda: pages.list_pages(self._db.conn(), limit=limit, offset=offset))

    async def page_revisions(self) -> dict[int, int]:
        """Every indexed page id with its newest revision (one grouped scan)."""
        return await self._db.run(lambda: pages.page_revisions(self._db.conn()))

    async def page_paragraphs(self, *, page_id: int) -> list[SearchHit]:
        """Every paragraph of the page in paragraph order (score 0)."""

        def fetch() -> list[SearchHit]:
            rows = self._db.conn().execute(
                "SELECT doc_id, source FROM paragraphs WHERE page_id = ? ORDER BY paragraph", (page_id,)
            )
            return [SearchHit(doc_id=d, score=0.0, source=strip_internal(json.loads(s))) for d, s in rows]

        return await self._db.run(fetch)

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
            conn = self._db.conn()
            derived = self._indexes.sync(conn, matrices=True)
            assert derived.matrices is not None
            with self._indexes.state_lock:
                view = derived.matrices[vector_field].view()
            allowed = _allowed(conn, checked) if checked else None
            top = top_k(view, query, k, allowed)
            return _hits(conn, [(i, min(2.0, max(0.0, s + 1.0))) for i, s in top])

        with span("embedded knn", _db_attributes("knn", k=k, field=vector_field)):
            return await self._db.run(search)

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
            conn = self._db.conn()
            derived = self._indexes.sync(conn, bm25=True)
            assert derived.lexical is not None
            known = dict(
                conn.execute(f"SELECT term, id FROM terms WHERE term IN ({marks(len(tokens))})", tokens)
            )
            term_ids = [int(known[t]) for t in tokens if t in known]
            if not term_ids:
                return []
            with self._indexes.state_lock:
                view = derived.lexical.view()
            allowed = _allowed(conn, checked) if checked else None
            top = lexical.search(view, terms=term_ids, weights=weights, k=k, allowed=allowed)
            return _hits(conn, top)

        with span("embedded bm25", _db_attributes("bm25", k=k)):
            return await self._db.run(search)

    async def get(self, *, doc_ids: Sequence[str]) -> list[SearchHit]:
        """Paragraphs by id, in the order asked, missing ones left out."""
        wanted = list(dict.fromkeys(doc_ids))
        if not wanted:
            return []

        def fetch() -> list[SearchHit]:
            conn = self._db.conn()
            found: dict[str, str] = {}
            for chunk in chunks(wanted):
                found.update(
                    conn.execute(
                        f"SELECT doc_id, source FROM paragraphs WHERE doc_id IN ({marks(len(chunk))})", chunk
                    ).fetchall()
                )
            return [
                SearchHit(doc_id=d, score=0.0, source=strip_internal(json.loads(found[d])))
                for d in wanted
                if d in found
            ]

        with span("embedded get", _db_attributes("get", docs=len(wanted))):
            return await self._db.run(fetch)

    async def count(self) -> int:
        """Number of paragraphs stored."""
        return await self._db.run(
            lambda: int(self._db.conn().execute("SELECT COUNT(*) FROM paragraphs").fetchone()[0])
        )

    async def close(self) -> None:
        """Close every thread's connection and drop the derived indices."""
        self._db.close()
        self._indexes.reset()


def _db_attributes(operation: str, **extra: int | str) -> dict[str, int | str]:
    """A store span's attributes: the database semantic conventions plus what the call asked for."""
    return {
        "db.system.name": "sqlite",
        "db.operation.name": operation,
        **{f"ragbot.store.{key}": value for key, value in extra.items()},
    }


def _allowed(conn: sqlite3.Connection, filters: Sequence[Filter]) -> IntArray:
    """Ascending ids of the paragraphs that pass every filter (an indexed lookup per filter)."""
    clauses: list[str] = []
    params: list[Any] = []
    for f in filters:
        if not f.values:
            return np.empty(0, dtype=np.int64)
        values = [int(v) if isinstance(v, bool) else v for v in f.values]
        if f.field in COLUMNS:
            clauses.append(f"{COLUMNS[f.field]} IN ({marks(len(values))})")
            params.extend(values)
        else:
            clauses.append(
                f"id IN (SELECT id FROM filter_values WHERE field = ? AND value IN ({marks(len(values))}))"
            )
            params.extend([f.field, *values])
    sql = f"SELECT id FROM paragraphs WHERE {' AND '.join(clauses)}"
    ids = np.fromiter((r[0] for r in conn.execute(sql, params)), dtype=np.int64)
    ids.sort()
    return ids


def _hits(conn: sqlite3.Connection, scored: Sequence[tuple[int, float]]) -> list[SearchHit]:
    """The scored rows as hits, in the order given."""
    if not scored:
        return []
    rows = conn.execute(
        f"SELECT id, doc_id, source FROM paragraphs WHERE id IN ({marks(len(scored))})",
        [i for i, _ in scored],
    ).fetchall()
    by_id = {r[0]: r for r in rows}
    hits = []
    for row_id, score in scored:
        row = by_id.get(row_id)
        if row is not None:  # deleted by another writer since the indices caught up
            hits.append(SearchHit(doc_id=row[1], score=score, source=strip_internal(json.loads(row[2]))))
    return hits
