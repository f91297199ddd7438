"""Chat sessions and answered messages in Redis, with lifetimes and a cap on stored turns.

Keys (``p`` is the configured prefix):

- ``p:chat:session:<id>``        JSON of the session (mode, language, times); TTL ``session_ttl_s``
- ``p:chat:session:<id>:turns``  list of JSON turns, the newest ``max_turns`` kept; same TTL
- ``p:chat:message:<id>``        JSON of one answer (question, answer, feedback); TTL ``message_ttl_s``

A session and a message name their ``owner`` (the caller that opened them: a key's name, a guest's
``guest:<id>``, a trusted network's ``network:<ip>``): read with another owner, they do not exist (404,
the same answer as an unknown id, so ids cannot be probed). Records written before owners were kept
have none and stay open to any caller.

Every turn refreshes the session's TTL, so a conversation lives while it is used. Messages outlive
sessions so that feedback and Kol-Zchut ratings can arrive later. ``clear_history`` deletes every
session, turn list and message under the prefix (the Kol-Zchut admin page's danger zone). Redis errors become
``DependencyUnavailable("redis")``.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import redis.asyncio as aioredis
from pydantic import BaseModel, Field, ValidationError

from ragbot.chat.schemas import CitedSource, LanguageChoice, Mode, Rating, SessionInfo, SessionView, Turn
from ragbot.errors import NotFound
from ragbot.messaging.redis import REDIS_ERRORS, redis_call


def now_iso() -> str:
    """The current UTC time, ISO 8601 with milliseconds."""
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def new_id() -> str:
    """A random id for sessions and messages (uuid4 hex)."""
    return uuid.uuid4().hex


class MessageRecord(BaseModel):
    """One answered question, kept for feedback and ratings."""

    message_id: str
    session_id: str | None = None
    channel: str = "api"
    asked_from: str | None = None
    forwarded_for: str | None = None
    question: str
    rewritten_question: str | None = None
    answer: str
    mode: Mode
    abstained: bool = False
    cited_page_ids: list[int] = Field(default_factory=list)
    cited_sources: list[CitedSource] = Field(default_factory=list)
    created_at: str
    rating: Rating | None = None
    comment: str | None = None
    feedback_at: str | None = None
    owner: str | None = None


class _SessionRecord(BaseModel):
    session_id: str
    mode: Mode
    language: LanguageChoice
    created_at: str
    updated_at: str
    owner: str | None = None


def _owned_by(record_owner: str | None, caller: str | None) -> bool:
    """True when ``caller`` may see a record of ``record_owner`` (None on either side: no check)."""
    return record_owner is None or caller is None or record_owner == caller


class ChatStore:
    """Sessions, their turns and answered messages."""

    def __init__(
        self,
        *,
        client: aioredis.Redis,
        prefix: str,
        session_ttl_s: int,
        max_turns: int,
        message_ttl_s: int,
    ) -> None:
        self.client = client
        self.prefix = prefix
        self.session_ttl_s = session_ttl_s
        self.max_turns = max_turns
        self.message_ttl_s = message_ttl_s

    def _session_key(self, session_id: str) -> str:
        return f"{self.prefix}:chat:session:{session_id}"

    def _turns_key(self, session_id: str) -> str:
        return f"{self.prefix}:chat:session:{session_id}:turns"

    def _message_key(self, message_id: str) -> str:
        return f"{self.prefix}:chat:message:{message_id}"

    async def ping(self) -> bool:
        """True when Redis answers."""
        try:
            return bool(await self.client.ping())
        except REDIS_ERRORS:
            return False

    async def clear_history(self, *, batch: int = 500) -> tuple[int, int]:
        """Delete every stored conversation (sessions with their turns, and messages); the config, the
        widget's users and the feedback log stay. Returns (sessions, messages) deleted."""

        async def sweep(pattern: str) -> list[str]:
            found: list[str] = []
            doomed: list[str] = []
            async for key in self.client.scan_iter(match=pattern, count=batch):
                name = key.decode() if isinstance(key, bytes) else str(key)
                found.append(name)
                doomed.append(name)
                if len(doomed) >= batch:
                    await self.client.unlink(*doomed)
                    doomed = []
            if doomed:
                await self.client.unlink(*doomed)
            return found

        sessions = await redis_call("clear sessions", lambda: sweep(f"{self.prefix}:chat:session:*"))
        messages = await redis_call("clear messages", lambda: sweep(f"{self.prefix}:chat:message:*"))
        return sum(1 for k in sessions if not k.endswith(":turns")), len(messages)

    async def create_session(
        self, *, mode: Mode, language: LanguageChoice, owner: str | None = None
    ) -> SessionInfo:
        """A new empty session of ``owner``."""
        stamp = now_iso()
        record = _SessionRecord(
            session_id=new_id(), mode=mode, language=language, created_at=stamp, updated_at=stamp, owner=owner
        )
        await redis_call(
            "create session",
            lambda: self.client.set(
                self._session_key(record.session_id), record.model_dump_json(), ex=self.session_ttl_s
            ),
        )
        return SessionInfo(**record.model_dump(exclude={"owner"}), expires_in_s=self.session_ttl_s)

    async def _record(self, session_id: str, *, owner: str | None = None) -> _SessionRecord:
        raw = await redis_call("read session", lambda: self.client.get(self._session_key(session_id)))
        record = None if raw is None else _SessionRecord.model_validate_json(raw)
        if record is None or not _owned_by(record.owner, owner):
            raise NotFound(f"session {session_id!r} does not exist or has expired")
        return record

    async def session(self, session_id: str, *, owner: str | None = None) -> SessionInfo:
        """The session (``NotFound`` when unknown, expired, or another owner's)."""
        record = await self._record(session_id, owner=owner)
        ttl = await redis_call("read session ttl", lambda: self.client.ttl(self._session_key(session_id)))
        return SessionInfo(**record.model_dump(exclude={"owner"}), expires_in_s=max(int(ttl), 0))

    async def view(self, session_id: str, *, owner: str | None = None) -> SessionView:
        """The session with its stored turns."""
        info = await self.session(session_id, owner=owner)
        return SessionView(**info.model_dump(), turns=await self.turns(session_id))

    async def turns(self, session_id: str, *, last: int | None = None) -> list[Turn]:
        """Stored turns, oldest first (only the ``last`` n when given)."""
        start = 0 if last is None else -last
        if last == 0:
            return []
        raw = await redis_call(
            "read turns", lambda: self.client.lrange(self._turns_key(session_id), start, -1)
        )
        turns: list[Turn] = []
        for item in raw:
            try:
                turns.append(Turn.model_validate_json(item))
            except ValidationError:
                continue  # a turn written by an older version: skip it rather than fail the chat
        return turns

    async def add_turn(self, session_id: str, turn: Turn) -> None:
        """Append a turn, keep the newest ``max_turns``, and extend the session's life."""
        record = await self._record(session_id)
        record.updated_at = turn.created_at
        key, turns_key = self._session_key(session_id), self._turns_key(session_id)

        async def write() -> None:
            async with self.client.pipeline(transaction=True) as pipe:
                pipe.set(key, record.model_dump_json(), ex=self.session_ttl_s)
                pipe.rpush(turns_key, turn.model_dump_json())
                pipe.ltrim(turns_key, -self.max_turns, -1)
                pipe.expire(turns_key, self.session_ttl_s)
                await pipe.execute()

        await redis_call("store turn", write)

    async def save_message(self, message: MessageRecord) -> None:
        """Keep an answer for later feedback."""
        await redis_call(
            "store message",
            lambda: self.client.set(
                self._message_key(message.message_id), message.model_dump_json(), ex=self.message_ttl_s
            ),
        )

    async def message(self, message_id: str, *, owner: str | None = None) -> MessageRecord:
        """A stored answer (``NotFound`` when unknown, expired, or another owner's)."""
        raw = await redis_call("read message", lambda: self.client.get(self._message_key(message_id)))
        record = None if raw is None else MessageRecord.model_validate_json(raw)
        if record is None or not _owned_by(record.owner, owner):
            raise NotFound(f"message {message_id!r} does not exist or has expired")
        return record

    async def set_feedback(
        self, message_id: str, *, rating: Rating | None, comment: str | None, owner: str | None = None
    ) -> MessageRecord:
        """Record (or replace) the feedback on an answer of ``owner``, keeping its remaining lifetime."""
        key = self._message_key(message_id)

        async def update() -> MessageRecord:
            async with self.client.pipeline(transaction=True) as pipe:
                while True:
                    try:
                        await pipe.watch(key)
                        raw = await pipe.get(key)
                        record = None if raw is None else MessageRecord.model_validate_json(raw)
                        if record is None or not _owned_by(record.owner, owner):
                            raise NotFound(f"message {message_id!r} does not exist or has expired")
                        ttl = await pipe.ttl(key)
                        record.rating, record.comment, record.feedback_at = rating, comment, now_iso()
                        pipe.multi()  # type: ignore[no-untyped-call]
                        pipe.set(
                            key,
                            record.model_dump_json(),
                            ex=max(int(ttl), 1) if ttl > 0 else self.message_ttl_s,
                        )
                        await pipe.execute()
                        return record
                    except aioredis.WatchError:
                        continue

        return await redis_call("store feedback", update)
