"""The Elasticsearch store (official async client, 8.x).

* One index per bucket of page ids, ``<prefix>_<page_id // 1000>`` (the seed used
  ``round(page_id / 1000)``; see ``ragbot.stores.mapping``); reads go to ``<prefix>_*``, and "no index
  yet" is simply an empty result.
* The index template (``mapping.index_template``) is generated from the definition: one
  ``dense_vector`` per vector field with the model's dimension and cosine similarity, ``flat`` (exact
  brute force, the seed's ranking) or ``hnsw`` (approximate) by ``StoreSettings.vector_search``.
  Text fields keep their original and an analyzed copy ``<field>__bm25`` holding
  ``ragbot.text.analyze`` tokens under the ``whitespace`` analyzer, so BM25 sees the same tokens as
  the embedded store.
* kNN: the ``knn`` query, so each shard does one query phase. ``exact`` (``flat``) and ``quantized``
  (``int8_flat``: the scan reads int8 copies, then the best k x ``quantized_oversample`` per shard
  are rescored on the float vectors) return exact cosine scores; ``approximate`` is HNSW.
  Elasticsearch reports ``(1 + cos) / 2`` for cosine; we return ``cos + 1`` (0..2).
* BM25: BM25F, the formula the embedded store computes, with ``dfs_query_then_fetch`` so that term
  statistics are global across bucket indices. The default fields (title and content, weight 1) are
  also indexed back to back in one field (``DEFAULT_BM25_FIELD``), where BM25 is that same BM25F and
  a plain term query lets Lucene skip what cannot reach the top k; other field choices, and indices
  made before that field existed, use ``combined_fields`` over the per-field ``__bm25`` copies.
* Page replace: bulk-index the new revision (ids ``page-revision-paragraph``), bulk-delete the page's
  other documents, then refresh the touched indices, so the page is searchable when the call
  returns. One explicit refresh instead of ``refresh=wait_for`` on each bulk: ``wait_for`` waits for
  the next periodic refresh (1 s), which measured ~1 s per page replace (one worker could index at
  most one page a second); the explicit refresh costs milliseconds. Until it runs, readers see the
  old revision; a periodic refresh between the two bulks can show both revisions briefly, never
  neither. This distribution has no ``_delete_by_query`` (no reindex module), so deletes are a
  search of ids followed by a bulk delete, which works on every distribution.
* ``replace_pages`` does the same for many pages with one id lookup, one bulk of new documents, one
  bulk of deletes and one refresh (page by page, 12 pages cost Elasticsearch 1.1-1.3 CPU-seconds;
  batched, 0.4-0.6). A page whose documents fail in the bulk has its new documents removed again and
  is reported; the other pages complete. ``replace_page`` is ``replace_pages`` with one page.
* Vendor errors become ``StoreUnavailable`` (connection, timeout, 429, 5xx) or ``RagbotError``
  (a request Elasticsearch refused); every request carries ``StoreSettings.es_timeout_s``.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

import numpy as np
from elasticsearch import ApiError, AsyncElasticsearch, TransportError
from elasticsearch.helpers import async_bulk
from elasticsearch.serializer import OrjsonSerializer

from ragbot.definition import DocumentDefinition
from ragbot.errors import RagbotError, StoreUnavailable
from ragbot.ports import Filters, PageWrite, SearchHit, StoredParagraph, Vector
from ragbot.schemas.pages import PageState
from ragbot.settings import StoreSettings
from ragbot.stores.common import (
    BM25_SUFFIX,
    DEFAULT_BM25_FIELD,
    MAX_K,
    Filter,
    analyzed_text,
    bm25_fields,
    check_k,
    check_knn_query,
    check_window,
    default_bm25_fields,
    parse_last_update,
    prepare_writes,
    query_tokens,
    strip_internal,
    text_fields_of,
    validate_filters,
)
from ragbot.stores.mapping import SOURCE_EXCLUDES, index_name, index_pattern, index_template, template_name

logger = logging.getLogger(__name__)
_SOURCE_EXCLUDES = list(SOURCE_EXCLUDES)
_PAGE_SIZE = 1000
_DEPENDENCY = "elasticsearch"
_RECHECK_S = 60.0


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


def _filter_clauses(filters: Sequence[Filter]) -> list[dict[str, Any]]:
    return [{"terms": {f.field: list(f.values)}} for f in filters]


def _bulk_error(failures: Sequence[Mapping[str, Any]], what: str) -> RagbotError:
    """The error for failed bulk items: StoreUnavailable when any was 429 or 5xx, else a refusal."""
    first = failures[0]
    if any(f.get("status") == 429 or int(f.get("status", 0)) >= 500 for f in failures):
        return StoreUnavailable(
            f"elasticsearch {what}: {len(failures)} item(s) failed, first: {first}", dependency=_DEPENDENCY
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


class ElasticsearchStore:
    """SearchStore on Elasticsearch; see the module docstring for the layout and guarantees."""

    def __init__(
        self,
        *,
        settings: StoreSettings,
        definition: DocumentDefinition,
        dimensions: Mapping[str, int],
        client: AsyncElasticsearch | None = None,
    ) -> None:
        # ``dimensions`` may be partial (a reader of page state needs none); the index template, and so
        # the first write, needs every vector field's dimension.
        self._settings = settings
        self._definition = definition
        self._dimensions = {
            v.name: int(dimensions[v.name]) for v in definition.vector_fields if v.name in dimensions
        }
        self._text_fields = text_fields_of(definition)
        self._default_bm25 = default_bm25_fields(self._text_fields)
        # Whether every index maps DEFAULT_BM25_FIELD (indices made before it existed do not), and
        # when that was last checked (a "no" is asked again: a reindex may have fixed it).
        self._default_field_ok = False
        self._default_field_checked = -math.inf
        self._prefix = settings.es_index_prefix
        self._pattern = index_pattern(self._prefix)
        self._client_given = client
        self._client_obj: AsyncElasticsearch | None = client
        self._template_ready = False
        self._template_lock = asyncio.Lock()

    @property
    def template(self) -> dict[str, Any]:
        """The index template body this store installs."""
        return index_template(
            settings=self._settings, definition=self._definition, dimensions=self._dimensions
        )

    @property
    def _client(self) -> AsyncElasticsearch:
        if self._client_obj is None:
            s = self._settings
            auth = None
            if s.es_username:
                auth = (s.es_username, s.es_password.get_secret_value() if s.es_password else "")
            self._client_obj = AsyncElasticsearch(
                s.es_url,
                basic_auth=auth,
                request_timeout=s.es_timeout_s,
                max_retries=1,
                retry_on_timeout=False,
                # orjson: bulk bodies are mostly vectors; the stdlib encoder spent 0.3 s per 560
                # paragraphs of 384 floats, about a tenth of their embedding time on two cores.
                serializer=OrjsonSerializer(),
            )
        return self._client_obj

    @asynccontextmanager
    async def _errors(self, what: str) -> AsyncIterator[None]:
        """Translate the client's errors into ragbot's; name what we were doing."""
        try:
            yield
        except ApiError as exc:
            status = exc.meta.status
            if status in (408, 429) or status >= 500:
                raise StoreUnavailable(
                    f"elasticsearch {what}: {status} {exc.message}", dependency=_DEPENDENCY
                ) from exc
            raise RagbotError(f"elasticsearch refused {what}: {status} {exc.message} {exc.body}") from exc
        except (TransportError, TimeoutError, OSError) as exc:
            raise StoreUnavailable(f"elasticsearch {what}: {exc}", dependency=_DEPENDENCY) from exc

    # ---- SearchStore ----------------------------------------------------------------------------

    async def ensure_ready(self) -> None:
        """Install (or update) the index template for ``<prefix>_*`` (idempotent)."""
        body = self.template
        async with self._errors("putting the index template"):
            await self._client.indices.put_index_template(
                name=template_name(self._prefix),
                index_patterns=body["index_patterns"],
                priority=body["priority"],
                template=body["template"],
                meta=body["_meta"],
            )
        self._template_ready = True

    async def warm_up(self) -> None:
        """The server holds the indices; learn now which BM25 path they allow."""
        if self._default_bm25:
            await self._default_field_mapped()

    async def _ensure_template(self) -> None:
        if self._template_ready:
            return
        async with self._template_lock:
            if not self._template_ready:
                await self.ensure_ready()

    async def ping(self) -> bool:
        """True when the cluster answers its health endpoint (``GET /`` may be disabled)."""
        try:
            async with self._errors("health"):
                await self._client.cluster.health()
        except (StoreUnavailable, RagbotError):
            return False
        return True

    async def _ids_of_page(self, page_id: int) -> list[tuple[str, str]]:
        """(index, id) of every document of the page, across the pattern."""
        return (await self._ids_of_pages([page_id]))[page_id]

    async def _ids_of_pages(self, page_ids: Sequence[int]) -> dict[int, list[tuple[str, str]]]:
        """(index, id) of every document of each page, across the pattern (paged past 10k hits)."""
        found: dict[int, list[tuple[str, str]]] = {page_id: [] for page_id in page_ids}
        wanted = list(found)
        for start in range(0, len(wanted), _PAGE_SIZE):
            after: list[Any] | None = None
            while True:
                extra: dict[str, Any] = {"search_after": after} if after is not None else {}
                resp = await self._client.search(
                    index=self._pattern,
                    query={"terms": {"page_id": wanted[start : start + _PAGE_SIZE]}},
                    sort=[{"page_id": "asc"}, {"doc_id": "asc"}],
                    size=_PAGE_SIZE,
                    source=False,
                    **extra,
                )
                hits = resp["hits"]["hits"]
                for h in hits:  # the first sort value is the page id
                    found[int(h["sort"][0])].append((h["_index"], h["_id"]))
                if len(hits) < _PAGE_SIZE:
                    break
                after = hits[-1]["sort"]
        return found

    async def _bulk(self, actions: list[dict[str, Any]], what: str) -> int:
        """Run bulk actions (no refresh); returns successes, raises on real failures."""
        ok, failures = await self._bulk_items(actions)
        if failures:
            raise _bulk_error(failures, what)
        return ok

    async def _bulk_items(self, actions: list[dict[str, Any]]) -> tuple[int, list[dict[str, Any]]]:
        """Run bulk actions (no refresh); returns successes and the failed items (a 404 delete is fine).

        A request that fails as a whole (connection, 429, 5xx) raises.
        """
        if not actions:
            return 0, []
        ok, errors = await async_bulk(self._client, actions, raise_on_error=False, chunk_size=500)
        failures = []
        for item in errors if isinstance(errors, list) else []:
            op, result = next(iter(item.items()))
            if op == "delete" and result.get("status") == 404:
                continue
            failures.append(result)
        return int(ok), failures

    def _document(self, paragraph: StoredParagraph, source: dict[str, Any]) -> dict[str, Any]:
        """The indexed document: the prepared ``source`` plus BM25 copies and the vectors."""
        for name in self._text_fields:
            if source.get(name) is not None:
                source[f"{name}{BM25_SUFFIX}"] = analyzed_text(source[name])
        if self._default_bm25:
            source[DEFAULT_BM25_FIELD] = " ".join(
                source[f"{name}{BM25_SUFFIX}"] for name in self._default_bm25 if source.get(name) is not None
            )
        for name, vector in paragraph.vectors.items():
            # Left an array: the client's serializer writes it as a JSON list chunk by chunk, so a big
            # page never holds every vector as Python floats at once (12 KB per 384-d vector).
            source[name] = np.asarray(vector, dtype=np.float32)
        return source

    async def replace_page(
        self, *, page_id: int, revision_id: int, paragraphs: Sequence[StoredParagraph]
    ) -> None:
        """Write the revision, then delete the page's other documents: never a gap, briefly both."""
        failed = await self.replace_pages([PageWrite(page_id, revision_id, paragraphs)])
        if page_id in failed:
            raise failed[page_id]

    async def replace_pages(self, writes: Sequence[PageWrite]) -> dict[int, Exception]:
        """Replace each page as ``replace_page`` does, in one lookup, two bulks and one refresh."""
        ready, failed = prepare_writes(writes, dimensions=self._dimensions, definition=self._definition)
        index_of: dict[int, str] = {}  # page -> the index its new revision goes to
        page_of: dict[str, int] = {}  # new document id -> page
        actions: list[dict[str, Any]] = []
        for page_id, prepared in ready.items():
            index = index_of[page_id] = index_name(self._prefix, page_id)
            for p, source in prepared:
                actions.append(
                    {
                        "_op_type": "index",
                        "_index": index,
                        "_id": p.doc_id,
                        "_source": self._document(p, source),
                    }
                )
                page_of[p.doc_id] = page_id
        if not index_of:
            return failed
        await self._ensure_template()
        what = f"page {writes[0].page_id}" if len(writes) == 1 else f"{len(index_of)} pages"
        async with self._errors(f"replacing {what}"):
            existing = await self._ids_of_pages(list(index_of))

            def added(pages: set[int]) -> list[tuple[str, str]]:
                """The new documents of these pages that did not exist before the write."""
                old = {_id for page in pages for _, _id in existing[page]}
                return [(index_of[page], i) for i, page in page_of.items() if page in pages and i not in old]

            try:
                _, failures = await self._bulk_items(actions)
            except BaseException:
                await self._undo_partial_write(added(set(index_of)))
                raise
            for page, items in _by_page(failures, page_of).items():
                failed[page] = _bulk_error(items, f"indexing page {page}")
            if failures:
                await self._undo_partial_write(added(set(index_of) & set(failed)))
            stale: list[dict[str, Any]] = []
            stale_of: dict[str, int] = {}
            for page, index in index_of.items():
                if page in failed:
                    continue
                for idx, _id in existing[page]:
                    if _id not in page_of or idx != index:
                        stale.append({"_op_type": "delete", "_index": idx, "_id": _id})
                        stale_of[_id] = page
            _, failures = await self._bulk_items(stale)
            for page, items in _by_page(failures, stale_of).items():
                failed[page] = _bulk_error(items, f"deleting old revisions of page {page}")
            await self._refresh({*index_of.values(), *(idx for ids in existing.values() for idx, _ in ids)})
        return failed

    async def _undo_partial_write(self, docs: Sequence[tuple[str, str]]) -> None:
        """After a failed bulk, drop new revisions' (index, id) documents so the pages stay as they were."""
        indices = {idx for idx, _ in docs}
        try:
            await self._bulk(
                [{"_op_type": "delete", "_index": idx, "_id": i} for idx, i in sorted(docs)], "undo"
            )
            await self._refresh(indices)
        except (RagbotError, ApiError, TransportError) as exc:  # the original failure matters more
            logger.warning("could not undo a partial write to %s: %s", ",".join(sorted(indices)), exc)

    async def _refresh(self, indices: set[str]) -> None:
        """Make the writes searchable now (see the module docstring for why not wait_for)."""
        if indices:
            await self._client.indices.refresh(index=",".join(sorted(indices)), ignore_unavailable=True)

    async def delete_page(self, *, page_id: int) -> int:
        """Delete the page's documents in every bucket index; returns how many went."""
        async with self._errors(f"deleting page {page_id}"):
            existing = await self._ids_of_page(page_id)
            actions = [{"_op_type": "delete", "_index": idx, "_id": _id} for idx, _id in existing]
            deleted = await self._bulk(actions, f"deleting page {page_id}")
            await self._refresh({idx for idx, _ in existing})
            return deleted

    async def page_state(self, *, page_id: int) -> PageState | None:
        """The newest indexed revision of the page, by an aggregation over its documents."""
        models = {
            model: {
                "bool": {
                    "filter": [
                        {"exists": {"field": v.name}} for v in self._definition.vector_fields_for(model)
                    ]
                }
            }
            for model in self._definition.model_names
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
        async with self._errors(f"reading the state of page {page_id}"):
            resp = await self._client.search(
                index=self._pattern, query={"term": {"page_id": page_id}}, size=0, aggs=aggs
            )
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

    async def list_pages(self, *, limit: int = 100, offset: int = 0) -> list[PageState]:
        """Pages by ascending id through a composite aggregation on page_id (paged with ``after``).

        Composite buckets have no offset: the first ``offset`` page ids are walked without
        sub-aggregations, then one request reads the window with each page's newest revision.
        """
        check_window(limit=limit, offset=offset)
        after: dict[str, Any] | None = None
        skipped = 0
        async with self._errors("listing pages"):
            while skipped < offset:
                size = min(_PAGE_SIZE, offset - skipped)
                buckets = await self._page_buckets(size=size, after=after, sub_aggs=None)
                if len(buckets) < size:  # fewer pages than the offset skips
                    return []
                skipped += size
                after = buckets[-1]["key"]
            states: list[PageState] = []
            while len(states) < limit:
                size = min(_PAGE_SIZE, limit - len(states))
                buckets = await self._page_buckets(size=size, after=after, sub_aggs=_LATEST_REVISION)
                states.extend(_listed_state(b) for b in buckets)
                if len(buckets) < size:
                    break
                after = buckets[-1]["key"]
        return states

    async def _page_buckets(
        self, *, size: int, after: dict[str, Any] | None, sub_aggs: dict[str, Any] | None
    ) -> list[dict[str, Any]]:
        composite: dict[str, Any] = {"size": size, "sources": [{"page_id": {"terms": {"field": "page_id"}}}]}
        if after is not None:
            composite["after"] = after
        agg: dict[str, Any] = {"composite": composite}
        if sub_aggs is not None:
            agg["aggs"] = sub_aggs
        resp = await self._client.search(index=self._pattern, size=0, aggs={"pages": agg})
        buckets: list[dict[str, Any]] = (resp.get("aggregations") or {}).get("pages", {}).get("buckets", [])
        return buckets

    def _hit(self, raw: Mapping[str, Any], score: float) -> SearchHit:
        return SearchHit(doc_id=str(raw["_id"]), score=score, source=strip_internal(raw.get("_source") or {}))

    async def page_paragraphs(self, *, page_id: int) -> list[SearchHit]:
        """The newest revision's paragraphs in paragraph order (score 0)."""
        hits: list[SearchHit] = []
        after: list[Any] | None = None
        async with self._errors(f"reading page {page_id}"):
            while True:
                extra: dict[str, Any] = {"search_after": after} if after is not None else {}
                resp = await self._client.search(
                    index=self._pattern,
                    query={"term": {"page_id": page_id}},
                    sort=[{"revision_id": "desc"}, {"paragraph": "asc"}, {"doc_id": "asc"}],
                    size=_PAGE_SIZE,
                    source_excludes=_SOURCE_EXCLUDES,
                    **extra,
                )
                raw = resp["hits"]["hits"]
                hits.extend(self._hit(h, 0.0) for h in raw)
                if len(raw) < _PAGE_SIZE:
                    break
                after = raw[-1]["sort"]
        if not hits:
            return []
        newest = hits[0].source.get("revision_id")
        return [h for h in hits if h.source.get("revision_id") == newest]

    async def knn(
        self, *, vector_field: str, vector: Vector, k: int, filters: Filters | None = None
    ) -> list[SearchHit]:
        """Top-k by cosine (flat: exact; int8_flat: rescored; hnsw: approximate); score is cos + 1 (0..2)."""
        checked = check_knn_query(
            vector_field=vector_field,
            vector=vector,
            k=k,
            filters=filters,
            dimensions=self._dimensions,
            definition=self._definition,
        )
        mode = self._settings.vector_search
        # The knn *query* (not the top-level knn section): one query phase per shard, no separate kNN
        # phase first. Each shard returns its best ``num_candidates``; for flat and int8_flat that is
        # that shard's exact top k, so the merged top k is the index's.
        knn: dict[str, Any] = {
            "field": vector_field,
            "query_vector": np.asarray(vector, dtype=np.float32).tolist(),
            "num_candidates": k
            if mode != "approximate"
            else min(MAX_K, max(k, k * self._settings.hnsw_num_candidates_factor)),
        }
        if mode == "quantized":  # int8 pass, then k x oversample candidates rescored on the floats
            knn["rescore_vector"] = {"oversample": self._settings.quantized_oversample}
        if checked:
            knn["filter"] = _filter_clauses(checked)
        async with self._errors(f"kNN on {vector_field}"):
            resp = await self._client.search(
                index=self._pattern,
                query={"knn": knn},
                size=k,
                source_excludes=_SOURCE_EXCLUDES,
                track_total_hits=False,
            )
        # Elasticsearch scores cosine as (1 + cos) / 2; the seed's scale is cos + 1.
        return [self._hit(h, min(2.0, max(0.0, 2.0 * float(h["_score"])))) for h in resp["hits"]["hits"]]

    async def bm25(
        self, *, query: str, k: int, fields: Sequence[str] | None = None, filters: Filters | None = None
    ) -> list[SearchHit]:
        """Top-k by BM25F over the analyzed copies of the text fields; weights as ``title^2``."""
        check_k(k)
        weighted = bm25_fields(fields, text_fields=self._text_fields)
        checked = validate_filters(filters, definition=self._definition)
        tokens = query_tokens(query)
        if not tokens:
            return []
        match: dict[str, Any]
        default = self._default_bm25 is not None and weighted == [(n, 1.0) for n in self._default_bm25]
        if default and await self._default_field_mapped():
            match = {"match": {DEFAULT_BM25_FIELD: {"query": " ".join(tokens), "operator": "or"}}}
        else:
            match = {
                "combined_fields": {
                    "query": " ".join(tokens),
                    "fields": [f"{name}{BM25_SUFFIX}^{weight:g}" for name, weight in weighted],
                    "operator": "or",
                }
            }
        async with self._errors("BM25 search"):
            resp = await self._client.search(
                index=self._pattern,
                query={"bool": {"must": [match], "filter": _filter_clauses(checked)}},
                size=k,
                source_excludes=_SOURCE_EXCLUDES,
                search_type="dfs_query_then_fetch",
                track_total_hits=False,  # no hit count: lets Lucene skip blocks that cannot make the top k
            )
        return [self._hit(h, float(h["_score"])) for h in resp["hits"]["hits"]]

    async def _default_field_mapped(self) -> bool:
        """True when every ``<prefix>_*`` index maps DEFAULT_BM25_FIELD (or there is none yet).

        Indices written before the field existed lack it until they are reindexed; BM25 then runs
        ``combined_fields`` over the per-field copies, the same scores, more slowly. A yes holds for
        good (new indices get the field from the template); a no is asked again after a minute.
        """
        if self._default_field_ok:
            return True
        now = time.monotonic()
        if now - self._default_field_checked < _RECHECK_S:
            return False
        self._default_field_checked = now
        async with self._errors("reading the BM25 field mappings"):
            resp = await self._client.options(ignore_status=404).indices.get_field_mapping(
                index=self._pattern, fields=DEFAULT_BM25_FIELD, allow_no_indices=True
            )
        if not resp.body:  # no index yet: nothing to search; ask again when there is one
            self._default_field_checked = -math.inf
            return True
        missing = sorted(name for name, body in resp.body.items() if not body.get("mappings"))
        if missing:
            logger.warning(
                "indices %s predate %s: BM25 uses combined_fields until they are reindexed",
                ",".join(missing[:5]),
                DEFAULT_BM25_FIELD,
            )
        self._default_field_ok = not missing
        return self._default_field_ok

    async def get(self, *, doc_ids: Sequence[str]) -> list[SearchHit]:
        """Paragraphs by id, in the order asked, missing ones left out."""
        wanted = list(dict.fromkeys(doc_ids))
        found: dict[str, SearchHit] = {}
        async with self._errors("reading paragraphs by id"):
            for start in range(0, len(wanted), _PAGE_SIZE):
                chunk = wanted[start : start + _PAGE_SIZE]
                resp = await self._client.search(
                    index=self._pattern,
                    query={"ids": {"values": chunk}},
                    size=len(chunk),
                    source_excludes=_SOURCE_EXCLUDES,
                )
                found.update((h["_id"], self._hit(h, 0.0)) for h in resp["hits"]["hits"])
        return [found[d] for d in wanted if d in found]

    async def count(self) -> int:
        """Number of paragraphs in every bucket index."""
        async with self._errors("counting paragraphs"):
            resp = await self._client.count(index=self._pattern)
        return int(resp["count"])

    async def close(self) -> None:
        """Close the client if this store created it."""
        if self._client_obj is not None and self._client_given is None:
            await self._client_obj.close()
        self._client_obj = self._client_given

    async def force_merge(self) -> None:
        """Merge each ``<prefix>_*`` index into one segment (after a bulk reindex, when idle).

        A freshly bulk-loaded shard holds 14-20 segments and every search visits each one; merged,
        hybrid retrieval at 100k paragraphs went from 66.7 to 61.7 ms p50 (docs/benchmarks.md).
        Heavy (minutes for 100k paragraphs with HNSW): not for the freshness path.
        """
        async with self._errors("merging segments"):
            await self._client.options(request_timeout=3600).indices.forcemerge(
                index=self._pattern, max_num_segments=1
            )

    async def drop_indices(self) -> None:
        """Delete every ``<prefix>_*`` index and the template (tests, and rebuilding from scratch)."""
        async with self._errors("dropping indices"):
            # Wildcard deletes are refused by default (action.destructive_requires_name): name them.
            names = list((await self._client.indices.get(index=self._pattern, allow_no_indices=True)).body)
            for start in range(0, len(names), 50):
                await self._client.indices.delete(index=",".join(names[start : start + 50]))
            await self._client.options(ignore_status=404).indices.delete_index_template(
                name=template_name(self._prefix)
            )
        self._template_ready = False
