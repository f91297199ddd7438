"""SSRF on the callback URL: IP literals in every form, schemes, credentials, redirects, and names that
resolve where the allow-list does not reach, checked at the ping (422) and again at the connect (the
pinned transport against a real local HTTP server)."""

from __future__ import annotations

import json
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
from fastapi.testclient import TestClient
from support.fakes import FakeJobs, FakeSender, MemoryStore

from ragbot.errors import SourceRefused, is_retryable
from ragbot.ports import SearchStore
from ragbot.settings import IngestSettings
from ragbot.sources.ssrf import AllowList, PinnedTransport, check_url
from ragbot.sources.wiki import WikiPageSource, check_callback_url
from ragbot_ingest.app import create_app
from ragbot_ingest.deps import Resources

PATH = "/w/rest.php/cbragcontent/v0/page_id/"
PAGE = {"page_id": 7, "revision_id": 42, "title": "t", "content": "== h ==\ntext"}

# (url, words the refusal must hold: what is wrong or what to do)
HOSTILE = [
    ("http://2130706433/x/", "dotted-decimal"),
    ("http://0x7f000001/x/", "dotted-decimal"),
    ("http://0x7f.0.0.1/x/", "dotted-decimal"),
    ("http://127.1/x/", "dotted-decimal"),
    ("http://0177.0.0.1/x/", "valid"),
    ("http://[::ffff:127.0.0.1]/x/", "IPv4 address itself"),
    ("http://[::ffff:7f00:1]/x/", "IPv4 address itself"),
    ("http://0.0.0.0/x/", "unspecified"),
    ("http://169.254.169.254/latest/meta-data/", "link-local"),
    ("http://[::1]/x/", "loopback"),
    ("http://[fe80::1]/x/", "link-local"),
    ("http://10.0.0.5/x/", "private"),
    ("file:///etc/passwd", "http(s)"),
    ("gopher://wiki.test:70/_x", "http(s)"),
    ("ftp://wiki.test/x/", "http(s)"),
    ("http://wiki.test@evil.test/x/", "credentials"),
    ("http://user:pw@wiki.test/x/", "credentials"),
    ("http://evil.test/x/?u=http://wiki.test/", "not allowed"),
]


@pytest.mark.parametrize(("url", "words"), HOSTILE)
def test_hostile_callback_urls_are_refused_even_with_a_wildcard_list(url: str, words: str) -> None:
    # "*" lets any *name* in, never a numeric trick, a metadata or loopback address, or a credential.
    for hosts in (["wiki.test", "0.0.0.0"], ["*"]):
        if "evil.test" in url and hosts == ["*"]:
            continue  # "*" allows evil.test by name: that is what "*" means
        with pytest.raises(SourceRefused, match=None) as caught:
            check_callback_url(url, hosts)
        assert words in str(caught.value), (url, hosts, str(caught.value))


def test_loopback_is_allowed_only_when_listed() -> None:
    assert check_callback_url("http://127.0.0.1:8080/x/", ["127.0.0.1:8080"]).host == "127.0.0.1"
    assert check_callback_url("http://localhost:8080/x/", ["localhost:*"]).host == "localhost"
    with pytest.raises(SourceRefused, match="loopback"):
        check_callback_url("http://127.0.0.1/x/", ["*"])
    with pytest.raises(SourceRefused, match=r"127\.0\.0\.2.*loopback address"):
        check_callback_url("http://127.0.0.2/x/", ["127.0.0.1"])
    assert check_callback_url("http://10.1.2.3/x/", ["10.0.0.0/8"]).host == "10.1.2.3"


