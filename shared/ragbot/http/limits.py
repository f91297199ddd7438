"""Fair limits per API key and per client address, counted in Redis by the ``limits`` library.

Each limited route declares its group on its decorator, so it composes with the auth layer's
router-level dependency (which runs first and sets ``request.state.principal``)::

    @router.post("/v1/retrieve", dependencies=[rate_limit("retrieve")])

A caller is counted under its key's name when the auth layer named one (``per_key`` limits), else
under its address (``request.state.client_ip`` when the auth layer resolved it from trusted proxies,
else the socket's peer; ``per_address`` limits). A refusal is ``RateLimited`` (429 with
``Retry-After``). When Redis fails the request passes (fail open): a limiter must never take the
service down; a warning is logged (at most once a minute) and ``ragbot_rate_limit_errors_total``
counts it.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from fastapi import Depends, Request
from limits import RateLimitItem, parse_many
from limits.aio.storage import MemoryStorage, RedisStorage
from limits.aio.strategies import (
    FixedWindowRateLimiter,
    MovingWindowRateLimiter,
    SlidingWindowCounterRateLimiter,
)
from limits.aio.strategies import RateLimiter as Strategy
from limits.errors import StorageError
from prometheus_client import CollectorRegistry, Counter
from redis.exceptions import RedisError

from ragbot.errors import RateLimited
from ragbot.observability.metrics import PerRegistry
from ragbot.settings import RateLimitSettings, RedisSettings

logger = logging.getLogger(__name__)

RouteGroup = Literal["chat", "search", "widget", "upload", "retrieve", "guest"]
KeyKind = Literal["key", "address"]
GROUPS: tuple[RouteGroup, ...] = ("chat", "search", "widget", "upload", "retrieve", "guest")
WARN_EVERY_S = 60.0
STRATEGIES: dict[str, Callable[[RedisStorage | MemoryStorage], Strategy]] = {
    "moving-window": MovingWindowRateLimiter,
    "fixed-window": FixedWindowRateLimiter,
    "sliding-window-counter": SlidingWindowCounterRateLimiter,
}

RETRY_AFTER_HEADER: dict[str, Any] = {
    "Retry-After": {"description": "seconds to wait before retrying", "schema": {"type": "integer"}}
}
RATE_LIMITED: dict[int | str, dict[str, Any]] = {
    429: {"description": "a rate limit of this key or address is used up", "headers": RETRY_AFTER_HEADER}
}
"""The OpenAPI ``responses`` entry of a rate-limited route."""


@dataclass(frozen=True, slots=True)
class RateLimitMetrics:
    """Refusals by route group and key kind; Redis failures that let a request through."""

    refused: Counter
    errors: Counter


def _new_metrics(registry: CollectorRegistry) -> RateLimitMetrics:
    return RateLimitMetrics(
        refused=Counter(
            "ragbot_rate_limited_total",
            "Requests refused with 429 by a rate limit, by route group and key kind (key, address).",
            ["group", "kind"],
            registry=registry,
        ),
        errors=Counter(
            "ragbot_rate_limit_errors_total",
            "Requests let through unchecked because the limiter's Redis failed (fail open), by group.",
            ["group"],
            registry=registry,
        ),
    )


rate_limit_metrics = PerRegistry(_new_metrics)


# How a principal proved a key of its own (``ragbot.http.auth.Principal.method``).
_KEYED_METHODS = frozenset({"bearer", "api_key", "basic", "ping_token"})


def limiter_key(request: Request) -> tuple[KeyKind, str]:
    """Who is counted: the key the auth layer recognised, else the resolved client address, else the peer.

    Callers let in by a trusted network, a UI session (a guest chat page or a signed-in operator) or
    with auth disabled hold no key of their own: they are counted per address."""
    principal = getattr(request.state, "principal", None)
    name = getattr(principal, "name", None)
    if isinstance(name, str) and name and getattr(principal, "method", "bearer") in _KEYED_METHODS:
        return "key", name
    client_ip = getattr(request.state, "client_ip", None)
    if isinstance(client_ip, str) and client_ip:
        return "address", client_ip
    return "address", request.client.host if request.client is not None else "unknown"


class RateLimiter:
    """The limits of every route group, in one Redis (no connection until the first request).

    ``redis_url`` ``memory://`` keeps the counts in this process instead (tests, one-process tools).
    """

    def __init__(
        self,
        *,
        settings: RateLimitSettings,
        redis_url: str,
        key_prefix: str,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.enabled = settings.enabled
        self.storage: RedisStorage | MemoryStorage
        if redis_url == "memory://":
            self.storage = MemoryStorage(wrap_exceptions=True)
        else:
            self.storage = RedisStorage(
                f"async+{redis_url}",
                implementation="redispy",
                key_prefix=key_prefix,
                wrap_exceptions=True,
                socket_timeout=settings.redis_timeout_s,
                socket_connect_timeout=settings.redis_timeout_s,
            )
        self.strategy = STRATEGIES[settings.strategy](self.storage)
        # A group may count only one kind of caller (``guest``: addresses).
        self.limits: dict[tuple[RouteGroup, KeyKind], list[RateLimitItem]] = {
            (group, kind): parse_many(value)
            for group in GROUPS
            for kind in ("key", "address")
            if (value := getattr(settings, f"{group}_per_{kind}", None)) is not None
        }
        self.metrics = rate_limit_metrics(registry)
        self._last_warning = -math.inf

    @classmethod
    def from_settings(
        cls, *, settings: RateLimitSettings, redis: RedisSettings, registry: CollectorRegistry | None = None
    ) -> RateLimiter:
        """The limiter of a service, its keys under ``<RAGBOT_REDIS_KEY_PREFIX>:ratelimit``."""
        return cls(
            settings=settings,
            redis_url=redis.url,
            key_prefix=f"{redis.key_prefix}:ratelimit",
            registry=registry,
        )

    async def hit(self, *, group: RouteGroup, kind: KeyKind, who: str) -> None:
        """Count one request of ``who``; ``RateLimited`` when a limit of its group is used up."""
        items = self.limits.get((group, kind))
        if not self.enabled or not items:
            return
        try:
            for item in items:
                if not await self.strategy.hit(item, group, kind, who):
                    reset_at, _ = await self.strategy.get_window_stats(item, group, kind, who)
                    retry_after = max(1, math.ceil(reset_at - time.time()))
                    self.metrics.refused.labels(group, kind).inc()
                    limit = str(item)
                    raise RateLimited(
                        f"rate limit of {limit} reached for this {'API key' if kind == 'key' else 'address'} "
                        f"on {group} requests; retry in {retry_after} s",
                        limit=limit,
                        retry_after_s=retry_after,
                    )
        except (StorageError, RedisError, OSError) as exc:
            self.metrics.errors.labels(group).inc()
            now = time.monotonic()
            if now - self._last_warning >= WARN_EVERY_S:
                self._last_warning = now
                logger.warning(
                    "rate limiter unavailable, requests pass unchecked (fail open)",
                    extra={"group": group, "error": f"{type(exc).__name__}: {exc}"},
                )

    async def check(self, request: Request, group: RouteGroup) -> None:
        """Count this request against its caller's limits of ``group``."""
        kind, who = limiter_key(request)
        await self.hit(group=group, kind=kind, who=who)

    async def close(self) -> None:
        """Close the Redis connections."""
        bridge = getattr(self.storage, "bridge", None)
        client: Any = getattr(bridge, "storage", None)
        if client is not None:
            await client.aclose()


def rate_limit(group: RouteGroup) -> Any:
    """A route-decorator dependency counting the request in ``group`` (no limiter on the app: none)."""

    async def limited(request: Request) -> None:
        limiter: RateLimiter | None = getattr(request.app.state, "rate_limiter", None)
        if limiter is not None:
            await limiter.check(request, group)

    return Depends(limited)


def guest_limit() -> Any:
    """A route-decorator dependency counting the open chat page's guests (per address) in ``guest``."""

    async def limited(request: Request) -> None:
        limiter: RateLimiter | None = getattr(request.app.state, "rate_limiter", None)
        principal = getattr(request.state, "principal", None)
        if limiter is not None and getattr(principal, "method", None) == "guest":
            await limiter.check(request, "guest")

    return Depends(limited)
