"""Credentials with scopes: every write route refused without a key or with a wrong-scope one, each
credential form, rotation, trusted networks and proxies, the ping token, /metrics, keys never logged."""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable, Iterator

import httpx
import pytest
from fastapi import APIRouter, FastAPI, Request
from fastapi.testclient import TestClient
from support.auth import KEYS, PING_TOKEN, auth_settings, chat_app, ingest_app, retriever_app, write_routes

from ragbot.http.auth import forwarded_client, include_scoped, install_auth, sha256_hex
from ragbot.observability.http import add_error_handlers
from ragbot.settings import ApiKeyEntry, AuthSettings

PING = {
    "page_id": 123,
    "revision_id": 456,
    "revision_date": "20250101120000",
    "callback_url": "http://wiki.test/w/rest.php/cbragcontent/v0/page_id/",
}
APPS: dict[str, Callable[[AuthSettings], FastAPI]] = {
    "ingest": ingest_app,
    "chat": chat_app,
    "retriever": retriever_app,
}
# A key whose scopes do not include what each service's writes need.
WRONG_KEY = {"ingest": "kzchatbot", "chat": "prometheus", "retriever": "wiki"}


def bearer(name: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS[name][0]}"}


@pytest.fixture
def ingest() -> Iterator[TestClient]:
    with TestClient(ingest_app(auth_settings())) as client:
        yield client


@pytest.mark.parametrize("service", sorted(APPS))
def test_every_write_route_is_refused_without_a_key_and_with_a_wrong_scope(service: str) -> None:
    app = APPS[service](auth_settings())
    routes = list(write_routes(app))
    assert routes, "the route table has write routes"
    with TestClient(app) as client:
        for method, path in routes:
            anonymous = client.request(method, path, json={})
            assert anonymous.status_code == 401, (method, path, anonymous.text)
            assert anonymous.headers["WWW-Authenticate"].startswith("Bearer")
            assert "Authorization: Bearer" in anonymous.text
            wrong = client.request(method, path, json={}, headers=bearer(WRONG_KEY[service]))
            assert wrong.status_code == 403, (method, path, wrong.text)
            assert "lacks the" in wrong.text


def test_each_credential_form_is_accepted(ingest: TestClient) -> None:
    key = KEYS["wiki"][0]
    basic = base64.b64encode(f"anyone:{key}".encode()).decode()
    for headers in (
        {"Authorization": f"Bearer {key}"},
        {"X-API-Key": key},
        {"Authorization": f"Basic {basic}"},
    ):
        response = ingest.get("/v1/jobs", params={"state": "failed"}, headers=headers)
        assert response.status_code == 200, (headers, response.text)
    # Basic credentials in the URL, as a MediaWiki extension's configured URL carries them.
    assert ingest.get(f"http://wiki:{key}@testserver/v1/jobs?state=failed").status_code == 200


def test_a_key_that_matches_nothing_is_401_naming_the_form_sent(ingest: TestClient) -> None:
    response = ingest.get("/v1/jobs", params={"state": "failed"}, headers={"X-API-Key": "x" * 30})
    assert response.status_code == 401
    assert "api_key credential matches no configured key" in response.json()["detail"]


def test_two_keys_for_one_scope_both_work_so_a_key_rotates_without_downtime() -> None:
    old, new = KEYS["wiki"], KEYS["wiki-next"]
    both = auth_settings()
    only_new = auth_settings(keys=[{"name": "wiki-next", "scopes": new[1], "key": new[0]}])
    with TestClient(ingest_app(both)) as client:
        for key in (old[0], new[0]):
            assert client.post("/v1/pages/changed", json=PING, headers={"X-API-Key": key}).status_code == 202
    with TestClient(ingest_app(only_new)) as client:
        assert client.post("/v1/pages/changed", json=PING, headers={"X-API-Key": old[0]}).status_code == 401
        assert client.post("/v1/pages/changed", json=PING, headers={"X-API-Key": new[0]}).status_code == 202