def test_an_address_policy_per_kind_of_match() -> None:
    allow = AllowList.from_entries(["wiki.internal", "*.kolzchut.org.il", "10.9.0.0/16"])
    import ipaddress

    def refusal(host: str, ip: str) -> str | None:
        match = allow.match(host)
        assert match is not None
        return allow.refusal(host=host, ip=ipaddress.ip_address(ip), match=match)

    assert refusal("wiki.internal", "10.1.1.1") is None  # listed by its exact name: private is fine
    assert refusal("www.kolzchut.org.il", "93.184.216.34") is None  # public through a wildcard
    assert "private" in (refusal("www.kolzchut.org.il", "10.1.1.1") or "")  # private through a wildcard
    assert refusal("www.kolzchut.org.il", "10.9.3.4") is None  # ... unless its network is listed
    assert "link-local" in (refusal("wiki.internal", "169.254.169.254") or "")
    assert "unspecified" in (refusal("wiki.internal", "0.0.0.0") or "")


# -- the ping refuses them with a 422 that says what to fix; accepted work is kept ---------------------


@pytest.fixture
def ingest() -> Iterator[tuple[TestClient, FakeJobs]]:
    jobs, sender, store = FakeJobs(), FakeSender(), MemoryStore()
    settings = IngestSettings(allowed_callback_hosts=["wiki.test", "127.0.0.1"])

    @asynccontextmanager
    async def resources() -> AsyncIterator[Resources]:
        yield Resources(settings=settings, jobs=jobs, sender=sender, store=cast(SearchStore, store))

    with TestClient(create_app(resources=resources)) as client:
        yield client, jobs


def test_the_ping_refuses_every_hostile_callback_and_keeps_what_it_accepted(
    ingest: tuple[TestClient, FakeJobs],
) -> None:
    client, jobs = ingest
    good = {"page_id": 1, "revision_id": 1, "revision_date": "20250101000000"}
    accepted = client.post("/v1/pages/changed", json={**good, "callback_url": "http://wiki.test" + PATH})
    assert accepted.status_code == 202
    job_id = accepted.json()["job_id"]
    for url, _ in HOSTILE:
        response = client.post("/v1/pages/changed", json={**good, "callback_url": url})
        assert response.status_code == 422, (url, response.text)
        [error] = response.json()["detail"]
        assert error["loc"][-1] == "callback_url", url
        assert "callback_url" in error["msg"], url
    assert client.get(f"/v1/jobs/{job_id}").status_code == 200
    assert len(jobs.records) == 1


# -- the pinned transport: resolve once, check, connect to the checked address --------------------------


class _Wiki:
    """A real HTTP server on 127.0.0.1 that records Host headers and can redirect."""

    def __init__(self) -> None:
        self.hosts: list[str] = []
        self.redirect_to: str | None = None
        wiki = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                wiki.hosts.append(self.headers.get("Host", ""))
                if wiki.redirect_to:
                    self.send_response(302)
                    self.send_header("Location", wiki.redirect_to)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                body = json.dumps(PAGE).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                """Quiet."""

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = int(self.server.server_address[1])
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def wiki() -> Iterator[_Wiki]:
    server = _Wiki()
    yield server
    server.close()


class _Resolver:
    """A resolver that answers from a table and counts its lookups."""

    def __init__(self, table: dict[str, list[str]]) -> None:
        self.table = table
        self.lookups: list[str] = []

    async def __call__(self, host: str, port: int) -> list[str]:
        self.lookups.append(host)
        return self.table[host]


def _source(hosts: list[str], resolver: _Resolver) -> WikiPageSource:
    client = httpx.AsyncClient(
        transport=PinnedTransport(allowed_hosts=hosts, resolve=resolver), follow_redirects=False
    )
    return WikiPageSource(allowed_hosts=hosts, max_bytes=100_000, timeout_s=5.0, client=client)


def any_port(hosts: list[str]) -> list[str]:
    """The same entries, each allowing any port (the test wikis listen on free ports)."""
    return [f"{h}:*" for h in hosts]


