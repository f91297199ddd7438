"""``ElasticsearchStore``: the ``SearchStore`` port on Elasticsearch: the client, error translation,
and the port's methods delegating to ``bulk`` (writes), ``pages`` (page reads) and ``queries``."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

from elasticsearch import ApiError, AsyncElasticsearch, TransportError
from elasticsearch.serializer import OrjsonSerializer

from ragbot.definition import DocumentDefinition
from ragbot.errors import RagbotError, StoreUnavailable
from ragbot.ports import Filters, PageWrite, SearchHit, StoredParagraph, Vector
from ragbot.schemas.pages import PageState
from ragbot.settings import StoreSettings
from ragbot.stores.common import (
    DEFAULT_BM25_FIELD,
    bm25_fields,
    check_k,
    check_knn_query,
    check_window,
    default_bm25_fields,
    prepare_writes,
    query_tokens,
    text_fields_of,
    validate_filters,
)
from ragbot.stores.elasticsearch import bulk, pages
from ragbot.stores.elasticsearch.bulk import DEPENDENCY, PAGE_SIZE
from ragbot.stores.elasticsearch.queries import SOURCE_EXCLUDES, bm25_query, hit, knn_query, knn_score
from ragbot.stores.mapping import index_pattern, index_template, template_name

logger = logging.getLogger(__name__)
_RECHECK_S = 60.0


def build_client(settings: StoreSettings) -> AsyncElasticsearch:
    """The async client for the configured cluster (connects lazily)."""
    auth = None
    if settings.es_username:
        auth = (
            settings.es_username,
            settings.es_password.get_secret_value() if settings.es_password else "",
        )
    # Several comma-separated URLs are nodes of one cluster: the client round-robins and moves a
    # request off a node that stopped answering (operations.md, "When a node or Redis restarts").
    hosts = [url.strip() for url in settings.es_url.split(",") if url.strip()]
    return AsyncElasticsearch(
        hosts,
        basic_auth=auth,
        request_timeout=settings.es_timeout_s,
        max_retries=1,
        retry_on_timeout=False,
        # orjson: bulk bodies are mostly vectors, and the stdlib encoder is slow on them
        # (docs/benchmarks.md).
        serializer=OrjsonSerializer(),
    )


@asynccontextmanager
async def es_errors(what: str) -> AsyncIterator[None]:
    """Translate the client's errors into ragbot's; name what we were doing."""
    try:
        yield
    except ApiError as exc:
        status = exc.meta.status
        if status in (408, 429) or status >= 500:
            raise StoreUnavailable(
                f"elasticsearch {what}: {status} {exc.message}", dependency=DEPENDENCY
            ) from exc
        raise RagbotError(f"elasticsearch refused {what}: {status} {exc.message} {exc.body}") from exc
    except (TransportError, TimeoutError, OSError) as exc:
        raise StoreUnavailable(f"elasticsearch {what}: {exc}", dependency=DEPENDENCY) from exc


class ElasticsearchStore:
    """SearchStore on Elasticsearch; see the package docstring for the layout and guarantees."""

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
            self._client_obj = build_client(self._settings)
        return self._client_obj

    def _errors(self, what: str) -> AbstractAsyncContextManager[None]:
        """Translate the client's errors into ragbot's; name what we were doing."""
        return es_errors(what)

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

    def _document(self, paragraph: StoredParagraph, source: dict[str, Any]) -> dict[str, Any]:
        """The indexed document: the prepared ``source`` plus BM25 copies and the vectors."""
        return bulk.document(
            paragraph, source, text_fields=self._text_fields, default_bm25=self._default_bm25
        )

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
        batch = bulk.index_batch(ready, prefix=self._prefix, document=self._document)
        if not batch.index_of:
            return failed
        await self._ensure_template()
        what = f"page {writes[0].page_id}" if len(writes) == 1 else f"{len(batch.index_of)} pages"
        async with self._errors(f"replacing {what}"):
            await bulk.write_pages(self._client, pattern=self._pattern, batch=batch, failed=failed)
        return failed

    async def delete_page(self, *, page_id: int) -> int:
        """Delete the page's documents in every bucket index; returns how many went."""
        async with self._errors(f"deleting page {page_id}"):
            existing = (await bulk.ids_of_pages(self._client, pattern=self._pattern, page_ids=[page_id]))[
                page_id
            ]
            actions = [{"_op_type": "delete", "_index": idx, "_id": _id} for idx, _id in existing]
            deleted = await bulk.bulk(self._client, actions, f"deleting page {page_id}")
            await bulk.refresh(self._client, {idx for idx, _ in existing})
            return deleted

    async def page_state(self, *, page_id: int) -> PageState | None:
        """The newest indexed revision of the page, by an aggregation over its documents."""
        async with self._errors(f"reading the state of page {page_id}"):
            return await pages.page_state(
                self._client, pattern=self._pattern, page_id=page_id, definition=self._definition
            )

    async def list_pages(self, *, limit: int = 100, offset: int = 0) -> list[PageState]:
        """Pages by ascending id through a composite aggregation on page_id (paged with ``after``)."""
        check_window(limit=limit, offset=offset)
        async with self._errors("listing pages"):
            return await pages.list_pages(self._client, pattern=self._pattern, limit=limit, offset=offset)

    async def page_revisions(self) -> dict[int, int]:
        """Every indexed page id with its newest revision (the composite aggregation walked to its end)."""
        async with self._errors("listing page revisions"):
            return await pages.page_revisions(self._client, pattern=self._pattern)

    async def page_paragraphs(self, *, page_id: int) -> list[SearchHit]:
        """The newest revision's paragraphs in paragraph order (score 0)."""
        async with self._errors(f"reading page {page_id}"):
            return await pages.page_paragraphs(self._client, pattern=self._pattern, page_id=page_id)

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
        query = knn_query(
            vector_field=vector_field, vector=vector, k=k, filters=checked, settings=self._settings
        )
        async with self._errors(f"kNN on {vector_field}"):
            resp = await self._client.search(
                index=self._pattern,
                query=query,
                size=k,
                source_excludes=SOURCE_EXCLUDES,
                track_total_hits=False,
            )
        return [hit(h, knn_score(h)) for h in resp["hits"]["hits"]]

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
        default = self._default_bm25 is not None and weighted == [(n, 1.0) for n in self._default_bm25]
        one_field = default and await self._default_field_mapped()
        body = bm25_query(tokens=tokens, weighted=weighted, one_field=one_field, filters=checked)
        async with self._errors("BM25 search"):
            resp = await self._client.search(
                index=self._pattern,
                query=body,
                size=k,
                source_excludes=SOURCE_EXCLUDES,
                search_type="dfs_query_then_fetch",
                track_total_hits=False,  # no hit count: lets Lucene skip blocks that cannot make the top k
            )
        return [hit(h, float(h["_score"])) for h in resp["hits"]["hits"]]

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
            for start in range(0, len(wanted), PAGE_SIZE):
                chunk = wanted[start : start + PAGE_SIZE]
                resp = await self._client.search(
                    index=self._pattern,
                    query={"ids": {"values": chunk}},
                    size=len(chunk),
                    source_excludes=SOURCE_EXCLUDES,
                )
                found.update((h["_id"], hit(h, 0.0)) for h in resp["hits"]["hits"])
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

        A freshly bulk-loaded shard holds many segments and every search visits each one; merging
        them makes hybrid retrieval faster (see docs/benchmarks.md and docs/operations.md).
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
