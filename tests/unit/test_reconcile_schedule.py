"""The scheduled reconcile's beat entry, the worker's beat flag, and GetRelevantPageIds listings."""

from __future__ import annotations

from pathlib import Path

import httpx

from ragbot.messaging.reconcile_schedule import SCHEDULED_RECONCILE_JOB, reconcile_beat_schedule
from ragbot.messaging.reindex import WikiLister
from ragbot.schemas.messages import RECONCILE_WIKI_TASK, ReconcileWiki
from ragbot.settings import SourceSettings
from ragbot_embedder.__main__ import worker_argv

LIST_URL = "http://wiki.test/relevant.json"


def test_the_beat_entry_sends_a_reconcile_of_the_configured_list_every_interval() -> None:
    settings = SourceSettings(
        wiki_list_url=LIST_URL, wiki_callback_url="http://wiki.test/cb/", reconcile_interval_s=600
    )
    [(_name, entry)] = reconcile_beat_schedule(settings=settings, queue="q").items()
    assert entry["task"] == RECONCILE_WIKI_TASK and entry["schedule"] == 600
    assert entry["options"] == {"queue": "q", "expires": 600}
    message = ReconcileWiki.model_validate(entry["kwargs"]["message"])
    assert (message.job_id, message.list_url, message.trigger) == (
        SCHEDULED_RECONCILE_JOB,
        LIST_URL,
        "schedule",
    )
    assert message.callback_url == "http://wiki.test/cb/" and message.max_remove_share == 0.2


def test_no_list_or_no_interval_means_no_entry() -> None:
    assert reconcile_beat_schedule(settings=SourceSettings(), queue="q") == {}
    off = SourceSettings(wiki_list_url=LIST_URL, reconcile_interval_s=0)
    assert reconcile_beat_schedule(settings=off, queue="q") == {}


def test_the_worker_embeds_beat_only_when_asked() -> None:
    plain = worker_argv(queue="q", concurrency=1, log_level="info")
    assert "--beat" not in plain
    beat = worker_argv(queue="q", concurrency=1, log_level="info", beat_schedule_file=Path("/tmp/s"))
    assert beat[-2:] == ["--beat", "--schedule=/tmp/s"]


async def test_get_relevant_page_ids_output_is_a_listing_as_json_or_one_id_per_line() -> None:
    bodies = {"/a.json": b"[3, 1, 2]", "/b.txt": "1\tעמוד\n# comment\n\n5\n".encode()}

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=bodies[request.url.path])

    lister = WikiLister(
        allowed_hosts=["wiki.test"], timeout_s=1.0, max_pages=10, transport=httpx.MockTransport(handler)
    )
    assert [p.page_id async for p in lister.pages(list_url="http://wiki.test/a.json")] == [3, 1, 2]
    assert [p.page_id async for p in lister.pages(list_url="http://wiki.test/b.txt")] == [1, 5]