async def test_a_name_is_resolved_once_and_the_checked_address_is_the_one_connected(wiki: _Wiki) -> None:
    resolver = _Resolver({"wiki.internal": ["127.0.0.1"]})
    source = _source(any_port(["wiki.internal"]), resolver)
    page = await source.fetch(page_id=7, callback_url=f"http://wiki.internal:{wiki.port}{PATH}")
    assert page is not None and page.page_id == 7
    assert resolver.lookups == ["wiki.internal"]
    assert wiki.hosts == [f"wiki.internal:{wiki.port}"]  # Host kept: the name, not the address


async def test_a_wildcard_name_resolving_to_loopback_is_refused_before_connecting(wiki: _Wiki) -> None:
    resolver = _Resolver({"rebind.wiki.test": ["127.0.0.1"]})
    source = _source(any_port(["*.wiki.test"]), resolver)
    with pytest.raises(SourceRefused, match=r"resolves to 127\.0\.0\.1.*loopback") as caught:
        await source.fetch(page_id=7, callback_url=f"http://rebind.wiki.test:{wiki.port}{PATH}")
    assert not is_retryable(caught.value)  # the worker dead-letters it with this reason, no retry storm
    assert wiki.hosts == []


async def test_a_listed_name_resolving_to_the_metadata_service_is_refused(wiki: _Wiki) -> None:
    resolver = _Resolver({"wiki.internal": ["169.254.169.254"]})
    with pytest.raises(SourceRefused, match="link-local"):
        await _source(any_port(["wiki.internal"]), resolver).fetch(
            page_id=7, callback_url=f"http://wiki.internal:{wiki.port}{PATH}"
        )


async def test_one_bad_address_among_several_refuses_the_name(wiki: _Wiki) -> None:
    resolver = _Resolver({"www.wiki.test": ["93.184.216.34", "10.0.0.1"]})
    with pytest.raises(SourceRefused, match="private"):
        await _source(any_port(["*.wiki.test"]), resolver).fetch(
            page_id=7, callback_url=f"http://www.wiki.test:{wiki.port}{PATH}"
        )


async def test_a_redirect_to_an_allowed_name_on_a_forbidden_address_is_refused(wiki: _Wiki) -> None:
    resolver = _Resolver({"wiki.internal": ["127.0.0.1"], "cdn.wiki.test": ["169.254.169.254"]})
    wiki.redirect_to = f"http://cdn.wiki.test:{wiki.port}/p/7"
    source = _source(any_port(["wiki.internal", "*.wiki.test"]), resolver)
    with pytest.raises(SourceRefused, match="link-local"):
        await source.fetch(page_id=7, callback_url=f"http://wiki.internal:{wiki.port}{PATH}")
    assert len(wiki.hosts) == 1  # the first hop only


async def test_a_redirect_to_another_host_is_refused_before_contacting_it(wiki: _Wiki) -> None:
    resolver = _Resolver({"wiki.internal": ["127.0.0.1"]})
    wiki.redirect_to = "http://2130706433/latest"
    with pytest.raises(SourceRefused, match="dotted-decimal"):
        await _source(any_port(["wiki.internal", "*"]), resolver).fetch(
            page_id=7, callback_url=f"http://wiki.internal:{wiki.port}{PATH}"
        )
    assert resolver.lookups == ["wiki.internal"]


async def test_an_unresolvable_name_is_a_retryable_connect_error() -> None:
    async def nowhere(host: str, port: int) -> list[str]:
        raise OSError("Name or service not known")

    client = httpx.AsyncClient(transport=PinnedTransport(allowed_hosts=["wiki.test"], resolve=nowhere))
    source = WikiPageSource(allowed_hosts=["wiki.test"], max_bytes=1000, timeout_s=2.0, client=client)
    with pytest.raises(Exception) as caught:
        await source.fetch(page_id=7, callback_url="http://wiki.test" + PATH)
    assert is_retryable(caught.value) and "resolve" in str(caught.value)


