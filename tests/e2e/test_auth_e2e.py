"""Keys through a real ingest process: configured from the environment as compose does (plain keys,
hashed at load), refused and accepted over HTTP, and absent from everything the process logged."""

from __future__ import annotations

import json
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
            "RAGBOT_INGEST_ALLOWED_CALLBACK_HOSTS": '["127.0.0.1"]',
            "RAGBOT_WORKER_QUEUE": f"{prefix}.index",
            "RAGBOT_AUTH_KEYS": json.dumps(keys),
            "RAGBOT_AUTH_PING_TOKENS": json.dumps([{"name": "wiki", "token": PING_TOKEN}]),
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