def test_a_plain_key_is_hashed_at_load_and_not_kept() -> None:
    key = "plain-key-from-env-0123456789"
    entry = ApiKeyEntry.model_validate({"name": "wiki", "scopes": ["ingest"], "key": key})
    assert entry.sha256 == sha256_hex(key)
    assert key not in repr(entry) and key not in entry.model_dump_json()
    with pytest.raises(ValueError, match="at least 16 characters"):
        ApiKeyEntry.model_validate({"name": "wiki", "scopes": ["ingest"], "key": "short"})


def test_the_ping_token_opens_the_ping_route_only(ingest: TestClient) -> None:
    ping = ingest.post("/v1/pages/changed", params={"token": PING_TOKEN}, json=PING)
    assert ping.status_code == 202, ping.text
    wrong = ingest.post("/v1/pages/changed", params={"token": "t" * 30}, json=PING)
    assert wrong.status_code == 401 and "ping token" in wrong.json()["detail"]
    assert ingest.delete("/v1/pages/123", params={"token": PING_TOKEN}).status_code == 401
    assert ingest.post("/v1/pages", params={"token": PING_TOKEN}, json={}).status_code == 401


async def _get(
    app: FastAPI, path: str, *, peer: str, headers: dict[str, str] | None = None
) -> httpx.Response:
    transport = httpx.ASGITransport(app=app, client=(peer, 40000))
    async with httpx.AsyncClient(transport=transport, base_url="http://svc") as client:
        return await client.get(path, headers=headers)


def probe_app(settings: AuthSettings) -> FastAPI:
    """A bare app with one chat-scoped route that echoes what the dependency put on request.state."""
    app = FastAPI()
    install_auth(app, settings)
    add_error_handlers(app)
    router = APIRouter()

    @router.get("/whoami")
    async def whoami(request: Request) -> dict[str, object]:
        principal = request.state.principal
        return {"name": principal.name, "method": principal.method, "ip": request.state.client_ip}

    include_scoped(app, router, "chat")
    return app


async def test_trusted_networks_and_forwarded_for_only_from_a_trusted_proxy() -> None:
    settings = auth_settings(trusted_networks={"chat": ["10.1.0.0/16"]}, trusted_proxies=["192.0.2.10/32"])
    app = probe_app(settings)
    inside = await _get(app, "/whoami", peer="10.1.2.3")
    assert inside.status_code == 200 and inside.json() == {
        "name": "network:10.1.2.3",
        "method": "network",
        "ip": "10.1.2.3",
    }
    assert (await _get(app, "/whoami", peer="10.2.0.1")).status_code == 401
    spoofed = await _get(app, "/whoami", peer="203.0.113.9", headers={"X-Forwarded-For": "10.1.2.3"})
    assert spoofed.status_code == 401, "X-Forwarded-For from a peer that is no trusted proxy is ignored"
    proxied = await _get(app, "/whoami", peer="192.0.2.10", headers={"X-Forwarded-For": "6.6.6.6, 10.1.9.9"})
    assert proxied.status_code == 200 and proxied.json()["ip"] == "10.1.9.9"
    keyed = await _get(app, "/whoami", peer="203.0.113.9", headers=bearer("kzchatbot"))
    assert keyed.json() == {"name": "kzchatbot", "method": "bearer", "ip": "203.0.113.9"}


def test_forwarded_client_takes_the_last_untrusted_hop() -> None:
    proxies = [AuthSettings(trusted_proxies=["10.0.0.0/8"]).trusted_proxies[0]]
    assert forwarded_client("10.0.0.1", "1.1.1.1, 2.2.2.2, 10.0.0.7", proxies) == "2.2.2.2"
    assert forwarded_client("8.8.8.8", "1.1.1.1", proxies) == "8.8.8.8"
    assert forwarded_client("::ffff:10.0.0.1", "garbage", proxies) == "10.0.0.1"


async def test_with_nothing_configured_loopback_is_trusted_for_every_scope_and_nothing_else() -> None:
    app = probe_app(AuthSettings())
    assert (await _get(app, "/whoami", peer="127.0.0.1")).json()["method"] == "network"
    assert (await _get(app, "/whoami", peer="::1")).status_code == 200
    assert (await _get(app, "/whoami", peer="192.168.1.20")).status_code == 401
    configured = probe_app(auth_settings())
    assert (await _get(configured, "/whoami", peer="127.0.0.1")).status_code == 401


