"""Signed-in UI sessions kept in Redis, so that signing out or ``ragbot auth end-sessions`` ends one at once.

Keys (``p`` is ``RAGBOT_REDIS_KEY_PREFIX``), each with the session's lifetime:

- ``p:ui:session:<sha256 of the session id>``  the name of the key the browser signed in with
- ``p:ui:key:<key name>``                      the set of that key's session hashes (to end them all)

Only hashes of session ids are stored: what Redis holds cannot be replayed as a cookie (which must also
be signed). A Redis that fails closes the door (503), it never opens it.
"""

from __future__ import annotations

import hashlib

import redis as redis_sync
import redis.asyncio as aioredis
from redis.exceptions import RedisError

from ragbot.errors import DependencyUnavailable
from ragbot.settings import RedisSettings

REDIS_ERRORS = (RedisError, OSError)


def _digest(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest()


def session_key(prefix: str, session_id: str) -> str:
    """The Redis key of one session."""
    return f"{prefix}:ui:session:{_digest(session_id)}"


def key_sessions_key(prefix: str, name: str) -> str:
    """The Redis set of the sessions signed in with the key called ``name``."""
    return f"{prefix}:ui:key:{name}"


class SessionRegistry:
    """The live signed-in sessions of a deployment (its client connects on first use)."""

    def __init__(self, settings: RedisSettings) -> None:
        self.prefix = settings.key_prefix
        self.settings = settings
        self._client: aioredis.Redis | None = None

    def _redis(self) -> aioredis.Redis:
        if self._client is None:
            self._client = aioredis.Redis.from_url(
                self.settings.url,
                socket_timeout=self.settings.socket_timeout_s,
                socket_connect_timeout=self.settings.socket_timeout_s,
            )
        return self._client

    @staticmethod
    def _unavailable(what: str, exc: Exception) -> DependencyUnavailable:
        return DependencyUnavailable(f"Redis failed on {what} (UI sessions): {exc}", dependency="redis")

    async def add(self, session_id: str, *, name: str, ttl_s: int) -> None:
        """Record a new session of the key called ``name`` for ``ttl_s`` seconds."""
        digest, owned = session_key(self.prefix, session_id), key_sessions_key(self.prefix, name)
        try:
            async with self._redis().pipeline(transaction=True) as pipe:
                pipe.set(digest, name, ex=ttl_s)
                pipe.sadd(owned, digest)
                pipe.expire(owned, ttl_s)
                await pipe.execute()
        except REDIS_ERRORS as exc:
            raise self._unavailable("recording a sign-in", exc) from None

    async def live(self, session_id: str, *, name: str) -> bool:
        """True while the session is recorded for the key called ``name`` (not signed out, not ended)."""
        try:
            stored = await self._redis().get(session_key(self.prefix, session_id))
        except REDIS_ERRORS as exc:
            raise self._unavailable("checking a session", exc) from None
        found = stored.decode() if isinstance(stored, bytes) else stored
        return found == name

    async def remove(self, session_id: str, *, name: str) -> None:
        """End one session (sign-out)."""
        digest = session_key(self.prefix, session_id)
        try:
            async with self._redis().pipeline(transaction=True) as pipe:
                pipe.delete(digest)
                pipe.srem(key_sessions_key(self.prefix, name), digest)
                await pipe.execute()
        except REDIS_ERRORS as exc:
            raise self._unavailable("signing out", exc) from None

    async def close(self) -> None:
        """Close the connections (the next use opens new ones)."""
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()


def end_key_sessions(client: redis_sync.Redis, *, prefix: str, name: str) -> int:
    """End every session signed in with the key called ``name`` (``ragbot auth end-sessions``); how many."""
    owned = key_sessions_key(prefix, name)
    digests = [d.decode() if isinstance(d, bytes) else str(d) for d in client.smembers(owned)]
    ended = int(client.delete(*digests)) if digests else 0
    client.delete(owned)
    return ended


def end_all_sessions(client: redis_sync.Redis, *, prefix: str) -> int:
    """End every signed-in session of the deployment; how many."""
    ended = 0
    for pattern in (f"{prefix}:ui:session:*", f"{prefix}:ui:key:*"):
        doomed = list(client.scan_iter(match=pattern, count=500))
        if doomed:
            removed = int(client.delete(*doomed))
            ended += removed if pattern.endswith("session:*") else 0
    return ended
