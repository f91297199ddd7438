"""Claims the ``index_page`` messages waiting behind the one a worker runs, as kombu claims a delivery.

A storm of wiki pings is one ``embedder.index_page`` message per page. The task Celery delivers takes
the ping messages waiting at the head of the queue along (``claim_waiting``), so their pages share one
pipeline call. Each claimed message is moved, in one Lua script, from the queue's list into kombu's
own unacknowledged set (the ``unacked`` hash and ``unacked_index`` sorted set, with the claim time):
exactly what kombu's Redis transport does for a message it hands a worker with ``acks_late``. So a
worker killed mid-batch loses nothing: every worker's restore sweep puts the claimed messages back on
the queue once the visibility timeout passed, as it does for the message Celery delivered. ``ack``
removes a claimed message once its page is written (or its job record is final).

Only a run of ready ``index_page`` messages at the head of the queue is taken: the first message of
another task, or one with an ETA (a retry's countdown), ends the run, so every other message keeps its
place. Messages stay in arrival order.
"""

from __future__ import annotations

import base64
import json
import time
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError

from ragbot.errors import DependencyUnavailable

__all__ = ["Claimed", "MessageQueue"]

# KEYS: queue list, unacked hash, unacked index; ARGV: task name, most messages, claim time.
_CLAIM = """
local out = {}
for _ = 1, tonumber(ARGV[2]) do
  local raw = redis.call('LINDEX', KEYS[1], -1)
  if not raw then break end
  local ok, msg = pcall(cjson.decode, raw)
  if not ok or type(msg) ~= 'table' then break end
  local headers, props = msg['headers'], msg['properties']
  if type(headers) ~= 'table' or type(props) ~= 'table' then break end
  if headers['task'] ~= ARGV[1] then break end
  if headers['eta'] ~= nil and headers['eta'] ~= cjson.null then break end
  local info, tag = props['delivery_info'], props['delivery_tag']
  if type(info) ~= 'table' or type(tag) ~= 'string' then break end
  redis.call('RPOP', KEYS[1])
  redis.call('ZADD', KEYS[3], ARGV[3], tag)
  redis.call('HSET', KEYS[2], tag,
    '[' .. raw .. ',' .. cjson.encode(info['exchange']) .. ',' .. cjson.encode(info['routing_key']) .. ']')
  table.insert(out, raw)
end
return out
"""


@dataclass(frozen=True, slots=True)
class Claimed:
    """One claimed message: its delivery tag, task id, retries so far, headers and task kwargs."""

    tag: str
    task_id: str
    retries: int
    headers: dict[str, Any]
    kwargs: dict[str, Any]


class MessageQueue:
    """Claims and acknowledges messages of one Celery queue in Redis (keys under Celery's prefix)."""

    def __init__(self, *, redis: Redis, key_prefix: str, queue: str) -> None:
        self.redis = redis
        self.queue_key = f"{key_prefix}{queue}"
        self.unacked_key = f"{key_prefix}unacked"
        self.index_key = f"{key_prefix}unacked_index"

    async def claim_waiting(self, *, task: str, limit: int) -> list[Claimed]:
        """Up to ``limit`` ready ``task`` messages from the head of the queue, now unacknowledged."""
        if limit <= 0:
            return []
        try:
            raws = await self.redis.eval(
                _CLAIM, 3, self.queue_key, self.unacked_key, self.index_key, task, limit, time.time()
            )
        except (RedisError, OSError) as exc:
            raise DependencyUnavailable(
                f"could not claim waiting messages: {exc}", dependency="redis"
            ) from None
        return [_decode(raw) for raw in raws]

    async def ack(self, claimed: Claimed) -> None:
        """The message is handled: it leaves the unacknowledged set and is never restored."""
        try:
            async with self.redis.pipeline(transaction=True) as pipe:
                pipe.zrem(self.index_key, claimed.tag)
                pipe.hdel(self.unacked_key, claimed.tag)
                await pipe.execute()
        except (RedisError, OSError) as exc:
            raise DependencyUnavailable(
                f"could not acknowledge a message: {exc}", dependency="redis"
            ) from None


def _decode(raw: bytes | str) -> Claimed:
    """A kombu Redis payload (Celery protocol 2, JSON body, base64 on the wire) as a ``Claimed``."""
    payload = json.loads(raw)
    headers: dict[str, Any] = payload.get("headers") or {}
    properties = payload.get("properties") or {}
    body: Any = payload.get("body", "")
    if properties.get("body_encoding") == "base64":
        body = base64.b64decode(body)
    decoded = json.loads(body)
    kwargs = decoded[1] if isinstance(decoded, list) and len(decoded) > 1 else {}
    return Claimed(
        tag=str(properties.get("delivery_tag")),
        task_id=str(headers.get("id", "")),
        retries=int(headers.get("retries") or 0),
        headers=headers,
        kwargs=kwargs if isinstance(kwargs, dict) else {},
    )
