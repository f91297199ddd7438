"""Elasticsearch writes: documents from paragraphs, bulk index and delete, the page id lookup, refresh
and the undo of a partial write."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from elasticsearch import ApiError, AsyncElasticsearch, TransportError
from elasticsearch.helpers import async_bulk

from ragbot.errors import RagbotError, StoreUnavailable
from ragbot.ports import StoredParagraph
from ragbot.stores.common import BM25_SUFFIX, DEFAULT_BM25_FIELD, analyzed_text
from ragbot.stores.mapping import index_name

logger = logging.getLogger(__name__)
PAGE_SIZE = 1000
DEPENDENCY = "elasticsearch"
# page id -> its paragraphs each with the source ``prepare_writes`` made for it
Prepared = Mapping[int, Sequence[tuple[StoredParagraph, dict[str, Any]]]]


def document(
    paragraph: StoredParagraph,
    source: dict[str, Any],
    *,
    text_fields: Sequence[str],
    default_bm25: Sequence[str] | None,
) -> dict[str, Any]:
    """The indexed document: the prepared ``source`` plus BM25 copies and the vectors."""
    for name in text_fields:
        if source.get(name) is not None:
            source[f"{name}{BM25_SUFFIX}"] = analyzed_text(source[name])
    if default_bm25:
        source[DEFAULT_BM25_FIELD] = " ".join(
            source[f"{name}{BM25_SUFFIX}"] for name in default_bm25 if source.get(name) is not None
        )
    for name, vector in paragraph.vectors.items():
        # Left an array: the client's serializer writes it as a JSON list chunk by chunk, so a big
        # page never holds every vector as Python floats at once (12 KB per 384-d vector).
        source[name] = np.asarray(vector, dtype=np.float32)
    return source


def bulk_error(failures: Sequence[Mapping[str, Any]], what: str) -> RagbotError:
    """The error for failed bulk items: StoreUnavailable when any was 429 or 5xx, else a refusal."""
    first = failures[0]
    if any(f.get("status") == 429 or int(f.get("status", 0)) >= 500 for f in failures):
        return StoreUnavailable(
            f"elasticsearch {what}: {len(failures)} item(s) failed, first: {first}", dependency=DEPENDENCY
        )
    return RagbotError(f"elasticsearch refused {what}: {len(failures)} item(s) failed, first: {first}")


def _by_page(
    failures: Sequence[Mapping[str, Any]], page_of: Mapping[str, int]
) -> dict[int, list[Mapping[str, Any]]]:
    """Failed bulk items grouped by the page their document id belongs to."""
    grouped: dict[int, list[Mapping[str, Any]]] = {}
    for failure in failures:
        grouped.setdefault(page_of[str(failure["_id"])], []).append(failure)
    return grouped


async def ids_of_pages(
    client: AsyncElasticsearch, *, pattern: str, page_ids: Sequence[int]
) -> dict[int, list[tuple[str, str]]]:
    """(index, id) of every document of each page, across the pattern (paged past 10k hits)."""
    found: dict[int, list[tuple[str, str]]] = {page_id: [] for page_id in page_ids}
    wanted = list(found)
    for start in range(0, len(wanted), PAGE_SIZE):
        after: list[Any] | None = None
        while True:
            extra: dict[str, Any] = {"search_after": after} if after is not None else {}
            resp = await client.search(
                index=pattern,
                query={"terms": {"page_id": wanted[start : start + PAGE_SIZE]}},
                sort=[{"page_id": "asc"}, {"doc_id": "asc"}],
                size=PAGE_SIZE,
                source=False,
                **extra,
            )
            hits = resp["hits"]["hits"]
            for h in hits:  # the first sort value is the page id
                found[int(h["sort"][0])].append((h["_index"], h["_id"]))
            if len(hits) < PAGE_SIZE:
                break
            after = hits[-1]["sort"]
    return found


async def bulk(client: AsyncElasticsearch, actions: list[dict[str, Any]], what: str) -> int:
    """Run bulk actions (no refresh); returns successes, raises on real failures."""
    ok, failures = await bulk_items(client, actions)
    if failures:
        raise bulk_error(failures, what)
    return ok


async def bulk_items(
    client: AsyncElasticsearch, actions: list[dict[str, Any]]
) -> tuple[int, list[dict[str, Any]]]:
    """Run bulk actions (no refresh); returns successes and the failed items (a 404 delete is fine).

    A request that fails as a whole (connection, 429, 5xx) raises.
    """
    if not actions:
        return 0, []
    ok, errors = await async_bulk(client, actions, raise_on_error=False, chunk_size=500)
    failures = []
    for item in errors if isinstance(errors, list) else []:
        op, result = next(iter(item.items()))
        if op == "delete" and result.get("status") == 404:
            continue
        failures.append(result)
    return int(ok), failures


async def refresh(client: AsyncElasticsearch, indices: set[str]) -> None:
    """Make the writes searchable now (see the package docstring for why not wait_for)."""
    if indices:
        await client.indices.refresh(index=",".join(sorted(indices)), ignore_unavailable=True)


async def _undo_partial_write(client: AsyncElasticsearch, docs: Sequence[tuple[str, str]]) -> None:
    """After a failed bulk, drop new revisions' (index, id) documents so the pages stay as they were."""
    indices = {idx for idx, _ in docs}
    try:
        await bulk(
            client, [{"_op_type": "delete", "_index": idx, "_id": i} for idx, i in sorted(docs)], "undo"
        )
        await refresh(client, indices)
    except (RagbotError, ApiError, TransportError) as exc:  # the original failure matters more
        logger.warning("could not undo a partial write to %s: %s", ",".join(sorted(indices)), exc)


