"""Domain events (``page.indexed``, ``page.deleted``) on a capped Redis stream ``<prefix>:events``."""

from __future__ import annotations

import logging

from redis.asyncio import Redis
from redis.typing import EncodableT, FieldT

from ragbot.messaging.redis import redis_guard
from ragbot.schemas.messages import PageDeleted, PageIndexed

logger = logging.getLogger(__name__)

DEFAULT_MAXLEN = 100_000


def events_key(key_prefix: str) -> str:
    """The stream every event goes to."""
    return f"{key_prefix}:events"


class EventPublisher:
    """Appends events to the stream, trimmed approximately to ``maxlen`` entries."""

    def __init__(self, *, redis: Redis, key_prefix: str, maxlen: int = DEFAULT_MAXLEN) -> None:
        self.redis = redis
        self.key = events_key(key_prefix)
        self.maxlen = maxlen

    async def publish(self, event: PageIndexed | PageDeleted) -> str:
        """Append one event; returns its stream id."""
        fields: dict[FieldT, EncodableT] = {
            "type": event.type,
            "page_id": event.page_id,
            "data": event.model_dump_json(),
        }
        with redis_guard(f"publish {event.type}"):
            entry = await self.redis.xadd(self.key, fields, maxlen=self.maxlen, approximate=True)
        return entry.decode() if isinstance(entry, bytes) else str(entry)
