"""``FeedbackLog`` against the real Redis (own key prefix): listing across read chunks, filters, limits,
replacement, withdrawal and expiry of index members."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest
from redis.asyncio import Redis

from ragbot.chat.feedback import FeedbackLog
from ragbot.chat.schemas import CitedSource, Rating
from ragbot.chat.sessions import MessageRecord

pytestmark = pytest.mark.integration

START = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture
async def log(redis_url: str) -> AsyncIterator[FeedbackLog]:
    prefix = f"test-{uuid.uuid4().hex[:12]}"
    client = Redis.from_url(redis_url)
    try:
        yield FeedbackLog(client=client, prefix=prefix, ttl_s=400 * 86400)
    finally:
        keys = [k async for k in client.scan_iter(match=f"{prefix}:*", count=500)]
        if keys:
            await client.delete(*keys)
        await client.aclose()


def record(n: int, rating: Rating | None, *, comment: str | None = None, page: int = 1) -> MessageRecord:
    return MessageRecord(
        message_id=f"m{n}",
        question=f"question {n}",
        answer=f"answer {n}",
        mode="grounded",
        cited_page_ids=[page],
        cited_sources=[CitedSource(page_id=page, title=f"Page {page}", url=f"https://wiki.example/{page}")],
        created_at=(START + timedelta(minutes=n)).isoformat(),
        rating=rating,
        comment=comment,
        feedback_at=(START + timedelta(minutes=n, seconds=30)).isoformat(),
    )


async def test_listing_walks_every_chunk_newest_first_with_filters_and_limits(log: FeedbackLog) -> None:
    for n in range(450):  # more than two read chunks of 200
        await log.keep(record(n, "down" if n % 3 == 0 else "up", page=n % 7 + 1))
    everything, more = await log.entries(limit=1000)
    assert [e.message_id for e in everything] == [f"m{n}" for n in reversed(range(450))] and not more
    downs, more = await log.entries(rating="down", limit=1000)
    assert len(downs) == 150 and all(e.rating == "down" for e in downs) and not more
    page_3, _ = await log.entries(page_id=3, limit=1000)
    assert {e.message_id for e in page_3} == {f"m{n}" for n in range(450) if n % 7 + 1 == 3}
    recent, _ = await log.entries(since=START + timedelta(minutes=440), limit=1000)
    assert [e.message_id for e in recent] == [f"m{n}" for n in reversed(range(440, 450))]
    capped, more = await log.entries(rating="down", limit=100)
    assert len(capped) == 100 and more
    exact, more = await log.entries(rating="down", limit=150)
    assert len(exact) == 150 and not more


async def test_new_feedback_replaces_and_a_bare_withdrawal_forgets(log: FeedbackLog) -> None:
    await log.keep(record(1, "up"))
    await log.keep(record(2, "down"))
    await log.keep(
        record(1, "down", comment="changed my mind").model_copy(
            update={"feedback_at": (START + timedelta(hours=1)).isoformat()}
        )
    )
    listed, _ = await log.entries()
    assert [(e.message_id, e.rating, e.comment) for e in listed] == [
        ("m1", "down", "changed my mind"),
        ("m2", "down", None),
    ]
    assert await log.keep(record(2, None)) is None  # withdrawn, no comment: nothing to review
    kept = await log.keep(record(1, None, comment="still unclear"))  # a comment alone stays
    assert kept is not None and kept.rating is None
    listed, _ = await log.entries()
    assert [e.message_id for e in listed] == ["m1"]
    assert await log.client.zcard(log.index_key) == 1


async def test_expired_entries_are_skipped_and_their_index_members_dropped(log: FeedbackLog) -> None:
    await log.keep(record(1, "down"))
    await log.client.delete(log.entry_key("m1"))  # as if its TTL ran out
    assert (await log.entries())[0] == []
    late = record(2, "down").model_copy(update={"feedback_at": (START + timedelta(days=401)).isoformat()})
    await log.keep(late)  # a write more than ttl_s later drops the stale member
    members: list[bytes] = await log.client.zrange(log.index_key, 0, -1)  # type: ignore[assignment]
    assert members == [b"m2"]
