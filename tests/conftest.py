"""Root test configuration: models load offline; integration tests get the real Redis, Elasticsearch and wiki.

`make test` starts them (ragbot.dev.services) and exports RAGBOT_TEST_REDIS_URL / RAGBOT_TEST_ES_URL /
RAGBOT_TEST_MEDIAWIKI_URL (with the wiki admin credentials and LocalSettings.php).
A service that does not answer fails the tests that need it: never skip, never mock.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import httpx
import pytest
import redis
from support.mediawiki import WikiSession
from support.processes import run_services_on_onnx

from ragbot.dev.services import ServicesConfig

# Tests never download models: the packaged ones are on disk, anything else is a bug.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
# Apps under test count no rate limits unless a test gives them a limiter (tests/unit/test_rate_limits.py).
os.environ.setdefault("RAGBOT_RATE_LIMIT_ENABLED", "false")
# In-process clients name made-up hosts (testserver, chat.test, ...): apps under test answer any Host,
# except where a test sets the list itself (tests/integration/test_hostile_auth.py,
# tests/e2e/test_auth_e2e.py).
os.environ.setdefault("RAGBOT_HTTP_TRUSTED_HOSTS", '["*"]')
# Service processes load all-MiniLM-L6-v2 from an ONNX export, as the CPU images do: each start then skips
# about 14 s of importing sentence-transformers (support.processes.run_services_on_onnx).
run_services_on_onnx()

# tests/compose drives the Docker stack that `make test-compose` boots; `make test` does not collect it.
collect_ignore_glob = [] if os.environ.get("RAGBOT_TEST_COMPOSE") == "1" else ["compose/*"]

DEFAULT_REDIS_URL = "redis://127.0.0.1:6390/0"
DEFAULT_ES_URL = "http://127.0.0.1:9250"
_HOW_TO_START = "`make test` starts it; by hand: `make services-up`"


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


DEFAULT_MEDIAWIKI_URL = "http://127.0.0.1:8480"
_HOW_TO_START_WIKI = (
    "`make test` starts it; by hand: `RAGBOT_SERVICES=mediawiki uv run python -m ragbot.dev.services up` "
    "(Debian's mediawiki package on PHP's built-in server)"
)


def _mediawiki_config_file() -> str:
    """The test wiki's LocalSettings.php: from the environment, else where ragbot.dev.services puts it."""
    configured = os.environ.get("RAGBOT_TEST_MEDIAWIKI_CONFIG")
    if configured:
        return configured
    return str(ServicesConfig.from_environ().mw_config_file)


@pytest.fixture(scope="session")
def mediawiki_url() -> str:
    """The real test MediaWiki's base URL, checked once, so a missing wiki fails loudly (never a skip)."""
    url = os.environ.get("RAGBOT_TEST_MEDIAWIKI_URL", DEFAULT_MEDIAWIKI_URL).rstrip("/")
    try:
        response = httpx.get(
            f"{url}/api.php", params={"action": "query", "meta": "siteinfo", "format": "json"}, timeout=30.0
        )
        generator = response.json()["query"]["general"]["generator"] if response.status_code == 200 else None
    except (httpx.HTTPError, ValueError, KeyError) as exc:
        pytest.fail(f"MediaWiki at {url} does not answer ({exc!r}). {_HOW_TO_START_WIKI}.", pytrace=False)
    if not str(generator).startswith("MediaWiki"):
        pytest.fail(f"{url}/api.php is not a MediaWiki (HTTP {response.status_code}). {_HOW_TO_START_WIKI}.")
    return url


@pytest.fixture(scope="session")
def mediawiki_bot() -> tuple[str, str]:
    """The test wiki's bot password login (``Admin@ragbot``), made by ragbot.dev.services."""
    return (
        os.environ.get("RAGBOT_TEST_MEDIAWIKI_BOT_USER", "Admin@ragbot"),
        os.environ.get("RAGBOT_TEST_MEDIAWIKI_BOT_PASSWORD", "ragbottestbotpassword0123456789ab"),
    )


@pytest.fixture
def wiki(mediawiki_url: str) -> Iterator[WikiSession]:
    """An admin-logged-in session on the test wiki with a title prefix of its own; its pages go at the end."""
    session = WikiSession(
        url=mediawiki_url,
        user=os.environ.get("RAGBOT_TEST_MEDIAWIKI_USER", "Admin"),
        password=os.environ.get("RAGBOT_TEST_MEDIAWIKI_PASSWORD", "ragbot-test-admin-password"),
        config_file=_mediawiki_config_file(),
    )
    try:
        session.login()
        yield session
    finally:
        session.cleanup()
        session.close()
