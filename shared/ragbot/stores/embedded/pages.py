"""The embedded store's page-state reads: a page's newest revision and a window of pages by id."""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from ragbot.definition import DocumentDefinition
from ragbot.schemas.pages import PageState
from ragbot.stores.common import parse_last_update
from ragbot.stores.embedded.schema import chunks, marks, snapshot


def page_state(conn: sqlite3.Connection, *, page_id: int, definition: DocumentDefinition) -> PageState | None:
    """The page's revision, paragraph count, paragraphs per model, last update and title."""
    with snapshot(conn):
        row = conn.execute("SELECT MAX(revision_id) FROM paragraphs WHERE page_id = ?", (page_id,)).fetchone()
        if row is None or row[0] is None:
            return None
        revision = int(row[0])
        rows = conn.execute(
            "SELECT id, source FROM paragraphs WHERE page_id = ? AND revision_id = ? ORDER BY paragraph",
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
    for model in definition.model_names:
        fields = [v.name for v in definition.vector_fields_for(model)]
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


def list_pages(conn: sqlite3.Connection, *, limit: int, offset: int) -> list[PageState]:
    """Pages by ascending id: one grouped scan picks the window, then its rows' titles and dates."""
    with snapshot(conn):
        window = conn.execute(
            "SELECT page_id, MAX(revision_id) FROM paragraphs GROUP BY page_id "
            "ORDER BY page_id LIMIT ? OFFSET ?",
            (limit, offset),
        ).fetchall()
        rows: list[tuple[int, int, int, Any, Any]] = []
        for chunk in chunks([page_id for page_id, _ in window]):
            rows.extend(
                conn.execute(
                    "SELECT page_id, revision_id, paragraph, json_extract(source, '$.title'), "
                    "json_extract(source, '$.last_update') FROM paragraphs "
                    f"WHERE page_id IN ({marks(len(chunk))})",
                    chunk,
                ).fetchall()
            )
    return _page_states(window, rows)


def page_revisions(conn: sqlite3.Connection) -> dict[int, int]:
    """Every page id with its newest revision, in one grouped scan of the page index."""
    with snapshot(conn):
        rows = conn.execute("SELECT page_id, MAX(revision_id) FROM paragraphs GROUP BY page_id").fetchall()
    return {int(page_id): int(revision) for page_id, revision in rows}


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
