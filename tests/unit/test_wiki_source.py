"""WikiPageSource: allow-list on every hop, size cap, timeouts and status mapping (httpx.MockTransport)."""

from __future__ import annotations

import json
from collections.abc import Callable

import httpx
import pytest

from ragbot.errors import SourceError, SourceRefused
from ragbot.sources.wiki import WikiPageSource, check_callback_url, host_allowed

BASE = "http://wiki.test/w/rest.php/cbragcontent/v0/page_id/"
PAGE = {
    "page_id": 7,
    "revision_id": 42,
    "revision_date": "20250102030405",
    "title": "דמי אבטלה",
    "namespace": 0,
    "url": "http://wiki.test/wiki/x",
    "summary": "s",
    "content": "== כותרת ==\nטקסט",
    "contentHtml": "<p>x</p>",
    "categories": ["a"],
    "articleType": "right",
}

Handler = Callable[[httpx.Request], httpx.Response]


def source(
    handler: Handler, *, max_bytes: int = 100_000, hosts: tuple[str, ...] = ("wiki.test",)
) -> WikiPageSource:
    client = httpx.AsyncClient(transport=httpx.MockTransport(handler), follow_redirects=False)
    return WikiPageSource(allowed_hosts=hosts, max_bytes=max_bytes, timeout_s=1.0, client=client)


async def test_fetch_builds_a_page_from_the_content_api() -> None:
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        return httpx.Response(200, json=PAGE)

    page = await source(handler).fetch(page_id=7, callback_url=BASE)
    assert seen == [BASE + "7"]
    assert page is not None
    assert (page.page_id, page.revision_id, page.title) == (7, 42, "דמי אבטלה")
    assert page.revision_date is not None and page.revision_date.year == 2025
    assert page.extra == {"articleType": "right"}


@pytest.mark.parametrize("status", [404, 410])
async def test_gone_means_out_of_scope(status: int) -> None:
    assert await source(lambda r: httpx.Response(status)).fetch(page_id=7, callback_url=BASE) is None


@pytest.mark.parametrize("status", [500, 502, 503, 429])
async def test_server_errors_are_retryable(status: int) -> None:
    with pytest.raises(SourceError, match=str(status)):
        await source(lambda r: httpx.Response(status)).fetch(page_id=7, callback_url=BASE)


@pytest.mark.parametrize("status", [400, 401, 403])
async def test_other_client_errors_are_refused(status: int) -> None:
    with pytest.raises(SourceRefused, match=str(status)):
        await source(lambda r: httpx.Response(status)).fetch(page_id=7, callback_url=BASE)


async def test_timeout_is_retryable() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("slow", request=request)

    with pytest.raises(SourceError, match="timed out"):
        await source(handler).fetch(page_id=7, callback_url=BASE)


async def test_connection_error_is_retryable() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    with pytest.raises(SourceError, match="ConnectError"):
        await source(handler).fetch(page_id=7, callback_url=BASE)


@pytest.mark.parametrize(
    ("body", "match"),
    [
        (b"not json", "not JSON"),
        (b"[1, 2]", "not a JSON object"),
        (b'{"title": "x"}', "not a content API page"),
    ],
)
async def test_bad_bodies_are_refused(body: bytes, match: str) -> None:
    with pytest.raises(SourceRefused, match=match):
        await source(lambda r: httpx.Response(200, content=body)).fetch(page_id=7, callback_url=BASE)


async def test_a_different_page_is_refused() -> None:
    with pytest.raises(SourceRefused, match="got page 8"):
        other = {**PAGE, "page_id": 8}
        await source(lambda r: httpx.Response(200, json=other)).fetch(page_id=7, callback_url=BASE)


async def test_declared_size_over_cap_is_refused() -> None:
    body = json.dumps(PAGE).encode()
    with pytest.raises(SourceRefused, match="cap"):
        await source(lambda r: httpx.Response(200, content=body), max_bytes=len(body) - 1).fetch(
            page_id=7, callback_url=BASE
        )