@dataclass
class Batch:
    """The index actions of a group of pages' new revisions, and which page and index each is for."""

    index_of: dict[int, str] = field(default_factory=dict)  # page -> the index its new revision goes to
    page_of: dict[str, int] = field(default_factory=dict)  # new document id -> page
    actions: list[dict[str, Any]] = field(default_factory=list)


def index_batch(
    ready: Prepared, *, prefix: str, document: Callable[[StoredParagraph, dict[str, Any]], dict[str, Any]]
) -> Batch:
    """One index action per new paragraph, in the page's bucket index."""
    out = Batch()
    for page_id, prepared in ready.items():
        index = out.index_of[page_id] = index_name(prefix, page_id)
        for p, source in prepared:
            out.actions.append(
                {"_op_type": "index", "_index": index, "_id": p.doc_id, "_source": document(p, source)}
            )
            out.page_of[p.doc_id] = page_id
    return out


async def write_pages(
    client: AsyncElasticsearch, *, pattern: str, batch: Batch, failed: dict[int, Exception]
) -> None:
    """Index the pages' new revisions, then delete their other documents, then refresh once.

    Pages whose documents fail are undone and added to ``failed``; the others complete.
    """
    index_of, page_of = batch.index_of, batch.page_of
    existing = await ids_of_pages(client, pattern=pattern, page_ids=list(index_of))

    def added(pages: set[int]) -> list[tuple[str, str]]:
        """The new documents of these pages that did not exist before the write."""
        old = {_id for page in pages for _, _id in existing[page]}
        return [(index_of[page], i) for i, page in page_of.items() if page in pages and i not in old]

    try:
        _, failures = await bulk_items(client, batch.actions)
    except BaseException:
        await _undo_partial_write(client, added(set(index_of)))
        raise
    for page, items in _by_page(failures, page_of).items():
        failed[page] = bulk_error(items, f"indexing page {page}")
    if failures:
        await _undo_partial_write(client, added(set(index_of) & set(failed)))
    stale: list[dict[str, Any]] = []
    stale_of: dict[str, int] = {}
    for page, index in index_of.items():
        if page in failed:
            continue
        for idx, _id in existing[page]:
            if _id not in page_of or idx != index:
                stale.append({"_op_type": "delete", "_index": idx, "_id": _id})
                stale_of[_id] = page
    _, failures = await bulk_items(client, stale)
    for page, items in _by_page(failures, stale_of).items():
        failed[page] = bulk_error(items, f"deleting old revisions of page {page}")
    await refresh(client, {*index_of.values(), *(idx for ids in existing.values() for idx, _ in ids)})
