"""One poll of a MediaWiki: read what changed since the Redis-kept cursor, queue index and delete commands.

The first poll (no cursor yet) is a full sync from the wiki's page list (it indexes what is missing or
older; removing what the list lacks is reconcile's job, behind its guard); later ones read recent changes
and look every touched page up again, so edits, new pages, deletes, moves (with or without a redirect,
into or out of the indexed namespaces) and restores all reduce to "index this page" or "delete it".
Pages are fetched here and sent inline (``embedder.index_page``); the embedder skips a revision that is
not newer than the one indexed, so a ping and a poll for the same edit never index it twice or go back.
The cursor moves only after every command was sent: a failed poll is read again next time.
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis

from ragbot.observability.logging import get_request_id
from ragbot.ports import CommandSender, WikiApi
from ragbot.schemas.mediawiki import WikiCursor, WikiPageState
from ragbot.schemas.messages import (
    DELETE_PAGE_TASK,
    INDEX_PAGE_TASK,
    POLL_MEDIAWIKI_TASK,
    DeletePage,
    IndexPage,
    PollMediaWiki,
)
from ragbot.settings import MediaWikiSettings

logger = logging.getLogger(__name__)

CURSOR_KEY_PREFIX = "ragbot:mediawiki:cursor:"
SCHEDULED_POLL_JOB = "mediawiki-poll"


@dataclass(frozen=True, slots=True)
class PollPlan:
    """What one poll decided: pages to fetch and index, pages to delete, and the cursor after them."""

    index: list[int]
    delete: list[int]
    cursor: WikiCursor
    full_sync: bool


def cursor_key(api_url: str) -> str:
    """The Redis key of one wiki's cursor (one per api.php URL)."""
    return CURSOR_KEY_PREFIX + hashlib.sha256(api_url.encode()).hexdigest()[:16]


async def load_cursor(client: aioredis.Redis, key: str) -> WikiCursor | None:
    raw = await client.get(key)
    return None if raw is None else WikiCursor.model_validate_json(raw)


async def save_cursor(client: aioredis.Redis, key: str, cursor: WikiCursor) -> None:
    await client.set(key, cursor.model_dump_json())


def plan_pages(
    states: Sequence[WikiPageState], *, indexed: Mapping[int, int], namespaces: Sequence[int]
) -> tuple[list[int], list[int]]:
    """(to index, to delete): live pages newer than the index; indexed pages gone, redirected or moved out."""
    to_index: list[int] = []
    to_delete: list[int] = []
    wanted = set(namespaces)
    for state in states:
        live = state.exists and not state.redirect and state.namespace in wanted
        if live and state.revision_id > indexed.get(state.page_id, 0):
            to_index.append(state.page_id)
        elif not live and state.page_id in indexed:
            to_delete.append(state.page_id)
    return sorted(set(to_index)), sorted(set(to_delete))


async def plan_poll(
    *, api: WikiApi, indexed: Mapping[int, int], cursor: WikiCursor | None, namespaces: Sequence[int]
) -> PollPlan:
    """Decide one poll: a full sync without a cursor, else the pages recent changes touched."""
    if cursor is None:
        start = await api.latest_cursor()  # taken first: changes made during the sync are read next time
        # Only listed pages: indexed pages the list lacks may come from pushes or uploads, so removing
        # them is left to reconcile and its guard (RAGBOT_INGEST_WIKI_LIST_URL).
        states = await api.all_pages()
        to_index, to_delete = plan_pages(states, indexed=indexed, namespaces=namespaces)
        return PollPlan(index=to_index, delete=to_delete, cursor=start, full_sync=True)
    changes = await api.changes(since=cursor)
    states = await api.states(page_ids=changes.page_ids) if changes.page_ids else []
    to_index, to_delete = plan_pages(states, indexed=indexed, namespaces=namespaces)
    return PollPlan(index=to_index, delete=to_delete, cursor=changes.cursor, full_sync=False)


async def send_plan(*, plan: PollPlan, api: WikiApi, sender: CommandSender) -> tuple[int, int]:
    """Fetch and queue each page to index, queue each delete; (index commands, delete commands) sent."""
    request_id = get_request_id()
    indexed = deleted = 0
    to_delete = list(plan.delete)
    for page_id in plan.index:
        page = await api.page(page_id=page_id)
        if page is None:  # gone between the plan and the fetch
            to_delete.append(page_id)
            continue
        command = IndexPage(
            job_id=uuid.uuid4().hex,
            page_id=page.page_id,
            revision_id=page.revision_id,
            page=page,
            request_id=request_id,
        )
        await sender.send(task=INDEX_PAGE_TASK, message=command, request_id=request_id)
        indexed += 1
    for page_id in to_delete:
        await sender.send(
            task=DELETE_PAGE_TASK,
            message=DeletePage(job_id=uuid.uuid4().hex, page_id=page_id, request_id=request_id),
            request_id=request_id,
        )
        deleted += 1
    return indexed, deleted


async def poll_wiki(
    *,
    api: WikiApi,
    sender: CommandSender,
    redis_client: aioredis.Redis,
    key: str,
    indexed: Mapping[int, int],
    namespaces: Sequence[int],
) -> PollPlan:
    """One whole poll: plan from the stored cursor, send the commands, then store the new cursor."""
    plan = await plan_poll(
        api=api, indexed=indexed, cursor=await load_cursor(redis_client, key), namespaces=namespaces
    )
    sent = await send_plan(plan=plan, api=api, sender=sender)
    await save_cursor(redis_client, key, plan.cursor)
    logger.info(
        "mediawiki polled",
        extra={"full_sync": plan.full_sync, "index": sent[0], "delete": sent[1], "rcid": plan.cursor.rcid},
    )
    return plan


def poll_beat_schedule(*, settings: MediaWikiSettings, queue: str) -> dict[str, dict[str, Any]]:
    """``{name: entry}`` for ``app.conf.beat_schedule``; empty when no MediaWiki is configured."""
    if not settings.api_url:
        return {}
    message = PollMediaWiki(job_id=SCHEDULED_POLL_JOB)
    return {
        "ragbot-poll-mediawiki": {
            "task": POLL_MEDIAWIKI_TASK,
            "schedule": settings.poll_interval_s,
            "kwargs": {"message": message.model_dump(mode="json")},
            # A poll not started within one interval is superseded by the next one.
            "options": {"queue": queue, "expires": settings.poll_interval_s},
        }
    }
