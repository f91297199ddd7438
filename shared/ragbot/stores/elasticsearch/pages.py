"""Elasticsearch page reads: a page's newest revision and the pages list, by aggregations, and a
page's paragraphs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from elasticsearch import AsyncElasticsearch

from ragbot.definition import DocumentDefinition
from ragbot.ports import SearchHit
from ragbot.schemas.pages import PageState
from ragbot.stores.common import parse_last_update
from ragbot.stores.elasticsearch.bulk import PAGE_SIZE
from ragbot.stores.elasticsearch.queries import SOURCE_EXCLUDES, hit

# The page's newest revision, and that revision's first paragraph (for the title).
_NEWEST_REVISION: dict[str, Any] = {"terms": {"field": "revision_id", "size": 1, "order": {"_key": "desc"}}}
_FIRST_PARAGRAPH: dict[str, Any] = {
    "top_hits": {"size": 1, "sort": [{"paragraph": "asc"}], "_source": ["title"]}
}
# Per page bucket of list_pages: the newest revision, its first paragraph's title, its last update.
_LATEST_REVISION: dict[str, Any] = {
    "revisions": {
        **_NEWEST_REVISION,
        "aggs": {
            "first": _FIRST_PARAGRAPH,
            "latest": {"max": {"field": "last_update"}},
        },
    }
}


def _listed_state(bucket: Mapping[str, Any]) -> PageState:
    """A PageState from one composite bucket of list_pages."""
    revision = bucket["revisions"]["buckets"][0]
    first = revision["first"]["hits"]["hits"]
    title = first[0]["_source"].get("title") if first else None
    latest = revision["latest"].get("value_as_string")
    return PageState(
        page_id=int(bucket["key"]["page_id"]),
        revision_id=int(revision["key"]),
        paragraphs=int(revision["doc_count"]),
        last_update=parse_last_update(latest),
        title=str(title) if title is not None else None,
    )


async def page_state(
    client: AsyncElasticsearch, *, pattern: str, page_id: int, definition: DocumentDefinition
) -> PageState | None:
    """The newest indexed revision of the page, by an aggregation over its documents."""
    models = {
        model: {
            "bool": {"filter": [{"exists": {"field": v.name}} for v in definition.vector_fields_for(model)]}
        }
        for model in definition.model_names
    }
    aggs = {
        "revisions": {
            **_NEWEST_REVISION,
            "aggs": {
                "first": _FIRST_PARAGRAPH,
                "latest": {
                    "top_hits": {"size": 1, "sort": [{"last_update": "desc"}], "_source": ["last_update"]}
                },
                "models": {"filters": {"filters": models}},
            },
        }
    }
    resp = await client.search(index=pattern, query={"term": {"page_id": page_id}}, size=0, aggs=aggs)
    buckets = (resp.get("aggregations") or {}).get("revisions", {}).get("buckets", [])
    if not buckets:
        return None
    bucket = buckets[0]
    first = bucket["first"]["hits"]["hits"]
    latest = bucket["latest"]["hits"]["hits"]
    title = first[0]["_source"].get("title") if first else None
    return PageState(
        page_id=page_id,
        revision_id=int(bucket["key"]),
        paragraphs=int(bucket["doc_count"]),
        paragraphs_per_model={m: int(b["doc_count"]) for m, b in bucket["models"]["buckets"].items()},
        last_update=parse_last_update(latest[0]["_source"].get("last_update")) if latest else None,
        title=str(title) if title is not None else None,
    )


async def list_pages(client: AsyncElasticsearch, *, pattern: str, limit: int, offset: int) -> list[PageState]:
    """Pages by ascending id through a composite aggregation on page_id (paged with ``after``).

    Composite buckets have no offset: the first ``offset`` page ids are walked without
    sub-aggregations, then one request reads the window with each page's newest revision.
    """
    after: dict[str, Any] | None = None
    skipped = 0
    while skipped < offset:
        size = min(PAGE_SIZE, offset - skipped)
        buckets = await _page_buckets(client, pattern=pattern, size=size, after=after, sub_aggs=None)
        if len(buckets) < size:  # fewer pages than the offset skips
            return []
        skipped += size
        after = buckets[-1]["key"]
    states: list[PageState] = []
    while len(states) < limit:
        size = min(PAGE_SIZE, limit - len(states))
        buckets = await _page_buckets(
            client, pattern=pattern, size=size, after=after, sub_aggs=_LATEST_REVISION
        )
        states.extend(_listed_state(b) for b in buckets)
        if len(buckets) < size:
            break
        after = buckets[-1]["key"]
    return states


async def page_revisions(client: AsyncElasticsearch, *, pattern: str) -> dict[int, int]:
    """Every page id with its newest revision: the composite aggregation walked to its end, with a max."""
    found: dict[int, int] = {}
    after: dict[str, Any] | None = None
    while True:
        buckets = await _page_buckets(
            client,
            pattern=pattern,
            size=PAGE_SIZE,
            after=after,
            sub_aggs={"newest": {"max": {"field": "revision_id"}}},
        )
        for bucket in buckets:
            found[int(bucket["key"]["page_id"])] = int(bucket["newest"]["value"])
        if len(buckets) < PAGE_SIZE:
            return found
        after = buckets[-1]["key"]


async def _page_buckets(
    client: AsyncElasticsearch,
    *,
    pattern: str,
    size: int,
    after: dict[str, Any] | None,
    sub_aggs: dict[str, Any] | None,
) -> list[dict[str, Any]]:
    composite: dict[str, Any] = {"size": size, "sources": [{"page_id": {"terms": {"field": "page_id"}}}]}
    if after is not None:
        composite["after"] = after
    agg: dict[str, Any] = {"composite": composite}
    if sub_aggs is not None:
        agg["aggs"] = sub_aggs
    resp = await client.search(index=pattern, size=0, aggs={"pages": agg})
    buckets: list[dict[str, Any]] = (resp.get("aggregations") or {}).get("pages", {}).get("buckets", [])
    return buckets


async def page_paragraphs(client: AsyncElasticsearch, *, pattern: str, page_id: int) -> list[SearchHit]:
    """The newest revision's paragraphs in paragraph order (score 0)."""
    hits: list[SearchHit] = []
    after: list[Any] | None = None
    while True:
        extra: dict[str, Any] = {"search_after": after} if after is not None else {}
        resp = await client.search(
            index=pattern,
            query={"term": {"page_id": page_id}},
            sort=[{"revision_id": "desc"}, {"paragraph": "asc"}, {"doc_id": "asc"}],
            size=PAGE_SIZE,
            source_excludes=SOURCE_EXCLUDES,
            **extra,
        )
        raw = resp["hits"]["hits"]
        hits.extend(hit(h, 0.0) for h in raw)
        if len(raw) < PAGE_SIZE:
            break
        after = raw[-1]["sort"]
    if not hits:
        return []
    newest = hits[0].source.get("revision_id")
    return [h for h in hits if h.source.get("revision_id") == newest]
