"""Root test configuration: models load offline; integration tests get the real Redis and Elasticsearch.

`make test` starts both (scripts/services.sh) and exports RAGBOT_TEST_REDIS_URL / RAGBOT_TEST_ES_URL.
A service that does not answer fails the tests that need it: never skip, never mock.
"""

from __future__ import annotations

import os

import httpx
import pytest
import redis

# Tests never download models: the packaged ones are on disk, anything else is a bug.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
# Apps under test count no rate limits unless a test gives them a limiter (tests/unit/test_rate_limits.py).
os.environ.setdefault("RAGBOT_RATE_LIMIT_ENABLED", "false")

# tests/compose drives the Docker stack that `make test-compose` boots; `make test` does not collect it.
collect_ignore_glob = [] if os.environ.get("RAGBOT_TEST_COMPOSE") == "1" else ["compose/*"]

DEFAULT_REDIS_URL = "redis://127.0.0.1:6390/0"
DEFAULT_ES_URL = "http://127.0.0.1:9250"
_HOW_TO_START = "`make test` starts it; by hand: `bash scripts/services.sh up`"


@pytest.fixture(scope="session")
def redis_url() -> str:
    """The real Redis URL, checked once, so a missing broker fails loudly instead of hanging tests."""
    url = os.environ.get("RAGBOT_TEST_REDIS_URL", DEFAULT_REDIS_URL)
    client = redis.Redis.from_url(url, socket_connect_timeout=3, socket_timeout=3)
    try:
        answered = client.ping()
    except redis.RedisError as exc:
        pytest.fail(f"Redis at {url} does not answer ({exc}). {_HOW_TO_START}.", pytrace=False)
    finally:
        client.close()
    if answered is not True:
        pytest.fail(f"Redis at {url} answered PING with {answered!r}. {_HOW_TO_START}.", pytrace=False)
    return url


@pytest.fixture(scope="session")
def es_url() -> str:
    """The real Elasticsearch URL, checked once for yellow health, so a missing node fails loudly."""
    url = os.environ.get("RAGBOT_TEST_ES_URL", DEFAULT_ES_URL).rstrip("/")
    try:
        response = httpx.get(
            f"{url}/_cluster/health", params={"wait_for_status": "yellow", "timeout": "10s"}, timeout=15.0
        )
    except httpx.HTTPError as exc:
        pytest.fail(f"Elasticsearch at {url} does not answer ({exc!r}). {_HOW_TO_START}.", pytrace=False)
    status = response.json().get("status") if response.status_code == 200 else None
    if status not in ("yellow", "green"):
        pytest.fail(
            f"Elasticsearch at {url} is not healthy (HTTP {response.status_code}: {response.text[:200]}). "
            f"{_HOW_TO_START}.",
            pytrace=False,
        )
    return url
