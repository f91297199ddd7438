"""Keys and request limits through a real ingest process: configured from the environment as compose
does (plain keys, hashed at load), refused and accepted over HTTP, absent from everything the process
logged; header bombs refused with 431 before they are read, the Host header never echoed, and a stop
on SIGTERM within the grace period."""

from __future__ import annotations

import contextlib
import json
import signal
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from support.processes import ServiceProcess, delete_redis_prefix, free_port, local_service, service_env

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

WIKI_KEY = "e2e-wiki-key-" + uuid.uuid4().hex
CHAT_KEY = "e2e-chat-key-" + uuid.uuid4().hex
PING_TOKEN = "e2e-ping-token-" + uuid.uuid4().hex
PUBLIC_URL = "https://ragbot.example.org:8443"
# Above the services' 10 s shutdown grace (ragbot.http.server), well inside compose's and Kubernetes'.
GRACE_S = 15.0
PING = {
    "page_id": 7,
    "revision_id": 70,
    "revision_date": "20250101120000",
    "callback_url": "http://127.0.0.1:9/w/rest.php/cbragcontent/v0/page_id/",
}


@pytest.fixture
def ingest(redis_url: str, tmp_path: Path) -> Iterator[tuple[str, ServiceProcess]]:
    port, prefix = free_port(), f"e2e-auth-{uuid.uuid4().hex[:8]}"
    keys = [
        {"name": "wiki", "scopes": ["ingest"], "key": WIKI_KEY},
        {"name": "kzchatbot", "scopes": ["chat"], "key": CHAT_KEY},
    ]
    env = service_env(
        {
            "RAGBOT_REDIS_URL": redis_url,
            "RAGBOT_REDIS_KEY_PREFIX": prefix,
            "RAGBOT_LOG_LEVEL": "DEBUG",
            "RAGBOT_STORE_EMBEDDED_PATH": str(tmp_path / "store.sqlite3"),
            "RAGBOT_INGEST_HOST": "127.0.0.1",
            "RAGBOT_INGEST_PORT": str(port),
            "RAGBOT_INGEST_ALLOWED_CALLBACK_HOSTS": '["127.0.0.1:9"]',
            "RAGBOT_WORKER_QUEUE": f"{prefix}.index",
            "RAGBOT_AUTH_KEYS": json.dumps(keys),
            "RAGBOT_AUTH_PING_TOKENS": json.dumps([{"name": "wiki", "token": PING_TOKEN}]),
            "RAGBOT_HTTP_PUBLIC_URL": PUBLIC_URL,
        }
    )
    proc = local_service("ingest", module="ragbot_ingest", port=port, env=env, log_dir=tmp_path, cwd=tmp_path)
    try:
        proc.start().wait_healthy(timeout_s=120)
        yield f"127.0.0.1:{port}", proc
    finally:
        proc.stop()
        delete_redis_prefix(redis_url, prefix)


def test_a_real_ingest_refuses_and_accepts_as_configured(ingest: tuple[str, ServiceProcess]) -> None:
    address, proc = ingest
    with httpx.Client(base_url=f"http://{address}", timeout=30) as client:
        assert client.get("/healthz").status_code == 200
        anonymous = client.post("/v1/pages/changed", json=PING)
        assert anonymous.status_code == 401 and anonymous.headers["www-authenticate"].startswith("Bearer")
        wrong = client.post("/v1/pages/changed", json=PING, headers={"X-API-Key": CHAT_KEY})
        assert wrong.status_code == 403
        assert client.post("/v1/pages/changed", params={"token": PING_TOKEN}, json=PING).status_code == 202
        assert client.delete("/v1/pages/7", params={"token": PING_TOKEN}).status_code == 401
        assert client.get("/metrics", headers={"X-API-Key": WIKI_KEY}).status_code == 403
    # The key in the URL, as $wgChatbotRagContentPingURL carries it.
    in_url = httpx.post(f"http://wiki:{WIKI_KEY}@{address}/v1/pages/changed", json=PING, timeout=30)
    assert in_url.status_code == 202, in_url.text
    proc.stop()
    logged = proc.log_path.read_text(encoding="utf-8", errors="replace")
    assert "/v1/pages/changed" in logged, "the process logged its requests"
    for secret in (WIKI_KEY, CHAT_KEY, PING_TOKEN):
        assert secret not in logged


