"""Getting pages in and indexed: wiki sources, ingest, the embedder worker, contextual retrieval."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings

from ragbot.settings.common import settings_config

PortRule = int | Literal["default", "any"]
"""The ports an allowed callback host may be reached on: one, any, or the scheme's default."""


def split_port(entry: str) -> tuple[str, PortRule]:
    """An allow-list entry's host part and port rule: ``host:8080`` -> (host, 8080), ``host:*`` -> any
    port, ``host`` -> the scheme's default; bare IPv6 addresses (many colons) carry no port."""
    if entry.startswith("["):
        host, _, rest = entry[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    elif entry.count(":") == 1:
        host, port = entry.split(":")
    else:
        return entry, "default"
    if not port:
        return host, "default"
    if port == "*":
        return host, "any"
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(
            f"RAGBOT_INGEST_ALLOWED_CALLBACK_HOSTS entry {entry!r}: "
            "the port must be a number from 1 to 65535, or *"
        )
    return host, int(port)


class SourceSettings(BaseSettings):
    """Fetching wiki pages: the ingest service checks pings against it, the worker fetches with it."""

    model_config = settings_config("RAGBOT_INGEST_")
    # Hosts a ping's callback_url may point at (no SSRF). "*" allows any (development only). An entry
    # allows only the scheme's default port unless it names one ("wiki.internal:8080", "host:*").
    allowed_callback_hosts: list[str] = Field(default_factory=lambda: ["127.0.0.1", "localhost"])
    max_page_bytes: int = 5 * 1024 * 1024
    fetch_timeout_s: float = 10.0
    # The wiki's page list, read by reconcile (``ragbot.messaging.reconcile``): MediaWiki's
    # ``api.php?action=query&list=allpages...`` or ChatbotRagContent's GetRelevantPageIds JSON served
    # over HTTP. Unset: delete pings (page id 0) and the scheduled reconcile have nothing to compare.
    wiki_list_url: str | None = None
    # Content API base for listed pages the index lacks (else the delete ping's callback_url).
    wiki_callback_url: str | None = None
    # Delete pings within this window share one reconcile, which runs this long after the first.
    delete_reconcile_delay_s: float = Field(default=5.0, ge=0.0, le=3600.0)
    # The safety net: reconcile against the page list this often (Celery beat; 0 turns it off).
    reconcile_interval_s: float = Field(default=3600.0, ge=0.0)
    # Reconcile refuses (409) to remove more than this share of the indexed pages unless forced.
    reconcile_max_remove_share: float = Field(default=0.2, ge=0.0, le=1.0)

    @field_validator("allowed_callback_hosts")
    @classmethod
    def _ports_are_valid(cls, entries: list[str]) -> list[str]:
        for entry in entries:
            split_port(entry.strip().lower())
        return entries


class MediaWikiSettings(BaseSettings):
    """A MediaWiki followed by polling its core API (no ChatbotRagContent needed)."""

    model_config = settings_config("RAGBOT_MEDIAWIKI_")
    # The wiki's api.php, e.g. https://wiki.example.org/w/api.php. Unset: no polling.
    api_url: str | None = None
    # Namespaces whose pages are indexed (0 is the main namespace).
    namespaces: list[int] = Field(default_factory=lambda: [0])
    # For private wikis: a bot password (Special:BotPasswords), user "Name@app".
    user: str | None = None
    password: SecretStr | None = None
    # How often Celery beat polls recent changes.
    poll_interval_s: float = Field(default=60.0, gt=0.0)
    timeout_s: float = Field(default=30.0, gt=0.0)
    # Pages per API request (the API's own cap for ordinary users is 50).
    batch_size: int = Field(default=50, ge=1, le=500)


class IngestSettings(SourceSettings):
    """The ingest service: wiki pings, pushes, uploads, jobs."""

    model_config = settings_config("RAGBOT_INGEST_")
    host: str = "127.0.0.1"
    port: int = 8001
    max_upload_bytes: int = 20 * 1024 * 1024
    # Files per POST /v1/documents; pages per embedder.index_pages message of a bulk reindex.
    max_upload_files: int = Field(default=20, ge=1, le=1000)
    reindex_batch_pages: int = Field(default=32, ge=1, le=1000)
    # Bulk reindex: largest JSONL body, most pages in one reindex (body lines or wiki listing).
    max_reindex_bytes: int = 2 * 1024 * 1024 * 1024
    max_reindex_pages: int = Field(default=1_000_000, ge=1)


class WorkerSettings(BaseSettings):
    """The embedder worker: retries, batching, metrics port."""

    model_config = settings_config("RAGBOT_WORKER_")
    max_retries: int = Field(default=5, ge=0, le=50)
    retry_backoff_s: float = 1.0
    retry_backoff_max_s: float = 60.0
    concurrency: int = 1
    metrics_host: str = "127.0.0.1"
    metrics_port: int = 9101
    paragraph_tokens: int = Field(default=512, ge=16, le=8192)
    queue: str = "ragbot.index"
    # Markdown link targets in paragraphs: "drop" keeps the link text only (targets are ~45% of the
    # characters of Kol-Zchut pages and waste the token budget), "keep" stores them as sent.
    # Run Celery beat inside this worker (the scheduled reconcile, ragbot.messaging.reconcile_schedule):
    # turn it on in exactly one worker of a deployment.
    beat: bool = False
    link_targets: Literal["drop", "keep"] = "drop"
    # Pages indexed together (embedder.index_pages) are embedded in shared batches of at most this
    # many paragraphs per (model, field), then written page by page.
    micro_batch_max_paragraphs: int = Field(default=512, ge=1, le=100_000)
    # An unacknowledged message (worker killed mid-task) is delivered again after this long; keep it
    # above the longest task. The worker looks for such messages every restore interval.
    visibility_timeout_s: int = Field(default=3600, ge=5)
    unacked_restore_interval_s: int = Field(default=10, ge=1)
    # After a re-embed switches, the old generation is deleted this much later: long enough for every
    # retriever to notice the switch (RAGBOT_RETRIEVER_GENERATION_POLL_S) and finish its queries.
    reembed_drop_after_s: float = Field(default=60.0, ge=0.0)


class ContextualSettings(BaseSettings):
    """The worker's contextual retrieval: whether it runs, and its budgets and cache lifetime."""

    model_config = settings_config("RAGBOT_WORKER_")
    # Contextual retrieval (off by default): an LLM (LLMSettings, RAGBOT_CHAT_LLM_*) writes one or two
    # sentences situating each paragraph in its page; they are prepended to the paragraph before it is
    # embedded and cached in Redis by content hash, so only new or changed paragraphs pay.
    contextual_retrieval: bool = False
    contextual_max_tokens: int = Field(default=96, ge=8, le=1024)
    contextual_document_chars: int = Field(default=8000, ge=500, le=200_000)
    contextual_concurrency: int = Field(default=4, ge=1, le=256)
    contextual_cache_ttl_s: int = Field(default=90 * 86400, ge=60)
