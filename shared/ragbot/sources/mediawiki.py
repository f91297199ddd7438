"""Any MediaWiki through its core Action API (``ragbot.ports.WikiApi``): pages, page lists, recent changes.

Pages come from ``action=parse`` (rendered HTML, revision, categories, display title) and become
heading-aware blocks (``ragbot.sources.wiki_html``). Changes come from ``list=recentchanges`` (edits,
new pages and the delete, move and restore log entries) after a cursor; the caller looks each touched
page up again (``states``), so a delete, a move out of the namespaces or a restore all read the same way.
Transport failures, 5xx and the API's ``maxlag``/``readonly`` errors -> ``SourceError`` (retry); other API
errors -> ``SourceRefused``.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from typing import Any

import httpx

from ragbot.errors import SourceError, SourceRefused
from ragbot.schemas.mediawiki import WikiChanges, WikiCursor, WikiPageState
from ragbot.schemas.pages import Page
from ragbot.settings import MediaWikiSettings
from ragbot.sources.wiki_html import blocks_from_html

USER_AGENT = "ragbot-mediawiki/0.1"
_RETRYABLE_CODES = frozenset({"maxlag", "readonly", "internal_api_error_DBQueryError", "ratelimited"})
_GONE_CODES = frozenset({"nosuchpageid", "missingtitle", "nosuchrevid"})
_TAG = re.compile(r"<[^>]+>")


class MediaWikiApi:
    """An async client for one wiki's api.php; ``start()`` opens it (and logs in when a user is set)."""

    def __init__(
        self, settings: MediaWikiSettings, *, transport: httpx.AsyncBaseTransport | None = None
    ) -> None:
        if not settings.api_url:
            raise SourceRefused("RAGBOT_MEDIAWIKI_API_URL is not set")
        self._settings = settings
        self._api_url = settings.api_url
        self._transport = transport
        self._client: httpx.AsyncClient | None = None

    async def start(self) -> None:
        self._client = httpx.AsyncClient(
            timeout=self._settings.timeout_s, headers={"User-Agent": USER_AGENT}, transport=self._transport
        )
        if self._settings.user and self._settings.password:
            await self._login(self._settings.user, self._settings.password.get_secret_value())

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def _login(self, user: str, password: str) -> None:
        tokens = await self._call({"action": "query", "meta": "tokens", "type": "login"})
        token = tokens["query"]["tokens"]["logintoken"]
        result = await self._call(
            {"action": "login", "lgname": user, "lgpassword": password, "lgtoken": token}, post=True
        )
        if result.get("login", {}).get("result") != "Success":
            raise SourceRefused(f"login to {self._api_url} as {user} failed: {result.get('login')}")

    async def _call(self, params: dict[str, Any], *, post: bool = False) -> dict[str, Any]:
        if self._client is None:
            raise SourceError("the MediaWiki client is not started")
        query = {"format": "json", "formatversion": "2", **params}
        try:
            if post:
                response = await self._client.post(self._api_url, data=query)
            else:
                response = await self._client.get(self._api_url, params=query)
        except httpx.HTTPError as exc:
            raise SourceError(f"{self._api_url}: {exc!r}") from exc
        if response.status_code >= 500 or response.status_code in (408, 429):
            raise SourceError(f"{self._api_url} answered HTTP {response.status_code}")
        if response.status_code != 200:
            raise SourceRefused(f"{self._api_url} answered HTTP {response.status_code}")
        try:
            body: dict[str, Any] = response.json()
        except ValueError as exc:
            raise SourceRefused(f"{self._api_url} did not answer JSON") from exc
        error = body.get("error")
        if isinstance(error, dict):
            code = str(error.get("code", ""))
            if code in _GONE_CODES:
                body["_gone"] = True
                return body
            kind = SourceError if code in _RETRYABLE_CODES else SourceRefused
            raise kind(f"{self._api_url} {params.get('action')}: {code}: {error.get('info', '')}")
        return body

    async def page(self, *, page_id: int) -> Page | None:
        body = await self._call(
            {
                "action": "parse",
                "pageid": page_id,
                "prop": "text|revid|categories|displaytitle",
                "redirects": "0",
            }
        )
        if body.get("_gone"):
            return None
        parsed = body["parse"]
        blocks = blocks_from_html(str(parsed.get("text", "")))
        title = html.unescape(_TAG.sub("", str(parsed.get("displaytitle") or parsed.get("title", ""))))
        categories = [
            str(c["category"]).replace("_", " ") for c in parsed.get("categories", []) if "category" in c
        ]
        return Page(
            page_id=int(parsed["pageid"]),
            revision_id=int(parsed.get("revid") or 0),
            title=title,
            namespace=int(parsed.get("ns", 0)) if "ns" in parsed else None,
            content="\n\n".join(b.text for b in blocks),
            categories=categories,
            blocks=blocks,
            source="wiki",
        )

    async def states(self, *, page_ids: Sequence[int]) -> list[WikiPageState]:
        found: list[WikiPageState] = []
        ids = list(dict.fromkeys(page_ids))
        for start in range(0, len(ids), self._settings.batch_size):
            batch = ids[start : start + self._settings.batch_size]
            body = await self._call(
                {"action": "query", "pageids": "|".join(str(i) for i in batch), "prop": "info"}
            )
            for item in body.get("query", {}).get("pages", []):
                found.append(_state(item))
        return found

    async def all_pages(self) -> list[WikiPageState]:
        pages: list[WikiPageState] = []
        for namespace in self._settings.namespaces:
            params: dict[str, Any] = {
                "action": "query",
                "generator": "allpages",
                "gapnamespace": namespace,
                "gapfilterredir": "nonredirects",
                "gaplimit": self._settings.batch_size,
                "prop": "info",
            }
            while True:
                body = await self._call(params)
                pages.extend(_state(item) for item in body.get("query", {}).get("pages", []))
                if "continue" not in body:
                    break
                params = {**params, **body["continue"]}
        return sorted(pages, key=lambda p: p.page_id)

    async def latest_cursor(self) -> WikiCursor:
        body = await self._call(
            {
                "action": "query",
                "list": "recentchanges",
                "rcdir": "older",
                "rclimit": 1,
                "rcprop": "ids|timestamp",
            }
        )
        changes = body.get("query", {}).get("recentchanges", [])
        if not changes:
            return WikiCursor()
        return WikiCursor(rcid=int(changes[0]["rcid"]), timestamp=str(changes[0]["timestamp"]))

    async def changes(self, *, since: WikiCursor) -> WikiChanges:
        params: dict[str, Any] = {
            "action": "query",
            "list": "recentchanges",
            "rcdir": "newer",
            "rctype": "edit|new|log",
            "rcprop": "ids|timestamp|title|loginfo",
            "rclimit": self._settings.batch_size,
        }
        if since.timestamp:
            params["rcstart"] = since.timestamp
        touched: dict[int, None] = {}
        cursor = since
        while True:
            body = await self._call(params)
            for change in body.get("query", {}).get("recentchanges", []):
                rcid = int(change["rcid"])
                if rcid <= since.rcid:
                    continue  # rcstart is inclusive: the cursor's own second is read again
                if rcid > cursor.rcid:
                    cursor = WikiCursor(rcid=rcid, timestamp=str(change["timestamp"]))
                if change.get("type") == "log" and change.get("logtype") not in ("delete", "move"):
                    continue
                page_id = int(change.get("pageid") or 0)
                if page_id > 0:
                    touched[page_id] = None
            if "continue" not in body:
                break
            params = {**params, **body["continue"]}
        return WikiChanges(page_ids=list(touched), cursor=cursor)


def _state(item: dict[str, Any]) -> WikiPageState:
    """One ``prop=info`` page as a state (``missing`` pages exist no more)."""
    return WikiPageState(
        page_id=int(item["pageid"]),
        title=str(item.get("title", "")),
        namespace=int(item.get("ns", 0)),
        revision_id=int(item.get("lastrevid") or 0),
        exists=not item.get("missing", False),
        redirect=bool(item.get("redirect", False)),
    )