def raw_request(address: str, head: bytes, *, send_up_to: int) -> tuple[bytes, int]:
    """Send ``head`` (unterminated: the server must answer before it ends) in 16 KiB pieces, up to
    ``send_up_to`` bytes or until the server answers or closes; the answer and the bytes sent."""
    host, port = address.rsplit(":", 1)
    sent = 0
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.settimeout(0.05)
        answer = b""
        while sent < send_up_to:
            piece = head[sent : sent + 16 * 1024] or b"X-Filler: " + b"x" * (16 * 1024) + b"\r\n"
            try:
                sock.sendall(piece)
            except OSError:
                break  # the server closed the connection: it stopped reading
            sent += len(piece)
            with contextlib.suppress(TimeoutError):
                answer = sock.recv(65536)
                if answer:
                    break
        sock.settimeout(30)
        with contextlib.suppress(OSError):
            while chunk := sock.recv(65536):
                answer += chunk
    return answer, sent


def test_a_header_bomb_is_refused_with_431_before_it_is_read(ingest: tuple[str, ServiceProcess]) -> None:
    address, _ = ingest
    start = f"GET /healthz HTTP/1.1\r\nHost: {address}\r\nX-Bomb: ".encode()
    answer, sent = raw_request(address, start + b"x" * (8 * 1024 * 1024), send_up_to=8 * 1024 * 1024)
    status_line = answer.split(b"\r\n", 1)[0]
    assert b" 431 " in status_line, answer[:300]
    assert b"RAGBOT_HTTP_MAX_HEADER_BYTES" in answer
    assert sent < 1024 * 1024, f"the server read {sent} bytes of an 8 MB header before refusing it"
    with httpx.Client(base_url=f"http://{address}", timeout=30) as client:
        many = client.get("/healthz", headers={f"X-Filler-{n}": "x" for n in range(500)})
        assert many.status_code == 431 and "RAGBOT_HTTP_MAX_HEADERS" in many.json()["detail"]
        assert client.get("/healthz").status_code == 200, "an ordinary request still passes"


def test_the_host_header_is_never_echoed(ingest: tuple[str, ServiceProcess]) -> None:
    address, _ = ingest
    with httpx.Client(base_url=f"http://{address}", timeout=30) as client:
        evil = client.post(
            "/v1/pages/changed", json=PING, headers={"X-API-Key": WIKI_KEY, "Host": "evil.example"}
        )
        assert evil.status_code == 400 and "evil" not in evil.text and "evil" not in str(evil.headers)
        accepted = client.post("/v1/pages/changed", json=PING, headers={"X-API-Key": WIKI_KEY})
        assert accepted.status_code == 202, accepted.text
        job = accepted.json()["job_id"]
        assert accepted.headers["Location"] == f"{PUBLIC_URL}/v1/jobs/{job}"
        assert accepted.json()["status_url"] == f"{PUBLIC_URL}/v1/jobs/{job}"


def test_ingest_stops_within_its_grace_period_on_sigterm(ingest: tuple[str, ServiceProcess]) -> None:
    address, proc = ingest
    with httpx.Client(base_url=f"http://{address}", timeout=30) as client:
        assert client.get("/healthz").status_code == 200  # a keep-alive connection stays open
        started = time.monotonic()
        code = proc.stop(grace_s=GRACE_S)
        took = time.monotonic() - started
    # uvicorn finishes its shutdown, then re-raises the SIGTERM it caught: -15 is a clean stop, -9 is not.
    assert code in (0, -signal.SIGTERM) and took < GRACE_S, f"exit {code} after {took:.1f} s"
    assert "Application shutdown complete" in proc.log_tail(), proc.log_tail()
