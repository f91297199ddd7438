"""How ragbot reaches Redis: one client builder from ``RedisSettings`` and one guard for its errors.

    redis = build_redis(get_redis_settings())      # no connection until the first command
    with redis_guard("read session"):
        raw = await redis.get(key)                  # RedisError / OSError -> DependencyUnavailable

``redis_guard`` also decorates coroutine functions. ``WatchError`` (an optimistic transaction lost a
race) passes through untouched: the callers that WATCH retry it themselves.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Coroutine
from types import TracebackType
from typing import Any, ParamSpec, TypeVar

import redis as redis_sync
from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import RedisError, WatchError
from redis.retry import Retry as SyncRetry

from ragbot.errors import DependencyUnavailable
from ragbot.observability.tracing import instrument_redis
from ragbot.settings import RedisSettings

__all__ = ["REDIS", "REDIS_ERRORS", "build_redis", "build_sync_redis", "redis_call", "redis_guard"]

REDIS = "redis"
"""The ``dependency`` a Redis failure names (the 503 body's ``dependency``)."""

REDIS_ERRORS: tuple[type[Exception], ...] = (RedisError, OSError)
"""What a Redis call raises when Redis fails or cannot be reached (for probes that only say no)."""

P = ParamSpec("P")
R = TypeVar("R")


# A pooled connection is dead after Redis restarts: without retries the first command on each one
# fails (redis-py 8 retries nothing by default). Three quick retries reconnect; a Redis that stays
# down still gives a 503 within a second more (tests/e2e/test_faults.py).
_RETRIES = 3


def _backoff() -> ExponentialBackoff:
    return ExponentialBackoff(cap=0.5, base=0.05)


def build_redis(settings: RedisSettings) -> Redis:
    """The asyncio client every service and the worker use; commands time out after the settings' limit."""
    client = Redis.from_url(
        settings.url,
        socket_timeout=settings.socket_timeout_s,
        socket_connect_timeout=settings.socket_timeout_s,
        retry=Retry(_backoff(), _RETRIES),
    )
    instrument_redis(client)  # a span per command when tracing is on
    return client


def build_sync_redis(*, url: str, timeout_s: float) -> redis_sync.Redis:
    """A blocking client, for code that runs outside an event loop (the metrics collector)."""
    # Not traced: its only user samples queue depth at each scrape, which is no request's work.
    return redis_sync.Redis.from_url(
        url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s, retry=SyncRetry(_backoff(), _RETRIES)
    )


class redis_guard:
    """Turns Redis failures inside the block (or the decorated coroutine) into ``DependencyUnavailable``
    naming ``what`` was being done."""

    def __init__(self, what: str) -> None:
        self.what = what

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc is None or isinstance(exc, WatchError):
            return
        if isinstance(exc, RedisError):
            message = f"Redis failed on {self.what}: {exc}"
        elif isinstance(exc, OSError):
            message = f"Redis is unreachable ({self.what}): {exc}"
        else:
            return
        raise DependencyUnavailable(message, dependency=REDIS) from None

    def __call__(self, fn: Callable[P, Awaitable[R]]) -> Callable[P, Coroutine[Any, Any, R]]:
        @functools.wraps(fn)
        async def guarded(*args: P.args, **kwargs: P.kwargs) -> R:
            with self:
                return await fn(*args, **kwargs)

        return guarded


async def redis_call(what: str, call: Callable[[], Awaitable[R]]) -> R:
    """``call()``'s result, under ``redis_guard(what)``."""
    with redis_guard(what):
        return await call()
