"""The feedback log in Redis: every rated or commented answer kept a year for review and export.

Keys (``p`` is the configured prefix), apart from the sessions' and messages' ``p:chat:*`` so that
clearing chat history never clears what editors review:

- ``p:feedback:entry:<message_id>``  JSON ``FeedbackEntry`` (question, answer, cited pages, rating,
  comment); TTL ``feedback_ttl_s`` from its last feedback
- ``p:feedback:by_time``             sorted set of message ids scored by their last feedback (epoch s)

Feedback arriving again for an answer is merged into what is stored (``merge_feedback``): KZChatbot's
PHP forwards every field, ``null`` when the user did not give it, so a ``null`` never erases a stored
value, except the widget's own withdraw (``like: null`` with no text); an entry whose rating was
withdrawn and that has no comment is removed. Index members whose entry expired
are dropped on every write. Redis errors become ``DependencyUnavailable("redis")``.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Iterator
from datetime import datetime

import redis.asyncio as aioredis

from ragbot.chat.schemas import FeedbackEntry, FeedbackPage, Rating
from ragbot.chat.sessions import MessageRecord, now_iso
from ragbot.messaging.redis import redis_call, redis_guard

CSV_COLUMNS = (
    "feedback_at",
    "rating",
    "comment",
    "question",
    "answer",
    "source_page_ids",
    "source_titles",
    "source_urls",
    "channel",
    "asked_at",
    "message_id",
)
_READ_CHUNK = 200
# A spreadsheet runs a cell starting with these as a formula: such cells are written with a quote first.
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def merge_feedback(
    *,
    stored_rating: Rating | None,
    stored_comment: str | None,
    like_sent: bool,
    like: bool | None,
    text: str | None,
) -> tuple[Rating | None, str | None]:
    """The (rating, comment) to store after a rating call, from what is stored and what was sent.

    - text: a non-empty text replaces the stored comment; ``null``, ``""`` or no text keeps it;
    - like: ``true``/``false`` sets the rating; a ``like`` left out keeps it; ``like: null`` withdraws
      it only when the call carries no text (the widget's un-press sends ``{answerId, like: null}``,
      which the PHP forwards as ``{like: null, free_text: null}``); a text with ``like: null`` is a
      follow-up comment and keeps the rating.
    """
    text_given = bool(text)
    comment = text if text_given else stored_comment
    if not like_sent or (like is None and text_given):
        return stored_rating, comment
    return (None if like is None else ("up" if like else "down")), comment


class FeedbackLog:
    """Keeps, lists and forgets feedback entries."""

    def __init__(self, *, client: aioredis.Redis, prefix: str, ttl_s: int) -> None:
        self.client = client
        self.prefix = prefix
        self.ttl_s = ttl_s

    def entry_key(self, message_id: str) -> str:
        """Where one entry lives."""
        return f"{self.prefix}:feedback:entry:{message_id}"

    @property
    def index_key(self) -> str:
        """The entries by time of their last feedback."""
        return f"{self.prefix}:feedback:by_time"

    async def keep(self, record: MessageRecord) -> FeedbackEntry | None:
        """Store the answer's current feedback (None: nothing left to keep, the entry is removed)."""
        key = self.entry_key(record.message_id)
        if record.rating is None and not record.comment:
            await redis_call("forget feedback", lambda: self._forget(record.message_id))
            return None
        entry = FeedbackEntry(
            message_id=record.message_id,
            channel=record.channel,
            rating=record.rating,
            comment=record.comment,
            question=record.question,
            answer=record.answer,
            sources=record.cited_sources,
            asked_at=record.created_at,
            feedback_at=record.feedback_at or now_iso(),
            session_id=record.session_id,
        )
        score = datetime.fromisoformat(entry.feedback_at).timestamp()

        async def write() -> None:
            async with self.client.pipeline(transaction=True) as pipe:
                pipe.set(key, entry.model_dump_json(), ex=self.ttl_s)
                pipe.zadd(self.index_key, {record.message_id: score})
                pipe.zremrangebyscore(self.index_key, "-inf", score - self.ttl_s)
                await pipe.execute()

        await redis_call("keep feedback", write)
        return entry

    async def _forget(self, message_id: str) -> None:
        async with self.client.pipeline(transaction=True) as pipe:
            pipe.delete(self.entry_key(message_id))
            pipe.zrem(self.index_key, message_id)
            await pipe.execute()

    async def entries(
        self,
        *,
        rating: Rating | None = None,
        since: datetime | None = None,
        page_id: int | None = None,
        limit: int = 1000,
    ) -> tuple[list[FeedbackEntry], bool]:
        """Matching entries, newest feedback first, at most ``limit``; and whether more matched."""
        low: float | str = since.timestamp() if since is not None else "-inf"
        found: list[FeedbackEntry] = []
        start = 0
        while True:
            with redis_guard("list feedback"):
                ids = await self.client.zrevrangebyscore(
                    self.index_key, "+inf", low, start=start, num=_READ_CHUNK
                )
                if not ids:
                    return found, False
                raws = await self.client.mget([self.entry_key(_text(i)) for i in ids])
            for raw in raws:
                if raw is None:
                    continue  # expired; its index member goes on the next write
                entry = FeedbackEntry.model_validate_json(raw)
                if rating is not None and entry.rating != rating:
                    continue
                if page_id is not None and all(s.page_id != page_id for s in entry.sources):
                    continue
                if len(found) == limit:
                    return found, True
                found.append(entry)
            start += len(ids)


def pages_of(entries: Iterable[FeedbackEntry]) -> list[FeedbackPage]:
    """The cited pages with their down and up counts, most down-rated first."""
    pages: dict[int, FeedbackPage] = {}
    for entry in entries:
        for source in entry.sources:
            page = pages.setdefault(
                source.page_id, FeedbackPage(page_id=source.page_id, title=source.title, url=source.url)
            )
            if entry.rating == "down":
                page.down += 1
            elif entry.rating == "up":
                page.up += 1
    return sorted(pages.values(), key=lambda p: (-p.down, p.up, p.page_id))


def csv_rows(entries: Iterable[FeedbackEntry]) -> Iterator[str]:
    """The entries as CSV text, a header first (a UTF-8 BOM so spreadsheets read Hebrew right)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\r\n")

    def flush() -> str:
        text = buffer.getvalue()
        buffer.seek(0)
        buffer.truncate()
        return text

    writer.writerow(CSV_COLUMNS)
    yield "\ufeff" + flush()
    for e in entries:
        row = (
            e.feedback_at,
            e.rating or "",
            e.comment or "",
            e.question,
            e.answer,
            " | ".join(str(s.page_id) for s in e.sources),
            " | ".join(s.title or "" for s in e.sources),
            " | ".join(s.url or "" for s in e.sources),
            e.channel,
            e.asked_at,
            e.message_id,
        )
        writer.writerow([_cell(v) for v in row])
        yield flush()


def jsonl_rows(entries: Iterable[FeedbackEntry]) -> Iterator[str]:
    """The entries as JSON lines."""
    for entry in entries:
        yield entry.model_dump_json() + "\n"


def _cell(value: str) -> str:
    return "'" + value if value.startswith(_FORMULA_STARTS) else value


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