async def test_streamed_size_over_cap_is_refused_without_reading_everything() -> None:
    chunks_sent = 0

    async def endless() -> object:
        nonlocal chunks_sent
        for _ in range(1000):
            chunks_sent += 1
            yield b"x" * 1024

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=endless())  # type: ignore[arg-type]

    with pytest.raises(SourceRefused, match="cap"):
        await source(handler, max_bytes=10_000).fetch(page_id=7, callback_url=BASE)
    assert chunks_sent < 20


async def test_redirect_to_allowed_host_is_followed() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.host == "wiki.test":
            return httpx.Response(301, headers={"Location": "https://mirror.wiki.test/p/7"})
        return httpx.Response(200, json=PAGE)

    page = await source(handler, hosts=("wiki.test", "*.wiki.test")).fetch(page_id=7, callback_url=BASE)
    assert page is not None and page.page_id == 7


async def test_redirect_to_other_host_is_refused_before_contacting_it() -> None:
    contacted: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        contacted.append(request.url.host)
        return httpx.Response(302, headers={"Location": "http://169.254.169.254/latest/meta-data"})

    with pytest.raises(SourceRefused, match=r"169\.254\.169\.254"):
        await source(handler).fetch(page_id=7, callback_url=BASE)
    assert contacted == ["wiki.test"]


async def test_relative_redirect_stays_on_host() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/7"):
            return httpx.Response(307, headers={"Location": "/moved/7.json"})
        return httpx.Response(200, json=PAGE)

    assert await source(handler).fetch(page_id=7, callback_url=BASE) is not None


async def test_redirect_loop_stops_after_three() -> None:
    calls = 0

    def handler(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        return httpx.Response(302, headers={"Location": f"/hop/{calls}"})

    with pytest.raises(SourceRefused, match="redirects"):
        await source(handler).fetch(page_id=7, callback_url=BASE)
    assert calls == 4


async def test_not_allowed_host_is_never_contacted() -> None:
    contacted: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        contacted.append(str(request.url))
        return httpx.Response(200, json=PAGE)

    with pytest.raises(SourceRefused, match="not allowed"):
        await source(handler).fetch(page_id=7, callback_url="http://evil.test/x/")
    assert contacted == []


@pytest.mark.parametrize(
    ("host", "allowed", "expected"),
    [
        ("wiki.test", ["wiki.test"], True),
        ("WIKI.test.", ["wiki.test"], True),
        ("a.wiki.test", ["*.wiki.test"], True),
        ("evilwiki.test", ["*.wiki.test"], False),
        ("wiki.test.evil", ["wiki.test"], False),
        ("anything", ["*"], True),
        ("x", [], False),
    ],
)
def test_host_allowed(host: str, allowed: list[str], expected: bool) -> None:
    assert host_allowed(host, allowed) is expected


@pytest.mark.parametrize(
    ("url", "match"),
    [
        ("ftp://wiki.test/x", "http"),
        ("http://user:pw@wiki.test/x", "credentials"),
        ("http://wiki.test@evil.test/x", "credentials"),
        ("http://evil.test/x?u=http://wiki.test/", "evil.test"),
    ],
)
def test_check_callback_url_refuses(url: str, match: str) -> None:
    with pytest.raises(SourceRefused, match=match):
        check_callback_url(url, ["wiki.test"])


async def test_the_extensions_not_found_body_means_out_of_scope_whatever_the_status() -> None:
    gone = {"message": "Invalid page ID provided: 7", "httpCode": 404, "httpReason": "Not Found"}
    assert await source(lambda r: httpx.Response(200, json=gone)).fetch(page_id=7, callback_url=BASE) is None
    assert await source(lambda r: httpx.Response(404, json=gone)).fetch(page_id=7, callback_url=BASE) is None


async def test_content_html_becomes_the_pages_blocks() -> None:
    body = dict(
        PAGE, contentHtml='<h2><span class="mw-headline">כותרת</span></h2><p>טקסט <a href="/x">קישור</a></p>'
    )
    page = await source(lambda r: httpx.Response(200, json=body)).fetch(page_id=7, callback_url=BASE)
    assert page is not None and page.blocks is not None
    assert [(b.heading, b.text) for b in page.blocks] == [("כותרת", "טקסט קישור")]
