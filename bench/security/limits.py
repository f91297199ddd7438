"""Figures of fair limits and LLM admission control, for the security report and docs/benchmarks.md.

- ``rate_limit_429_after``: the request number at which one client is refused, with a limit of
  ``--limit`` per minute counted in the real Redis (target: limit + 1). The requests go over ASGI to
  an app whose route carries the same ``rate_limit`` dependency and error handler as the services.
- ``rate_limit_retry_after_s``: the ``Retry-After`` of that refusal (at most 60 for a per-minute limit).
- ``llm_admission_503_ms``: median time to the 503 when every generation slot and the wait queue are
  taken (1 slot, 1 waiter), over 20 requests to an app that takes a slot like the chat routes do.

Redis: ``--redis-url``, default ``RAGBOT_TEST_REDIS_URL`` (set by ``make bench``), else
``RAGBOT_REDIS_URL``, else the test Redis on 6390. Keys live under a prefix of their own, deleted after.

Run: ``uv run python -m bench.security.limits [--limit 10]``; prints flat JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
import uuid

import httpx
import redis
from fastapi import FastAPI
from prometheus_client import CollectorRegistry

from ragbot.chat.admission import AdmissionGate
from ragbot.http.limits import RateLimiter, rate_limit
from ragbot.observability.http import add_error_handlers
from ragbot.settings import RateLimitSettings


def default_redis_url() -> str:
    """Where ``make bench`` runs Redis."""
    return (
        os.environ.get("RAGBOT_TEST_REDIS_URL")
        or os.environ.get("RAGBOT_REDIS_URL")
        or "redis://127.0.0.1:6390/0"
    )


async def first_refused(*, redis_url: str, limit: int, prefix: str) -> tuple[int, int]:
    """(number of the first request refused with 429, its Retry-After), for ``limit``/minute."""
    settings = RateLimitSettings(enabled=True, retrieve_per_address=f"{limit}/minute")
    limiter = RateLimiter(
        settings=settings, redis_url=redis_url, key_prefix=prefix, registry=CollectorRegistry()
    )
    app = FastAPI()
    add_error_handlers(app)
    app.state.rate_limiter = limiter

    @app.post("/v1/retrieve", dependencies=[rate_limit("retrieve")])
    async def retrieve() -> dict[str, str]:
        return {"ok": "yes"}

    try:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://bench"
        ) as client:
            for number in range(1, 10 * limit + 2):
                response = await client.post("/v1/retrieve")
                if response.status_code == 429:
                    return number, int(response.headers["Retry-After"])
                response.raise_for_status()
    finally:
        await limiter.close()
    return 0, 0


async def busy_ms(*, tries: int = 20) -> float:
    """Median milliseconds to the 503 when the one slot and the one queue place are taken."""
    gate = AdmissionGate(
        max_active=1, max_waiting=1, wait_s=600.0, retry_after_s=5, registry=CollectorRegistry()
    )
    app = FastAPI()
    add_error_handlers(app)

    @app.post("/answer")
    async def answer() -> dict[str, str]:
        slot = await gate.acquire()
        slot.release()
        return {"ok": "yes"}

    held = await gate.acquire()
    queued = asyncio.ensure_future(gate.acquire())
    await asyncio.sleep(0.01)
    timings: list[float] = []
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://bench") as client:
        for _ in range(tries):
            started = time.perf_counter()
            response = await client.post("/answer")
            timings.append((time.perf_counter() - started) * 1000)
            if response.status_code != 503 or "Retry-After" not in response.headers:
                raise RuntimeError(f"expected 503 with Retry-After, got {response.status_code}")
    held.release()
    (await queued).release()
    return round(statistics.median(timings), 3)


def measure(*, redis_url: str | None = None, limit: int = 10) -> dict[str, float | int]:
    """The figures, against the real Redis at ``redis_url``."""
    url = redis_url or default_redis_url()
    prefix = f"bench-limits-{uuid.uuid4().hex[:12]}"
    try:
        refused_at, retry_after = asyncio.run(first_refused(redis_url=url, limit=limit, prefix=prefix))
    finally:
        client = redis.Redis.from_url(url, socket_connect_timeout=3)
        try:
            keys = list(client.scan_iter(f"{prefix}:*"))
            if keys:
                client.delete(*keys)
        finally:
            client.close()
    return {
        "rate_limit_configured": limit,
        "rate_limit_429_after": refused_at,
        "rate_limit_retry_after_s": retry_after,
        "llm_admission_503_ms": asyncio.run(busy_ms()),
    }


def main() -> None:
    """Print the figures as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--redis-url", default=default_redis_url())
    parser.add_argument("--limit", type=int, default=10)
    args = parser.parse_args()
    print(json.dumps(measure(redis_url=args.redis_url, limit=args.limit), indent=2))


if __name__ == "__main__":
    main()
