"""One reconcile per burst of delete pings: the first ping of a window schedules it, the rest join it."""

from __future__ import annotations

import redis.asyncio as aioredis

from ragbot.messaging.redis import redis_call


class ReconcileTrigger:
    """Claims the window in Redis (``p:reconcile:pending``, expiring with it), shared by every ingest."""

    def __init__(self, *, redis: aioredis.Redis, key_prefix: str) -> None:
        self.redis = redis
        self.key = f"{key_prefix}:reconcile:pending"

    async def claim(self, *, job_id: str, window_s: float) -> str | None:
        """None when this call opened the window (the caller schedules ``job_id``), else the job that did."""
        ttl_ms = max(1, int(window_s * 1000))
        for _ in range(3):  # the window may close between the two calls: try to open it again
            opened = await redis_call(
                "claim the reconcile window", lambda: self.redis.set(self.key, job_id, nx=True, px=ttl_ms)
            )
            if opened:
                return None
            current = await redis_call("read the reconcile window", lambda: self.redis.get(self.key))
            if current is not None:
                return current.decode() if isinstance(current, bytes) else str(current)
        return None
