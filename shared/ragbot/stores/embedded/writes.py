"""The embedded store's writes: what each paragraph contributes (terms, filter values) and the page
replace and delete statements, run inside the caller's write transaction."""

from __future__ import annotations

import json
import logging
import sqlite3
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ragbot.ports import StoredParagraph
from ragbot.stores import lexical
from ragbot.stores.common import INTEGER_TYPES, analyzed_text, dumps_source
from ragbot.stores.embedded.schema import chunks, marks

logger = logging.getLogger(__name__)

# (page id, its paragraphs each with the source ``prepare_writes`` made for it)
PreparedPage = tuple[int, Sequence[tuple[StoredParagraph, dict[str, Any]]]]


@dataclass(frozen=True, slots=True)
class Analyzed:
    """What a paragraph's source contributes besides itself: terms, field lengths, filter values."""

    counts: dict[str, list[int]]  # term -> tf per text field
    lengths: list[int]
    filters: list[tuple[str, str | int]]


@dataclass(frozen=True)
class Analyzer:
    """Derives a source's lexical data over ``text_fields`` and its rows for ``filter_fields``."""

    text_fields: tuple[str, ...]
    filter_fields: Mapping[str, str]  # name -> field type

    def analyze(self, source: Mapping[str, Any]) -> Analyzed:
        """Per-field term frequencies and lengths of the analyzed text, and the filter values."""
        n = len(self.text_fields)
        counts: dict[str, list[int]] = {}
        lengths: list[int] = []
        for i, name in enumerate(self.text_fields):
            tokens = analyzed_text(source.get(name)).split()
            lengths.append(len(tokens))
            for term, tf in Counter(tokens).items():
                counts.setdefault(term, [0] * n)[i] = tf
        filters: list[tuple[str, str | int]] = []
        for name, ftype in self.filter_fields.items():
            raw = source.get(name)
            for value in raw if isinstance(raw, list) else [raw]:
                stored = filter_value(ftype, value)
                if stored is not None:
                    filters.append((name, stored))
        return Analyzed(counts, lengths, filters)


def _term_ids(conn: sqlite3.Connection, terms: Iterable[str]) -> dict[str, int]:
    """Ids of the terms, creating the missing ones (inside the caller's write transaction)."""
    wanted = sorted(set(terms))
    ids: dict[str, int] = {}
    for chunk in chunks(wanted):
        ids.update(conn.execute(f"SELECT term, id FROM terms WHERE term IN ({marks(len(chunk))})", chunk))
    for term in wanted:
        if term not in ids:
            ids[term] = int(conn.execute("INSERT INTO terms (term) VALUES (?)", (term,)).lastrowid or 0)
    return ids


def _encode(analyzed: Analyzed, ids: Mapping[str, int]) -> tuple[bytes, bytes, bytes]:
    terms = list(analyzed.counts)
    return lexical.encode([ids[t] for t in terms], [analyzed.counts[t] for t in terms], analyzed.lengths)


def _insert_filters(conn: sqlite3.Connection, row_id: int, analyzed: Analyzed) -> None:
    conn.executemany(
        "INSERT INTO filter_values (field, value, id) VALUES (?, ?, ?)",
        [(name, value, row_id) for name, value in analyzed.filters],
    )


def replace_rows(
    conn: sqlite3.Connection,
    *,
    pages: Sequence[PreparedPage],
    analyzed: Sequence[Sequence[Analyzed]],
    generation: int,
) -> None:
    """Drop each page's rows and insert its revision's, in the caller's transaction (one term lookup)."""
    ids = _term_ids(conn, {t for page in analyzed for a in page for t in a.counts})
    for (page_id, prepared), page_analyzed in zip(pages, analyzed, strict=True):
        delete_rows(conn, page_id=page_id, generation=generation)
        for (p, source), a in zip(prepared, page_analyzed, strict=True):
            cur = conn.execute(
                "INSERT INTO paragraphs "
                "(doc_id, page_id, revision_id, paragraph, source, terms, tfs, lengths) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (p.doc_id, p.page_id, p.revision_id, p.paragraph, dumps_source(source), *_encode(a, ids)),
            )
            row_id = int(cur.lastrowid or 0)
            vectors = [(n, row_id, np.asarray(v, dtype="<f4").tobytes()) for n, v in p.vectors.items()]
            conn.executemany("INSERT INTO vectors (field, id, vector) VALUES (?, ?, ?)", vectors)
            _insert_filters(conn, row_id, a)


def delete_rows(conn: sqlite3.Connection, *, page_id: int, generation: int) -> int:
    """Delete the page's rows, logging their ids under ``generation`` for readers to catch up."""
    sub = "SELECT id FROM paragraphs WHERE page_id = ?"
    conn.execute(f"INSERT INTO removed_log (generation, id) SELECT ?, id FROM ({sub})", (generation, page_id))
    conn.execute(f"DELETE FROM vectors WHERE id IN ({sub})", (page_id,))
    conn.execute(f"DELETE FROM filter_values WHERE id IN ({sub})", (page_id,))
    return conn.execute("DELETE FROM paragraphs WHERE page_id = ?", (page_id,)).rowcount


def rederive(conn: sqlite3.Connection, *, analyzer: Analyzer, path: Path) -> None:
    """The definition's text or filter fields changed: recompute lexical data and filter rows."""
    logger.warning("text or filter fields changed; re-deriving the BM25 and filter data of %s", path)
    conn.execute("DELETE FROM filter_values")
    rows = conn.execute("SELECT id, source FROM paragraphs").fetchall()
    for start in range(0, len(rows), 1000):
        batch = [(row_id, analyzer.analyze(json.loads(src))) for row_id, src in rows[start : start + 1000]]
        ids = _term_ids(conn, {t for _, a in batch for t in a.counts})
        for row_id, analyzed in batch:
            blobs = _encode(analyzed, ids)
            conn.execute(
                "UPDATE paragraphs SET terms = ?, tfs = ?, lengths = ? WHERE id = ?", (*blobs, row_id)
            )
            _insert_filters(conn, row_id, analyzed)
    conn.execute("UPDATE generation SET value = value + 1 WHERE id = 1")


def filter_value(ftype: str, value: Any) -> str | int | None:
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
