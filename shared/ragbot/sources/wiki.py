"""The wiki's content API (ChatbotRagContent): ``GET callback_url + page_id`` -> Page.

A ping names the URL to fetch, so this is where server-side request forgery is stopped: only
allow-listed hosts are contacted, at addresses checked once and connected to as checked
(``ragbot.sources.ssrf``), redirects are followed by hand (at most ``max_redirects``) and each
target is checked again, bodies are streamed and cut at ``max_bytes``, and every request has a timeout.
Outcomes: 200 -> Page; 404/410 (or the extension's ``{"httpCode": 404, ...}`` body) -> None (the page
left scope); 5xx, 408, 429, timeouts and connection errors -> ``SourceError`` (retry); anything else ->
``SourceRefused`` (never retried).

A body's ``contentHtml`` (the rendered page) becomes the page's heading-aware blocks
(``ragbot.sources.wiki_html``); ``content``, the same page with its tags stripped, is read only when
there is no HTML.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import httpx
from pydantic import ValidationError

from ragbot.errors import SourceError, SourceRefused
from ragbot.observability.logging import REQUEST_ID_HEADER, get_request_id
from ragbot.schemas.pages import Page
from ragbot.schemas.strict_json import JSONRefused, loads_strict
from ragbot.sources.ssrf import AllowList, PinnedTransport, check_url
from ragbot.sources.wiki_html import blocks_from_html

logger = logging.getLogger(__name__)

_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_GONE = frozenset({404, 410})
_RETRYABLE_4XX = frozenset({408, 425, 429})
USER_AGENT = "ragbot-ingest/0.1 (+https://github.com/)"


def page_from_content_body(body: dict[str, Any]) -> Page:
    """A content-API body as a Page: blocks from its ``contentHtml`` when it has any, else its ``content``."""
    page = Page.from_wiki_content(body)
    rendered = body.get("contentHtml")
    if not isinstance(rendered, str) or not rendered.strip():
        return page
    blocks = blocks_from_html(rendered)
    if not blocks:
        return page
    text = "\n\n".join(b.text for b in blocks)
    return page.model_copy(update={"blocks": blocks, "content": text})


def gone_body(body: Any) -> bool:
    """True for the extension's not-found body (``{"message": ..., "httpCode": 404}``), any status."""
    return isinstance(body, dict) and "page_id" not in body and body.get("httpCode") in (404, 410)


def host_allowed(host: str, allowed_hosts: Sequence[str]) -> bool:
    """True when ``host`` is listed, matches ``*.domain``, is a listed address, or the list holds ``*``."""
    return AllowList.from_entries(allowed_hosts).match(host) is not None


def check_callback_url(url: str, allowed_hosts: Sequence[str]) -> httpx.URL:
    """Parse a callback URL; refuse it unless it is http(s) to an allowed host (``ragbot.sources.ssrf``)."""
    parsed, _ = check_url(url, AllowList.from_entries(allowed_hosts))
    return parsed


class WikiPageSource:
    """Fetches pages from the content API, implementing ``ports.PageSource``."""

    def __init__(
        self,
        *,
        allowed_hosts: Sequence[str],
        max_bytes: int,
        timeout_s: float,
        max_redirects: int = 3,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        self.allowed_hosts = tuple(allowed_hosts)
        self.max_bytes = max_bytes
        self.timeout_s = timeout_s
        self.max_redirects = max_redirects
        self._client = client
        self._owns_client = client is None

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(
                timeout=httpx.Timeout(self.timeout_s),
                follow_redirects=False,
                headers={"User-Agent": USER_AGENT, "Accept": "application/json"},
                trust_env=False,
                transport=PinnedTransport(allowed_hosts=self.allowed_hosts),
            )
        return self._client

    async def fetch(self, *, page_id: int, callback_url: str) -> Page | None:
        """The page, or None when the wiki says it left scope."""
        url = check_callback_url(f"{callback_url}{page_id}", self.allowed_hosts)
        for _ in range(self.max_redirects + 1):
            status, body, location = await self._get(url)
            if status in _REDIRECTS:
                if not location:
                    raise SourceRefused(f"{url}: redirect {status} without a Location header")
                url = check_callback_url(str(url.join(location)), self.allowed_hosts)
                continue
            if status in _GONE:
                logger.info("page left scope", extra={"page_id": page_id, "status": status})
                return None
            if status >= 500 or status in _RETRYABLE_4XX:
                raise SourceError(f"{url}: the wiki answered {status}")
            if status != 200:
                raise SourceRefused(f"{url}: the wiki answered {status}")
            return self._parse(body, page_id=page_id, url=url)
        raise SourceRefused(f"{callback_url}{page_id}: more than {self.max_redirects} redirects")

    async def _get(self, url: httpx.URL) -> tuple[int, bytes, str | None]:
        headers = {}
        rid = get_request_id()
        if rid:
            headers[REQUEST_ID_HEADER] = rid
        try:
            async with self._http().stream("GET", url, headers=headers) as response:
                if response.status_code != 200:
                    return response.status_code, b"", response.headers.get("location")
                declared = response.headers.get("content-length")
                if declared and declared.isdigit() and int(declared) > self.max_bytes:
                    raise SourceRefused(f"{url}: page is {declared} bytes, over the {self.max_bytes} cap")
                chunks: list[bytes] = []
                size = 0
                async for chunk in response.aiter_bytes():
                    size += len(chunk)
                    if size > self.max_bytes:
                        raise SourceRefused(f"{url}: page is over the {self.max_bytes}-byte cap")
                    chunks.append(chunk)
                return 200, b"".join(chunks), None
        except httpx.TimeoutException:
            raise SourceError(f"{url}: timed out after {self.timeout_s} s") from None
        except httpx.DecodingError as exc:
            raise SourceRefused(f"{url}: undecodable body ({exc})") from None
        except httpx.TransportError as exc:
            raise SourceError(f"{url}: {type(exc).__name__}: {exc}") from None

    def _parse(self, body: bytes, *, page_id: int, url: httpx.URL) -> Page | None:
        try:
            data: Any = loads_strict(body, max_depth=64)
        except JSONRefused as exc:
            raise SourceRefused(f"{url}: body is not JSON ({exc})") from None
        if not isinstance(data, dict):
            raise SourceRefused(f"{url}: body is not a JSON object")
        if gone_body(data):
            logger.info("page left scope", extra={"page_id": page_id, "status": data.get("httpCode")})
            return None
        try:
            page = page_from_content_body(data)
        except (KeyError, TypeError, ValueError, ValidationError) as exc:
            raise SourceRefused(f"{url}: not a content API page ({type(exc).__name__}: {exc})") from None
        if page.page_id != page_id:
            raise SourceRefused(f"{url}: asked for page {page_id}, got page {page.page_id}")
        return page

    async def aclose(self) -> None:
        """Close the HTTP client if this source created it."""
        if self._client is not None and self._owns_client:
            await self._client.aclose()
            self._client = None
