"""The worker's metrics port (``start_metrics_server`` as ``python -m ragbot_embedder`` starts it) honours
the ``metrics`` scope like the HTTP services: no key 401, a key without the scope 403, the metrics key
200; the probes stay open. With no key configured, loopback is trusted, as everywhere else."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from prometheus_client import CollectorRegistry
from support.auth import KEYS, auth_settings
from support.processes import free_port

from ragbot.http.auth import Authenticator, refusal
from ragbot.observability.metrics import start_metrics_server
from ragbot.settings import AuthSettings


def serve(settings: AuthSettings) -> Iterator[str]:
    authn = Authenticator(settings)
    port = free_port()
    server = start_metrics_server(
        host="127.0.0.1",
        port=port,
        registry=CollectorRegistry(),
        ready=lambda: True,
        guard=lambda headers, peer: refusal(authn, scope="metrics", headers=headers, peer=peer),
    )
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def keyed() -> Iterator[str]:
    yield from serve(auth_settings())


@pytest.fixture
def open_loopback() -> Iterator[str]:
    yield from serve(AuthSettings())


def test_the_worker_metrics_need_the_metrics_scope(keyed: str) -> None:
    anonymous = httpx.get(f"{keyed}/metrics")
    assert anonymous.status_code == 401 and anonymous.headers["www-authenticate"].startswith("Bearer")
    assert "python" not in anonymous.text.lower() and "git" not in anonymous.text
    wrong = httpx.get(f"{keyed}/metrics", headers={"Authorization": f"Bearer {KEYS['wiki'][0]}"})
    assert wrong.status_code == 403 and "metrics" in wrong.json()["detail"]
    unknown = httpx.get(f"{keyed}/metrics", headers={"X-API-Key": "not-a-configured-key"})
    assert unknown.status_code == 401
    scraped = httpx.get(f"{keyed}/metrics", headers={"Authorization": f"Bearer {KEYS['prometheus'][0]}"})
    assert scraped.status_code == 200
    assert httpx.get(f"{keyed}/healthz").status_code == 200
    assert httpx.get(f"{keyed}/readyz").status_code == 200


def test_with_no_key_configured_loopback_scrapes(open_loopback: str) -> None:
    assert httpx.get(f"{open_loopback}/metrics").status_code == 200
