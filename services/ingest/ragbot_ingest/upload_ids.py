"""Page ids for uploaded files: one stable id per upload key, kept in Redis.

The key of an upload is the ``key`` form field sent with it, else its file name. The first upload of a
key takes the next id from a counter; later uploads of the same key get the same id, so uploading a
new version of a file replaces the old one. Ids start at ``UPLOAD_PAGE_ID_BASE`` = 2**30 + 2**16,
above the folder files' range (``ragbot.indexing.folder``: 2**30 .. 2**30 + 2**16) and far above
MediaWiki's page ids, and stay below 2**31 (an Elasticsearch ``integer``): about 1.07 billion keys.

Redis keys (under ``RedisSettings.key_prefix``)::

    <prefix>:uploads:ids     hash  key -> page id
    <prefix>:uploads:next    counter of ids handed out
"""

from __future__ import annotations

from redis.asyncio import Redis

from ragbot.errors import DependencyUnavailable, ValidationFailed
from ragbot.indexing.folder import FILE_PAGE_ID_BASE, FILE_PAGE_ID_SLOTS
from ragbot.messaging.redis import redis_guard
from ragbot.text.clean import UNSAFE_CHARACTERS

UPLOAD_PAGE_ID_BASE = FILE_PAGE_ID_BASE + FILE_PAGE_ID_SLOTS
UPLOAD_PAGE_ID_MAX = 2**31 - 1
MAX_KEY_CHARS = 1024


def clean_key(key: str) -> str:
    """An upload key as stored: trimmed, non-empty, bounded."""
    key = key.strip()
    if not key:
        raise ValidationFailed("an upload key must not be empty", field="key")
    if len(key) > MAX_KEY_CHARS:
        raise ValidationFailed(f"an upload key must be at most {MAX_KEY_CHARS} characters", field="key")
    if UNSAFE_CHARACTERS.search(key):
        raise ValidationFailed(
            "an upload key must not contain control characters (NUL, ...) or bidi overrides: remove them",
            field="key",
        )
    return key


class RedisUploadIds:
    """The upload key -> page id registry in Redis (race-free: HSETNX decides who wins)."""

    def __init__(self, *, redis: Redis, key_prefix: str) -> None:
        self.redis = redis
        self.ids_key = f"{key_prefix}:uploads:ids"
        self.next_key = f"{key_prefix}:uploads:next"

    async def page_id(self, *, key: str) -> int:
        """The page id of an upload key, handing out a new one the first time."""
        key = clean_key(key)
        with redis_guard("assign an upload page id"):
            known = await self.redis.hget(self.ids_key, key)
            if known is not None:
                return int(known)
            candidate = UPLOAD_PAGE_ID_BASE + int(await self.redis.incr(self.next_key)) - 1
            if candidate > UPLOAD_PAGE_ID_MAX:
                raise DependencyUnavailable("no upload page ids left", dependency="redis")
            if await self.redis.hsetnx(self.ids_key, key, candidate):
                return candidate
            winner = await self.redis.hget(self.ids_key, key)  # a concurrent upload of the same key
        if winner is None:
            raise DependencyUnavailable(f"upload key {key!r} vanished while assigning", dependency="redis")
        return int(winner)
