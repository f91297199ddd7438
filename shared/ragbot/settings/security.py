"""Who may do what: API keys and sessions, rate limits, outgoing HTTP clients."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, IPvAnyNetwork, SecretStr, field_validator
from pydantic_settings import BaseSettings

from ragbot.schemas.auth import ApiKeyEntry, AuthScope, PingTokenEntry
from ragbot.settings.common import settings_config


class RateLimitSettings(BaseSettings):
    """Fair limits per API key and per client address (``ragbot.http.limits``), counted in Redis.

    Each value is a ``limits`` string, several joined by ";" (``"30/minute;500/day"``). A caller the
    auth layer named is counted per key (``*_per_key``); any other caller per address.
    """

    model_config = settings_config("RAGBOT_RATE_LIMIT_")
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
    # The open chat page's guests, per address: conversations opened and answers rated (their questions
    # count under chat_per_address). Keys and networks are not counted here.
    guest_per_address: str = "60/minute"

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
        "guest_per_address",
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

    model_config = settings_config("RAGBOT_AUTH_")
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


class HttpSettings(BaseSettings):
    """What every HTTP service accepts before a route sees a request: the request head's size and header
    count (431 beyond them), and the ``Host`` names it answers to (400 for others).

    The hosts answered to are loopback (``localhost``, ``127.0.0.1``, ``::1``), the host of
    ``public_url``, and ``trusted_hosts`` (names, ``*.domain`` wildcards, or ``*`` for any). Absolute
    URLs in answers (ingest's ``Location`` and ``status_url``) are built from ``public_url`` (set it
    per service), never from ``Host``; without it they are paths (``/v1/jobs/...``).
    """

    model_config = settings_config("RAGBOT_HTTP_")
    public_url: str | None = Field(default=None, pattern=r"^https?://[^/?#\s]+/?$")
    trusted_hosts: list[str] = Field(default_factory=list)
    # The request line and every header together (uvicorn's h11 buffer), and how many headers.
    max_header_bytes: int = Field(default=32 * 1024, ge=4096, le=1024 * 1024)
    max_headers: int = Field(default=100, ge=16, le=1000)

    @property
    def base_url(self) -> str:
        """``public_url`` without a trailing slash ("" when unset: absolute URLs become paths)."""
        return (self.public_url or "").rstrip("/")


class ClientSettings(BaseSettings):
    """What the ``ragbot`` commands that call a service (``reindex``, ``chat``) send as their key."""

    model_config = settings_config("RAGBOT_CLIENT_")
    api_key: SecretStr | None = None

    def headers(self) -> dict[str, str]:
        """``Authorization: Bearer`` with the key, or nothing when none is set."""
        return {"Authorization": f"Bearer {self.api_key.get_secret_value()}"} if self.api_key else {}