def test_check_url_reports_how_the_host_matched() -> None:
    allow = AllowList.from_entries(["wiki.test", "*.kolzchut.org.il", "127.0.0.1:*"])
    assert check_url("https://wiki.test/x", allow)[1] == "exact"
    assert check_url("https://www.kolzchut.org.il/x", allow)[1] == "wildcard"
    assert check_url("http://127.0.0.1:9/x", allow)[1] == "address"


# -- the worker: a refused fetch dead-letters the job with its reason, no retry, no crash -----------------


@pytest.mark.parametrize(
    ("hosts", "resolved", "words"),
    [(["wiki.internal"], "169.254.169.254", "link-local"), (["*.wiki.test"], "10.0.0.7", "private")],
)
def test_the_worker_dead_letters_a_fetch_to_a_forbidden_address(
    wiki: _Wiki, hosts: list[str], resolved: str, words: str
) -> None:
    from prometheus_client import CollectorRegistry
    from support.fakes import FakeEvents, FakeRuntime, FakeTask

    from ragbot.messaging.events import EventPublisher
    from ragbot.messaging.jobs import JobStore
    from ragbot.observability.metrics import worker_metrics
    from ragbot.schemas.messages import INDEX_PAGE_TASK, IndexPage
    from ragbot.settings import WorkerSettings
    from ragbot_embedder import service
    from ragbot_embedder.tasks import TaskRunner

    host = "wiki.internal" if hosts == ["wiki.internal"] else "www.wiki.test"
    resolver = _Resolver({host: [resolved]})
    jobs, store = FakeJobs(), MemoryStore()
    jobs.seed(job_id="j1")
    ctx = service.IndexingContext(
        definition=cast(Any, None),
        embedders={},
        store=cast(SearchStore, store),
        source=_source(any_port(hosts), resolver),
        jobs=cast(JobStore, jobs),
        events=cast(EventPublisher, FakeEvents()),
        metrics=worker_metrics(CollectorRegistry()),
        max_tokens=512,
    )
    message = IndexPage(
        job_id="j1", page_id=7, revision_id=3, callback_url=f"http://{host}:{wiki.port}{PATH}"
    ).model_dump(mode="json")
    rt = cast(Any, FakeRuntime(ctx))
    runner = TaskRunner(
        name=INDEX_PAGE_TASK,
        model=IndexPage,
        handler=service.index_page,
        runtime=lambda: rt,
        settings=WorkerSettings(max_retries=3),
    )
    task = FakeTask(retries=0, request_id="rid-ssrf")
    assert runner(cast(Any, task), message) == "failed"
    assert task.retried == []  # refused, not retried
    [dead] = jobs.dead
    assert dead["attempts"] == 1 and "SourceRefused" in dead["error"] and words in dead["error"]
    assert wiki.hosts == []  # the forbidden address was never contacted (nor the listening server)


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (b'{"page_id": 7, "x": ' + b"[" * 10_000 + b"]" * 10_000 + b"}", "deeper"),
        (b'{"page_id": 1e400}', "64-bit float"),
        (b'{"page_id": ' + b"9" * 40 + b"}", "64-bit range"),
        (b'{"page_id": 7, "title": "\xff"}', "UTF-8"),
    ],
)
async def test_a_hostile_content_api_body_is_refused_not_crashed_on(body: bytes, words: str) -> None:
    client = httpx.AsyncClient(transport=httpx.MockTransport(lambda r: httpx.Response(200, content=body)))
    source = WikiPageSource(allowed_hosts=["wiki.test"], max_bytes=1_000_000, timeout_s=1.0, client=client)
    with pytest.raises(SourceRefused, match="not JSON") as caught:
        await source.fetch(page_id=7, callback_url="http://wiki.test" + PATH)
    assert words in str(caught.value) and not is_retryable(caught.value)


@pytest.fixture
def tls_cert(tmp_path: Path) -> tuple[Path, Path]:
    """A self-signed certificate for the name wiki.internal (never for 127.0.0.1)."""
    import subprocess

    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subject = ["-subj", "/CN=wiki.internal", "-addext", "subjectAltName=DNS:wiki.internal"]
    files = ["-keyout", str(key), "-out", str(cert)]
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", *subject, *files],
        check=True,
        capture_output=True,
    )
    return cert, key


