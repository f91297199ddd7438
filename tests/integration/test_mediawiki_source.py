"""MediaWiki as a source without the extension, against the real test wiki and real Redis.

Pages come out of ``action=parse`` with their headings; polls from a Redis-kept cursor turn create,
edit, move (in and out of the indexed namespaces), delete and restore into index and delete commands.
The sender records the commands and applies them to a page -> revision map with the embedder's rule
(an index command not newer than the indexed revision is skipped).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis
from pydantic import BaseModel, SecretStr
from support.mediawiki import WikiSession

from ragbot.errors import SourceRefused
from ragbot.messaging.wiki_poll import cursor_key, poll_wiki
from ragbot.schemas.messages import DELETE_PAGE_TASK, INDEX_PAGE_TASK, DeletePage, IndexPage
from ragbot.settings import MediaWikiSettings
from ragbot.sources.mediawiki import MediaWikiApi

pytestmark = pytest.mark.asyncio

PAGE_TEXT = """פתיחה של הדף.

== זכאות ==
מי שעומד בתנאים זכאי. ראו [[דף שלא קיים]] ו[https://example.org אתר חיצוני].

=== תנאים ===
* תנאי ראשון
* תנאי שני

[[קטגוריה:זכויות]]
"""


class AppliedSender:
    """Records every command and applies it the way the embedder does (older or same revision: skipped)."""

    def __init__(self) -> None:
        self.indexed: dict[int, int] = {}
        self.titles: dict[int, str] = {}
        self.sent: list[tuple[str, BaseModel]] = []

    async def send(
        self, *, task: str, message: BaseModel, request_id: str | None = None, countdown: float | None = None
    ) -> str:
        self.sent.append((task, message))
        if task == INDEX_PAGE_TASK:
            assert isinstance(message, IndexPage) and message.page is not None
            if message.revision_id > self.indexed.get(message.page_id, 0):
                self.indexed[message.page_id] = message.revision_id
                self.titles[message.page_id] = message.page.title
        elif task == DELETE_PAGE_TASK:
            assert isinstance(message, DeletePage)
            self.indexed.pop(message.page_id, None)
        return uuid.uuid4().hex

    def commands_for(self, page_id: int) -> list[str]:
        return [task for task, message in self.sent if getattr(message, "page_id", None) == page_id]


@pytest.fixture
async def api(wiki: WikiSession) -> AsyncIterator[MediaWikiApi]:
    client = MediaWikiApi(MediaWikiSettings(api_url=wiki.api_url, namespaces=[0]))
    await client.start()
    try:
        yield client
    finally:
        await client.close()


@pytest.fixture
async def redis_client(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(redis_url)
    try:
        yield client
    finally:
        await client.aclose()


async def test_a_page_comes_with_its_headings_and_without_link_targets(
    wiki: WikiSession, api: MediaWikiApi
) -> None:
    created = wiki.edit(wiki.title("מבנה"), PAGE_TEXT)
    page = await api.page(page_id=created["pageid"])
    assert page is not None
    assert page.revision_id == created["newrevid"]
    assert page.title == created["title"]
    assert page.categories == ["זכויות"]
    assert page.blocks is not None
    headings = {block.heading for block in page.blocks}
    assert "זכאות > תנאים" in headings, headings
    eligibility = next(b for b in page.blocks if b.heading == "זכאות")
    assert "אתר חיצוני" in eligibility.text
    assert "redlink" not in page.content and "http" not in page.content and "action=edit" not in page.content
    assert "תנאי ראשון" in next(b for b in page.blocks if b.heading == "זכאות > תנאים").text
    assert await api.page(page_id=10_000_000) is None


async def test_polling_follows_create_edit_move_delete_and_restore(
    wiki: WikiSession, api: MediaWikiApi, redis_client: aioredis.Redis
) -> None:
    key = cursor_key(f"{wiki.api_url}#{wiki.prefix}")
    await redis_client.delete(key)
    sender = AppliedSender()

    async def poll() -> None:
        await poll_wiki(
            api=api, sender=sender, redis_client=redis_client, key=key, indexed=sender.indexed, namespaces=[0]
        )

    try:
        title = wiki.title("מחזור")
        created = wiki.edit(title, PAGE_TEXT)
        page_id = created["pageid"]
        await poll()  # no cursor yet: a full sync from the page list
        assert sender.indexed.get(page_id) == created["newrevid"]

        await poll()  # nothing changed: nothing sent for the page again
        assert sender.commands_for(page_id) == [INDEX_PAGE_TASK]

        edited = wiki.edit(title, PAGE_TEXT + "\nשורה חדשה.")
        await poll()
        assert sender.indexed[page_id] == edited["newrevid"]
        assert sender.commands_for(page_id) == [INDEX_PAGE_TASK, INDEX_PAGE_TASK]

        moved_to = wiki.title("מחזור הועבר")
        wiki.move(title, moved_to, redirect=True)
        await poll()
        assert sender.titles[page_id] == moved_to
        redirect_id = wiki.page(title)["pageid"]
        assert redirect_id not in sender.indexed, "the redirect left behind is not a page to index"

        wiki.delete(moved_to)
        await poll()
        assert page_id not in sender.indexed
        assert sender.commands_for(page_id)[-1] == DELETE_PAGE_TASK

        wiki.undelete(moved_to)
        wiki.run_jobs()
        await poll()
        assert page_id in sender.indexed, "a restored page is indexed again"

        outside = f"Project:{wiki.prefix}מחוץ"
        wiki.move(moved_to, outside, redirect=False)
        await poll()
        assert page_id not in sender.indexed, "a page moved out of the indexed namespaces leaves the index"
    finally:
        await redis_client.delete(key)


async def test_a_bot_password_logs_in_and_a_wrong_one_is_refused(
    wiki: WikiSession, mediawiki_bot: tuple[str, str]
) -> None:
    user, password = mediawiki_bot
    client = MediaWikiApi(MediaWikiSettings(api_url=wiki.api_url, user=user, password=SecretStr(password)))
    await client.start()
    try:
        created = wiki.edit(wiki.title("בוט"), "תוכן לבוט.")
        page = await client.page(page_id=created["pageid"])
        assert page is not None and page.revision_id == created["newrevid"]
    finally:
        await client.close()
    wrong = MediaWikiApi(
        MediaWikiSettings(api_url=wiki.api_url, user=user, password=SecretStr("a" * 32)),
    )
    with pytest.raises(SourceRefused, match="login"):
        await wrong.start()
    await wrong.close()
