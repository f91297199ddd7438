"""Bulk reindex: pages from a JSONL file or a wiki listing, sent as batches under one parent job.

A reindex is a **parent job** (kind ``reindex``) and one **batch job** per ``IndexPages`` message
(kind ``index_pages``, id ``<parent>-b<n>``). Each batch is embedded together by the worker and
records its own progress ``{total, done, failed, pending}``; the parent's progress
``{total, done, failed, batches}`` is the sum over its batches, rewritten atomically by
``refresh_parent`` (``JobStore.aggregate``) after every batch update, so it is exact under
redelivery, retries and concurrent workers. The parent ends ``done`` when every batch ended with no
failed page, ``failed`` (with the count in ``error``) when some pages failed for good; failed batches
sit in the dead letters and ``POST /v1/jobs/<parent>/retry`` re-queues them all.

**JSONL**: one content-API body per line (``GET callback_url + page_id``'s shape: ``page_id``,
``revision_id``, ``title``, ``content`` ...); blank lines are skipped.

**Wiki listing** (``{"source": "wiki", "list_url": ..., "callback_url": ...}``): the listing is read
page by page, then every listed page is fetched by the worker from ``callback_url + page_id`` like a
ping. Three listing shapes are understood:

- MediaWiki's action API, e.g. ``https://wiki/w/api.php?action=query&list=allpages&apnamespace=0&
  aplimit=500&format=json`` (``query.allpages[].pageid``), or with ``generator=allpages&prop=info``
  (``query.pages[].pageid`` and ``lastrevid``: pages whose revision is already indexed are then
  skipped without a fetch). Continuation follows MediaWiki: every key of the answer's ``continue``
  object is added to the next request's query string.
- ChatbotRagContent's ``GetRelevantPageIds.php`` output served over HTTP: a JSON array of ids
  (``--output=json``) or one id per line (``--output=list``, ``id<TAB>title`` with ``--with-titles``).
- A plain listing for other CMSs: ``{"pages": [{"page_id": 1, "revision_id": 7}, ...],
  "next": "<absolute or relative URL of the next listing page, or null>"}``.

Both URLs must be on the allow-listed hosts; listing answers are capped in size and time.
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
from pydantic import BaseModel, Field, ValidationError

from ragbot.errors import NotFound, SourceError, SourceRefused, ValidationFailed
from ragbot.messaging.jobs import JobStore
from ragbot.messaging.reconcile import parse_listing
from ragbot.schemas.jobs import JobKind, JobRecord, JobState
from ragbot.schemas.messages import PageRef
from ragbot.schemas.pages import Page
from ragbot.schemas.strict_json import JSONRefused, loads_strict
from ragbot.sources.ssrf import PinnedTransport
from ragbot.sources.wiki import USER_AGENT, check_callback_url, page_from_content_body

__all__ = [
    "FINAL_STATES",
    "ReindexRequest",
    "WikiLister",
    "batch_job_id",
    "batches",
    "combine_batches",
    "combine_reembed",
    "page_from_line",
    "refresh_parent",
]

logger = logging.getLogger(__name__)

FINAL_STATES = frozenset({JobState.done, JobState.skipped, JobState.failed})
_MAX_LISTING_BYTES = 16 * 1024 * 1024
_ID_LINE = re.compile(r"\d+(?:\t.*)?")


class ReindexRequest(BaseModel):
    """``POST /v1/reindex`` with a JSON body: reindex every page a wiki lists."""

    source: str = Field(pattern="^wiki$", description="only 'wiki' (JSONL bodies need no JSON wrapper)")
    list_url: str = Field(min_length=8, max_length=2048, description="first page of the listing")
    callback_url: str = Field(min_length=8, max_length=2048, description="content API base, as in pings")
    force: bool = Field(default=False, description="re-embed pages whose revision is already indexed")


def batch_job_id(parent_job_id: str, batch: int) -> str:
    """The id of a reindex's n-th batch job."""
    return f"{parent_job_id}-b{batch}"