async def test_tls_over_the_pinned_address_verifies_the_name_not_the_address(
    tls_cert: tuple[Path, Path],
) -> None:
    import ssl

    cert, key = tls_cert
    server = _Wiki()
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(cert, key)
    server.server.socket = server_context.wrap_socket(server.server.socket, server_side=True)
    try:
        client_context = ssl.create_default_context(cafile=str(cert))
        resolver = _Resolver({"wiki.internal": ["127.0.0.1"]})
        allowed = [f"wiki.internal:{server.port}"]
        transport = PinnedTransport(allowed_hosts=allowed, resolve=resolver, ssl_context=client_context)
        source = WikiPageSource(
            allowed_hosts=allowed,
            max_bytes=100_000,
            timeout_s=5.0,
            client=httpx.AsyncClient(transport=transport),
        )
        page = await source.fetch(page_id=7, callback_url=f"https://wiki.internal:{server.port}{PATH}")
        assert page is not None and page.page_id == 7  # the certificate was checked for wiki.internal
        assert server.hosts == [f"wiki.internal:{server.port}"]
    finally:
        server.close()


# -- ports: an entry without one allows only the scheme's default (issue 28 item 11) ---------------------


@pytest.mark.parametrize(
    ("url", "hosts"),
    [
        ("http://127.0.0.1:6379/", ["127.0.0.1"]),  # Redis next to an allowed wiki
        ("http://localhost:9200/", ["localhost"]),
        ("https://wiki.test:8443/x", ["wiki.test"]),
        ("http://wiki.test:443/x", ["wiki.test"]),  # 443 is https's default, not http's
        ("http://www.kolzchut.org.il:8080/x", ["*.kolzchut.org.il"]),
        ("http://10.1.2.3:22/x", ["10.0.0.0/8"]),
        ("http://127.0.0.1:6379/", ["127.0.0.1:8480"]),
        ("http://[::1]:6379/", ["[::1]:8480"]),
    ],
)
def test_a_port_not_listed_is_refused_naming_the_entry_to_add(url: str, hosts: list[str]) -> None:
    with pytest.raises(SourceRefused, match=r"port \d+ is not allowed.*add '.+:\d+' to"):
        check_callback_url(url, hosts)


def test_listed_ports_and_default_ports_are_allowed() -> None:
    assert check_callback_url("http://127.0.0.1/x", ["127.0.0.1"]).port is None
    assert check_callback_url("https://wiki.test/x", ["wiki.test"]).host == "wiki.test"
    assert check_callback_url("http://127.0.0.1:8480/x", ["127.0.0.1:8480"]).port == 8480
    assert check_callback_url("http://[::1]:8480/x", ["[::1]:8480"]).port == 8480
    assert check_callback_url("http://wiki.test:8080/x", ["wiki.test", "wiki.test:8080"]).port == 8080
    assert check_callback_url("http://wiki.test:31337/x", ["wiki.test:*"]).port == 31337


def test_an_entry_with_a_bad_port_is_refused_as_configuration() -> None:
    from ragbot.settings import IngestSettings

    for entry in ("wiki.test:0", "wiki.test:65536", "wiki.test:http"):
        with pytest.raises(ValueError, match="port must be a number"):
            IngestSettings(allowed_callback_hosts=[entry])


async def test_the_transport_refuses_a_port_the_list_does_not_name() -> None:
    resolver = _Resolver({"wiki.internal": ["127.0.0.1"]})
    client = httpx.AsyncClient(transport=PinnedTransport(allowed_hosts=["wiki.internal"], resolve=resolver))
    async with client:
        with pytest.raises(SourceRefused, match="port 6379 is not allowed"):
            await client.get("http://wiki.internal:6379/")
    assert resolver.lookups == [], "refused before resolving or connecting"
