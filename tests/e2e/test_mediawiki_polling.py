"""A real worker polls the real test MediaWiki on Celery beat, and the store follows the wiki.

Ingest, the worker and the retriever run as real processes, configured as a deployment without
ChatbotRagContent would be (``RAGBOT_WORKER_BEAT``, ``RAGBOT_MEDIAWIKI_*``); nothing pings, pushes or
calls the poll. A page created, edited, moved, deleted and restored in the wiki (titles under this
test's own prefix, deleted at the end) is found, found with its new text only, found under its new title
(the redirect left behind not indexed), gone, and found again, each within a bounded wait that names what
it waited for. Embeddings come from multilingual-e5-small, the store is the embedded one.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from support.mediawiki import WikiSession
from support.wiki_stack import WikiStack, polling_stack

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(600)]

POLL_INTERVAL_S = 1.0
FOLLOW_TIMEOUT_S = 60.0  # a few intervals plus indexing, with room for a loaded two-core machine
DEFINITION = {
    "identifier_field": "page_id",
    "saved_fields": {"title": "text", "page_id": "integer", "url": "keyword", "content": "text"},
    "field_for_llm": "content",
    "models": {"multilingual-e5-small": "content"},
}


@pytest.fixture(scope="module")
def stack(
    redis_url: str, mediawiki_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WikiStack]:
    with polling_stack(
        redis_url=redis_url,
        api_url=f"{mediawiki_url}/api.php",
        tmp=tmp_path_factory.mktemp("wiki-polling"),
        poll_interval_s=POLL_INTERVAL_S,
        definition=DEFINITION,
    ) as running:
        yield running


def marker() -> str:
    return "mark" + uuid.uuid4().hex[:12]


def test_the_index_follows_the_wiki_by_polling(stack: WikiStack, wiki: WikiSession) -> None:
    first, second = marker(), marker()
    title = wiki.title("מעקב")
    created = wiki.edit(title, f"== זכאות ==\nגרסה ראשונה של הדף, {first}.")
    page_id, first_revision = created["pageid"], created["newrevid"]

    stack.wait_for(
        lambda: stack.indexed_revision(page_id) == first_revision and stack.holding(first),
        timeout_s=FOLLOW_TIMEOUT_S,
        what=f"the new page {page_id} indexed at revision {first_revision} and retrievable",
    )
    found = stack.holding(first)
    assert {d["page_id"] for d in found} == {page_id}, found
    assert found[0]["title"] == created["title"], found[0]
    assert found[0]["heading"] == "זכאות", found[0]

    edited = wiki.edit(title, f"== זכאות ==\nגרסה שנייה של הדף, {second}.")
    stack.wait_for(
        lambda: (
            stack.indexed_revision(page_id) == edited["newrevid"]
            and stack.holding(second)
            and not stack.holding(first)
        ),
        timeout_s=FOLLOW_TIMEOUT_S,
        what=f"the edit (revision {edited['newrevid']}): its text retrievable, the old text gone",
    )

    moved_to = wiki.move(title, wiki.title("מעקב הועבר"), redirect=True)["to"]
    stack.wait_for(
        lambda: any(d["title"] == moved_to for d in stack.holding(second)),
        timeout_s=FOLLOW_TIMEOUT_S,
        what=f"the page under its new title {moved_to!r}",
    )
    after_move = stack.holding(second)
    assert {d["page_id"] for d in after_move} == {page_id}, "the redirect left behind is indexed"
    assert {d["title"] for d in after_move} == {moved_to}, after_move

    wiki.delete(moved_to)
    stack.wait_for(
        lambda: stack.indexed_revision(page_id) is None and stack.holding(second) == [],
        timeout_s=FOLLOW_TIMEOUT_S,
        what=f"the deleted page {page_id} gone from ingest's pages and from retrieval",
    )

    wiki.undelete(moved_to)
    restored = stack.wait_for(
        lambda: stack.holding(second), timeout_s=FOLLOW_TIMEOUT_S, what="the restored page retrievable"
    )
    assert {d["page_id"] for d in restored} == {page_id}, restored
    assert stack.dead_letters() == []
    stack.assert_alive()