def batches(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    """Consecutive lists of at most ``size`` items."""
    chunk: list[Any] = []
    for item in items:
        chunk.append(item)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def page_from_line(line: bytes | str, *, line_number: int) -> Page:
    """One JSONL line (a content-API body) as a Page; ``ValidationFailed`` names the line."""
    where = f"line {line_number}"
    try:
        data: Any = loads_strict(line)
    except JSONRefused as exc:
        raise ValidationFailed(f"{where}: not JSON ({exc})", field=where) from None
    if not isinstance(data, dict):
        raise ValidationFailed(f"{where}: not a JSON object", field=where)
    if "page_id" not in data:
        raise ValidationFailed(f"{where}: no page_id", field=where)
    try:
        page = page_from_content_body(data)
    except (KeyError, TypeError, ValueError, ValidationError) as exc:
        message = exc.errors()[0]["msg"] if isinstance(exc, ValidationError) else str(exc)
        raise ValidationFailed(f"{where}: not a content-API page ({message})", field=where) from None
    if page.page_id < 1:
        raise ValidationFailed(f"{where}: page_id must be >= 1", field=where)
    return page


def combine_batches(parent: JobRecord, children: list[JobRecord | None]) -> JobRecord:
    """The parent record with its progress and state summed from its batch records."""
    total = int(parent.payload.get("total", parent.progress.get("total", 0)))
    done = failed = finished = 0
    started = False
    failed_batches: list[str] = []
    for child in children:
        if child is None:  # expired: its pages ended long ago
            finished += 1
            continue
        done += child.progress.get("done", 0)
        if child.state in FINAL_STATES:
            failed += child.progress.get("failed", _pages_of(child) if child.state is JobState.failed else 0)
        started = started or child.state is not JobState.queued
        if child.state in FINAL_STATES:
            finished += 1
            if child.state is JobState.failed:
                failed_batches.append(child.job_id)
    state: JobState
    error: str | None = None
    if finished == len(children):
        state = JobState.failed if failed_batches else JobState.done
        if failed_batches:
            error = (
                f"{failed} of {total} pages failed in {len(failed_batches)} batch(es): "
                f"{', '.join(failed_batches[:10])}{' ...' if len(failed_batches) > 10 else ''}; "
                f"POST /v1/jobs/{parent.job_id}/retry re-queues them"
            )
    else:
        state = JobState.running if started else JobState.queued
    return parent.model_copy(
        update={
            "state": state,
            "error": error,
            "detail": f"{finished} of {len(children)} batches finished",
            "progress": {
                **parent.progress,
                "total": total,
                "done": done,
                "failed": failed,
                "batches": len(children),
            },
        }
    )


def combine_reembed(parent: JobRecord, children: list[JobRecord | None]) -> JobRecord:
    """A re-embed's record: its batches' sum, but ``done`` only once the switch happened.

    Every batch done and no switch yet is ``running`` with ``progress.built = 1`` (the sign
    ``messaging.reembed.finish_reembed`` waits for); an aborted one stays ``failed``.
    """
    combined = combine_batches(parent, children)
    if "aborted_at" in parent.payload:  # abort_reembed's verdict stands, whatever the batches did
        return combined.model_copy(
            update={"state": JobState.failed, "error": parent.error, "detail": parent.detail}
        )
    if "switched_at" in parent.payload:  # the switch's detail says where readers are now
        return combined.model_copy(update={"detail": parent.detail or combined.detail})
    if combined.state is not JobState.done:
        return combined
    return combined.model_copy(
        update={
            "state": JobState.running,
            "detail": f"every page built in generation {parent.payload.get('target')}; switching",
            "progress": {**combined.progress, "built": 1},
        }
    )


def _pages_of(child: JobRecord) -> int:
    """How many pages a batch that failed before reporting progress carried (a delete: one)."""
    refs, pages = child.payload.get("refs"), child.payload.get("pages")
    if isinstance(refs, list) or isinstance(pages, list):
        return len(refs or []) + len(pages or [])
    return 1


async def refresh_parent(*, jobs: JobStore, parent_job_id: str) -> JobRecord:
    """Rewrite a reindex (or re-embed) job's progress and state from its batches (atomic, idempotent)."""
    parent = await jobs.get(job_id=parent_job_id)
    if parent is None:
        raise NotFound(f"reindex job {parent_job_id} not found")
    count = int(parent.payload.get("batches", 0))
    children = [batch_job_id(parent_job_id, n) for n in range(count)]
    combine = combine_reembed if parent.kind is JobKind.reembed else combine_batches
    return await jobs.aggregate(job_id=parent_job_id, children=children, combine=combine)


def _id_lines(text: str) -> bool:
    """True for text of page ids, one per line (``id<TAB>title`` too; blank and ``#`` lines skipped)."""
    lines = [line.strip() for line in text.splitlines()]
    return any(lines) and all(not x or x.startswith("#") or _ID_LINE.fullmatch(x) for x in lines)


@dataclass(slots=True)
class ListedPage:
    """A page a listing named: its id, and its revision when the listing says."""

    page_id: int
    revision_id: int = 0


class WikiLister:
    """Reads a wiki's page listing (MediaWiki action API or the plain shape), page by page."""

    def __init__(
        self,
        *,
        allowed_hosts: Sequence[str],
        timeout_s: float,
        max_pages: int,
        max_bytes: int = _MAX_LISTING_BYTES,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.allowed_hosts = tuple(allowed_hosts)
        self.timeout_s = timeout_s
        self.max_pages = max_pages
        self.max_bytes = max_bytes
        self._transport = transport

    async def refs(self, *, list_url: str, callback_url: str) -> list[PageRef]:
        """Every listed page as a reference to fetch, in listing order, without duplicates."""
        check_callback_url(callback_url, self.allowed_hosts)
        seen: dict[int, PageRef] = {}
        async for listed in self.pages(list_url=list_url):
            if listed.page_id not in seen:
                seen[listed.page_id] = PageRef(
                    page_id=listed.page_id, revision_id=listed.revision_id, callback_url=callback_url
                )
                if len(seen) > self.max_pages:
                    raise ValidationFailed(
                        f"the listing names more than {self.max_pages} pages", field="list_url"
                    )
        return list(seen.values())

    async def pages(self, *, list_url: str) -> AsyncIterator[ListedPage]:
        """The listed pages, following continuation until the listing ends."""
        base = check_callback_url(list_url, self.allowed_hosts)
        url: httpx.URL | None = base
        requests = 0
        async with httpx.AsyncClient(
            timeout=httpx.Timeout(self.timeout_s),
            follow_redirects=False,
            headers={"User-Agent": USER_AGENT, "Accept": "application/json"},
            trust_env=False,
            transport=self._transport or PinnedTransport(allowed_hosts=self.allowed_hosts),
        ) as client:
            while url is not None:
                requests += 1
                if requests > self.max_pages + 1:
                    raise SourceRefused(f"{list_url}: the listing does not end")
                body = await self._get(client, url)
                found, url = self._parse(body, url=url, base=base)
                for listed in found:
                    yield listed

    async def _get(self, client: httpx.AsyncClient, url: httpx.URL) -> Any:
        try:
            async with client.stream("GET", url) as response:
                status = response.status_code
                if status >= 500 or status in (408, 429):
                    raise SourceError(f"{url}: the wiki answered {status} to the listing")
                if status != 200:
                    raise SourceRefused(f"{url}: the wiki answered {status} to the listing")
                chunks: list[bytes] = []
                size = 0
                async for chunk in response.aiter_bytes():
                    size += len(chunk)
                    if size > self.max_bytes:
                        raise SourceRefused(f"{url}: listing answer over {self.max_bytes} bytes")
                    chunks.append(chunk)
        except httpx.TimeoutException:
            raise SourceError(f"{url}: listing timed out after {self.timeout_s} s") from None
        except httpx.TransportError as exc:
            raise SourceError(f"{url}: {type(exc).__name__}: {exc}") from None
        raw = b"".join(chunks)
        try:
            return loads_strict(raw, max_depth=64)
        except JSONRefused as exc:
            text = raw.decode("utf-8", errors="replace").lstrip("\ufeff")
            if _id_lines(text):  # GetRelevantPageIds.php's default output: one id per line
                return text
            raise SourceRefused(f"{url}: the listing is not JSON ({exc})") from None

    def _parse(
        self, body: Any, *, url: httpx.URL, base: httpx.URL
    ) -> tuple[list[ListedPage], httpx.URL | None]:
        if isinstance(body, list | str):  # GetRelevantPageIds.php's output: ids, JSON or one per line
            try:
                listed = parse_listing(body)
            except ValidationFailed as exc:
                raise SourceRefused(f"{url}: {exc}") from None
            return [ListedPage(page_id=p, revision_id=r) for p, r in listed.items()], None
        if not isinstance(body, dict):
            raise SourceRefused(f"{url}: the listing is not a JSON object")
        if "error" in body and "query" not in body:
            raise SourceRefused(f"{url}: the wiki refused the listing: {body['error']}")
        if "query" in body or "batchcomplete" in body or ("continue" in body and "pages" not in body):
            return self._parse_mediawiki(body, url=url, base=base)
        if isinstance(body.get("pages"), list):
            found = [
                self._listed(item, id_key="page_id", rev_key="revision_id", url=url) for item in body["pages"]
            ]
            nxt = body.get("next")
            if nxt is None or nxt == "":
                return found, None
            if not isinstance(nxt, str):
                raise SourceRefused(f"{url}: 'next' must be a URL or null")
            return found, check_callback_url(str(url.join(nxt)), self.allowed_hosts)
        raise SourceRefused(
            f"{url}: not a listing (expected MediaWiki's query.allpages / query.pages, or 'pages')"
        )

    def _parse_mediawiki(
        self, body: dict[str, Any], *, url: httpx.URL, base: httpx.URL
    ) -> tuple[list[ListedPage], httpx.URL | None]:
        query = body.get("query") or {}
        if not isinstance(query, dict):
            raise SourceRefused(f"{url}: 'query' is not an object")
        items: Any = query.get("allpages")
        if items is None:
            items = query.get("pages") or []
            if isinstance(items, dict):
                items = list(items.values())
        if not isinstance(items, list):
            raise SourceRefused(f"{url}: the listed pages are not a list")
        found = [
            self._listed(i, id_key="pageid", rev_key="lastrevid", url=url)
            for i in items
            if not (isinstance(i, dict) and "missing" in i)
        ]
        cont = body.get("continue")
        if not cont:
            return found, None
        if not isinstance(cont, dict):
            raise SourceRefused(f"{url}: 'continue' is not an object")
        params = dict(base.params)
        params.update({str(k): str(v) for k, v in cont.items()})
        return found, base.copy_with(params=params)

    @staticmethod
    def _listed(item: Any, *, id_key: str, rev_key: str, url: httpx.URL) -> ListedPage:
        if not isinstance(item, dict):
            raise SourceRefused(f"{url}: a listed page is not an object")
        try:
            page_id = int(item[id_key])
            revision_id = int(item.get(rev_key) or 0)
        except (KeyError, TypeError, ValueError):
            raise SourceRefused(f"{url}: a listed page has no integer {id_key!r}") from None
        if page_id < 1 or revision_id < 0:
            raise SourceRefused(f"{url}: listed page id {page_id} is not valid")
        return ListedPage(page_id=page_id, revision_id=revision_id)