async def test_a_key_that_matches_nothing_counts_for_nothing_on_a_trusted_network() -> None:
    """SDKs always send a key (OpenAI's sends ``Bearer unused``): where the network alone lets a caller
    in, an unknown key does not lock it out; anywhere else it is still a 401."""
    unknown = {"Authorization": "Bearer unused"}
    dev = probe_app(AuthSettings())
    inside = await _get(dev, "/whoami", peer="127.0.0.1", headers=unknown)
    assert inside.status_code == 200 and inside.json()["method"] == "network"
    assert (await _get(dev, "/whoami", peer="192.168.1.20", headers=unknown)).status_code == 401
    trusted = probe_app(auth_settings(trusted_networks={"chat": ["10.1.0.0/16"]}))
    assert (await _get(trusted, "/whoami", peer="10.1.2.3", headers=unknown)).status_code == 200
    assert (await _get(trusted, "/whoami", peer="203.0.113.9", headers=unknown)).status_code == 401


def test_metrics_needs_the_metrics_scope_and_health_stays_open(ingest: TestClient) -> None:
    assert ingest.get("/healthz").status_code == 200
    assert ingest.get("/readyz").status_code in (200, 503)
    assert ingest.get("/metrics").status_code == 401
    assert ingest.get("/metrics", headers=bearer("wiki")).status_code == 403
    assert ingest.get("/metrics", headers=bearer("prometheus")).status_code == 200


def test_openapi_declares_the_security_schemes(ingest: TestClient) -> None:
    spec = ingest.get("/openapi.json").json()
    schemes = spec["components"]["securitySchemes"]
    assert schemes["bearer"] == {
        "type": "http",
        "scheme": "bearer",
        "description": "`Authorization: Bearer <key>`",
    }
    assert schemes["apiKey"]["in"] == "header" and schemes["apiKey"]["name"] == "X-API-Key"
    assert schemes["basic"]["scheme"] == "basic"
    assert schemes["pingToken"]["in"] == "query"
    ping = spec["paths"]["/v1/pages/changed"]["post"]["security"]
    assert {"pingToken": []} in ping and {"bearer": []} in ping
    assert {"pingToken": []} not in spec["paths"]["/v1/pages"]["post"]["security"]


def test_keys_are_never_logged(ingest: TestClient, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    key = KEYS["wiki"][0]
    ingest.post("/v1/pages/changed", json=PING, headers={"X-API-Key": key})
    ingest.get("/v1/jobs", params={"state": "failed"}, headers={"Authorization": f"Bearer {key}x"})
    ingest.post("/v1/pages/changed", params={"token": PING_TOKEN}, json=PING)
    ingest.post("/v1/pages/changed", params={"token": PING_TOKEN + "x"}, json=PING)
    ours = [r for r in caplog.records if r.name.startswith("ragbot")]
    assert ours
    for record in ours:
        text = record.getMessage() + repr(record.__dict__)
        assert key not in text and PING_TOKEN not in text


def test_the_cli_prints_a_key_whose_hash_it_gives(capsys: pytest.CaptureFixture[str]) -> None:
    from ragbot.cli.main import main

    assert main(["auth", "hash-key", "--name", "wiki", "--scope", "ingest"]) == 0
    out = capsys.readouterr().out.splitlines()
    key = out[0].removeprefix("key: ")
    entry = ApiKeyEntry.model_validate_json(out[1].removeprefix("entry: "))
    assert entry.name == "wiki" and entry.scopes == {"ingest"} and entry.sha256 == sha256_hex(key)
    assert len(key) >= 40


def test_malformed_credentials_are_401_not_500(ingest: TestClient) -> None:
    for header in ("Basic !!!not-base64", "Basic " + base64.b64encode(b"no-colon").decode(), "Bearer"):
        response = ingest.post("/v1/pages/changed", json=PING, headers={"Authorization": header})
        assert response.status_code == 401, (header, response.status_code, response.text)
