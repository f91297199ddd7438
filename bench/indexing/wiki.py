"""Issue 26's figures on the real MediaWiki: how soon a polled wiki's edits, deletes and moves show in
retrieval, and whether a storm of changes ends with the index equal to the wiki.

``tests/support/wiki_stack.py`` starts ingest, a worker with Celery beat polling the wiki
(``RAGBOT_WORKER_BEAT``, ``RAGBOT_MEDIAWIKI_*``, nothing pings or pushes) and the retriever as real
processes on the embedded store; the wiki is the real MediaWiki 1.39 of ``scripts/services.sh``
(``RAGBOT_TEST_MEDIAWIKI_URL``), written through its Action API as an admin, every title under this run's
own prefix and deleted at the end. Every latency runs from the moment the wiki's API answered the
write (the change is saved) until the retriever answers as the wiki now reads, probed every 50 ms:

- ``edit_to_retrievable_p50_s`` / ``_p95_s``: an edit's new text (a word only it holds) is returned by
  ``POST /v1/retrieve``; target ≤ the poll interval + 5 s;
- ``move_to_renamed_p50_s`` / ``_p95_s``: the moved page is returned under its new title;
- ``delete_to_gone_p50_s`` / ``_p95_s``: a deleted page's text is no longer returned; target ≤ the poll
  interval + 5 s;
- the storm (``--storm-pages``, 100 by default): that many pages created one after another as fast as
  the wiki takes them, then 20 of them edited 3 times each, 10 deleted, 5 moved and 2 of the deleted
  restored, while a client asks a question every ``QUESTION_EVERY_S``. Once the wiki's writes are done
  the run waits until the retriever serves every page as the wiki has it, then searches every word:
  ``storm_missing`` (live pages whose last text is not found under their title), ``storm_stale_found``
  (an earlier revision's text found) and ``storm_deleted_found`` (a deleted page found), all with
  target 0; ``storm_create_to_retrievable_p50_s`` / ``_p95_s`` (each page from its creation until the
  retriever serves it); ``storm_settled_s`` (from the first write until all was served) and the
  questions' latency and errors.

The ping path (``ping_*`` keys, ``bench/indexing/wiki_ping.py``) runs when local checkouts of Kol-Zchut's
ChatbotRagContent and the two extensions it needs are given (``--chatbotragcontent DIR --articletype DIR
--articlecontentarea DIR``); its module says what it times.

Without the checkouts the ping part is skipped (the run says why) and the polling part still runs. The
keys each part writes replace only their own in ``bench/results/wiki.json``. Run: ``uv run python -m
bench.indexing.wiki [--pages 8] [--storm-pages 100] [--poll-interval 2] [--chatbotragcontent DIR
--articletype DIR --articlecontentarea DIR] [--no-polling]`` (needs ``RAGBOT_TEST_REDIS_URL`` and, for
polling, ``RAGBOT_TEST_MEDIAWIKI_*``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from support.mediawiki import WikiSession  # noqa: E402
from support.wiki_stack import WikiStack, polling_stack  # noqa: E402

from bench.indexing.kolzchut_wiki import EXTENSIONS, extension_dirs  # noqa: E402
from bench.indexing.wiki_follow import (  # noqa: E402
    DEFINITION,
    PROBE_EVERY_S,
    cpu_name,
    latencies,
    load_average,
    page_texts,
    redis_url,
    spread,
    word,
)
from bench.indexing.wiki_ping import measure_ping  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "wiki.json"
SETTLE_TIMEOUT_S = 900.0
QUESTION_EVERY_S = 0.5
QUESTIONS = (
    "מי זכאי להחזר מס הכנסה?",
    "נקודות זיכוי לנשים",
    "פטור ממס לעיוורים",
    "האם מלגה חייבת במס?",
)
STORM_EDITED, STORM_EDITS_EACH, STORM_DELETED, STORM_MOVED, STORM_RESTORED = 20, 3, 10, 5, 2


@dataclass
class StormPage:
    """One storm page: what the wiki holds now, and every word an earlier revision held."""

    title: str
    body: str
    page_id: int = 0
    word: str = ""
    stale: list[str] = field(default_factory=list)
    deleted: bool = False
    created_at: float = 0.0
    served_after_s: float | None = None


@dataclass
class Questions:
    """Questions asked throughout the storm from a thread of their own: latencies and failures."""

    url: str
    latencies: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=60.0) as client:
            n = 0
            while not self.stop.wait(QUESTION_EVERY_S):
                body = {"query": QUESTIONS[n % len(QUESTIONS)], "paragraphs_per_page": [3, 2, 1]}
                start = time.monotonic()
                try:
                    response = client.post("/v1/retrieve", json=body)
                    if response.status_code != 200:
                        self.errors.append(f"HTTP {response.status_code}: {response.text[:200]}")
                except httpx.HTTPError as exc:
                    self.errors.append(repr(exc))
                self.latencies.append(time.monotonic() - start)
                n += 1


@contextmanager
def asking(url: str) -> Iterator[Questions]:
    questions = Questions(url=url)
    thread = threading.Thread(target=questions.run, name="questions", daemon=True)
    thread.start()
    try:
        yield questions
    finally:
        questions.stop.set()
        thread.join(timeout=120)


def served(stack: WikiStack, page: StormPage) -> bool:
    """Whether the retriever serves the page as the wiki has it (or not at all, when deleted)."""
    response = stack.retriever.get(f"/v1/pages/{page.page_id}")
    if page.deleted:
        return response.status_code == 404
    if response.status_code != 200:
        return False
    documents = response.json()["documents"]
    return any(page.word in str(d.get("content")) for d in documents) and all(
        d.get("title") == page.title for d in documents
    )


def watch(stack: WikiStack, pages: list[StormPage], stop: threading.Event) -> None:
    """Note when each created page is first served (any of its revisions), until told to stop."""
    with httpx.Client(base_url=str(stack.retriever.base_url), timeout=60.0) as client:
        while not stop.is_set():
            for page in list(pages):
                if page.served_after_s is not None or not page.page_id:
                    continue
                response = client.get(f"/v1/pages/{page.page_id}")
                if response.status_code == 200:
                    text = " ".join(str(d.get("content")) for d in response.json()["documents"])
                    if any(w in text for w in (page.word, *page.stale)):
                        page.served_after_s = time.monotonic() - page.created_at
            stop.wait(PROBE_EVERY_S)


def storm(stack: WikiStack, wiki: WikiSession, *, size: int) -> dict[str, Any]:
    """Create ``size`` pages, edit, delete, move and restore some, then check the index equals the wiki."""
    texts = page_texts()
    pages: list[StormPage] = []
    stop_watch = threading.Event()
    watcher = threading.Thread(target=watch, args=(stack, pages, stop_watch), name="watch", daemon=True)
    watcher.start()
    with asking(str(stack.retriever.base_url)) as questions:
        started = time.monotonic()
        for n in range(size):
            page = StormPage(title=wiki.title(f"סערה {n}"), body=texts[n % len(texts)], word=word())
            created = wiki.edit(page.title, f"{page.word}\n{page.body}")
            page.page_id, page.title, page.created_at = created["pageid"], created["title"], time.monotonic()
            pages.append(page)
        created_s = time.monotonic() - started
        edited = pages[:STORM_EDITED]
        deleted = pages[STORM_EDITED : STORM_EDITED + STORM_DELETED]
        moved = pages[STORM_EDITED + STORM_DELETED : STORM_EDITED + STORM_DELETED + STORM_MOVED]
        for _ in range(STORM_EDITS_EACH):
            for page in edited:
                page.stale.append(page.word)
                page.word = word()
                wiki.edit(page.title, f"{page.word}\n{page.body}")
        for page in deleted:
            wiki.delete(page.title)
            page.deleted = True
        for n, page in enumerate(moved):
            page.title = wiki.move(page.title, wiki.title(f"סערה הועבר {n}"))["to"]
        for page in deleted[:STORM_RESTORED]:
            wiki.undelete(page.title)
            page.deleted = False
        writes_done = time.monotonic()
        print(
            f"storm: {size} pages created in {created_s:.1f} s, all writes in {writes_done - started:.1f} s",
            flush=True,
        )
        pending = list(pages)
        deadline = writes_done + SETTLE_TIMEOUT_S
        while pending and time.monotonic() < deadline:
            stack.assert_alive()
            pending = [page for page in pending if not served(stack, page)]
            time.sleep(PROBE_EVERY_S)
        settled = time.monotonic()
        stop_watch.set()
        watcher.join(timeout=120)
    live = [page for page in pages if not page.deleted]
    missing = [p.title for p in live if not any(d["title"] == p.title for d in stack.holding(p.word))]
    stale_found = [w for p in pages for w in p.stale if stack.holding(w)]
    deleted_found = [p.title for p in pages if p.deleted and (stack.holding(p.word) or served_any(stack, p))]
    create_times = [p.served_after_s for p in pages if p.served_after_s is not None]
    if missing or stale_found or deleted_found:
        print(
            f"storm: missing {missing[:5]}, stale found {stale_found[:5]}, deleted found {deleted_found[:5]}"
        )
    return {
        "storm_pages": size,
        "storm_edits": len(edited) * STORM_EDITS_EACH,
        "storm_deleted": len(deleted),
        "storm_moved": len(moved),
        "storm_restored": len(deleted[:STORM_RESTORED]),
        "storm_missing": len(missing),
        "storm_stale_found": len(stale_found),
        "storm_deleted_found": len(deleted_found),
        "storm_unsettled_at_timeout": len(pending),
        "storm_create_s": round(created_s, 2),
        "storm_writes_s": round(writes_done - started, 2),
        "storm_settled_s": round(settled - started, 2),
        "storm_settled_after_last_write_s": round(settled - writes_done, 2),
        **spread("storm_create_to_retrievable", create_times),
        "storm_create_to_retrievable_seen": len(create_times),
        "storm_questions": len(questions.latencies),
        "storm_question_errors": len(questions.errors),
        **spread("storm_question", questions.latencies),
    }


def served_any(stack: WikiStack, page: StormPage) -> bool:
    """Whether the retriever still serves any paragraph of the page."""
    return bool(stack.retriever.get(f"/v1/pages/{page.page_id}").status_code == 200)


def wiki_session() -> WikiSession:
    """An admin session on the test wiki with this run's own title prefix."""
    session = WikiSession(
        url=os.environ.get("RAGBOT_TEST_MEDIAWIKI_URL", "http://127.0.0.1:8480"),
        user=os.environ.get("RAGBOT_TEST_MEDIAWIKI_USER", "Admin"),
        password=os.environ.get("RAGBOT_TEST_MEDIAWIKI_PASSWORD", "ragbot-test-admin-password"),
        config_file=os.environ.get("RAGBOT_TEST_MEDIAWIKI_CONFIG", ""),
        prefix=f"Ragbot bench {uuid.uuid4().hex[:8]} ",
    )
    session.login()
    return session


def measure(*, pages: int, storm_pages: int, poll_interval_s: float) -> dict[str, Any]:
    """The polling part, on the shared test wiki."""
    wiki = wiki_session()
    started = time.monotonic()
    load_before = load_average()
    try:
        with (
            tempfile.TemporaryDirectory(prefix="ragbot-bench-wiki-") as tmp,
            polling_stack(
                redis_url=redis_url(),
                api_url=wiki.api_url,
                tmp=Path(tmp),
                poll_interval_s=poll_interval_s,
                definition=DEFINITION,
                extra_env={"RAGBOT_RATE_LIMIT_ENABLED": "false"},
            ) as stack,
        ):
            figures = latencies(stack, wiki, pages=pages) if pages else {}
            if storm_pages:
                figures.update(storm(stack, wiki, size=storm_pages))
            stack.assert_alive()
    finally:
        wiki.cleanup()
        wiki.close()
    return {
        "path": "polling (Celery beat, embedder.poll_mediawiki)",
        "wiki": "MediaWiki 1.39 (Debian), SQLite, PHP built-in server",
        "poll_interval_s": poll_interval_s,
        "target_s": poll_interval_s + 5.0,
        "store": "embedded",
        "model": "multilingual-e5-small",
        **figures,
        "wall_s": round(time.monotonic() - started, 1),
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "load_average_before": load_before,
        "load_average_after": load_average(),
        "cpu": cpu_name(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--pages", type=int, default=8, help="pages edited, moved and deleted one at a time")
    parser.add_argument("--storm-pages", type=int, default=100, help="pages the storm creates (0: no storm)")
    parser.add_argument("--poll-interval", type=float, default=2.0, help="RAGBOT_MEDIAWIKI_POLL_INTERVAL_S")
    parser.add_argument("--no-polling", action="store_true", help="run only the ping part")
    for option, (name, repo) in EXTENSIONS.items():
        env = f"RAGBOT_BENCH_{option.upper()}"
        parser.add_argument(
            f"--{option}",
            type=Path,
            default=os.environ.get(env) or None,
            metavar="DIR",
            help=f"a local checkout of {name} ({repo}) for the ping part [{env}]",
        )
    parser.add_argument("--ping-pages", type=int, default=8, help="pages the ping part follows one at a time")
    parser.add_argument(
        "--delete-window",
        type=float,
        default=None,
        help="RAGBOT_INGEST_DELETE_RECONCILE_DELAY_S for the ping part (default: the poll interval)",
    )
    parser.add_argument("--keep", type=Path, default=None, metavar="DIR", help="the ping part's logs go here")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    dirs = extension_dirs({option: getattr(args, option) for option in EXTENSIONS})
    if isinstance(dirs, str):
        print(f"ping part skipped: {dirs}", flush=True)
    result: dict[str, Any] = {}
    if not args.no_polling:
        result.update(
            measure(pages=args.pages, storm_pages=args.storm_pages, poll_interval_s=args.poll_interval)
        )
    if not isinstance(dirs, str):
        window = args.poll_interval if args.delete_window is None else args.delete_window
        result.update(measure_ping(dirs=dirs, pages=args.ping_pages, delete_window_s=window, keep=args.keep))
    # Each part replaces only its own keys: the other part's figures from an earlier run stay.
    kept = json.loads(args.out.read_text(encoding="utf-8")) if args.out.is_file() else {}
    written = {**kept, **result}
    args.out.write_text(json.dumps(written, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(json.dumps(result, indent=2, ensure_ascii=False))
    failed = (
        result.get("storm_missing") or result.get("storm_stale_found") or result.get("storm_deleted_found")
    )
    if "ping_edit_to_retrievable_p95_s" in result:
        ping_met = (result["ping_edit_to_retrievable_p95_s"] or 0) <= result["ping_target_s"] and (
            result["ping_delete_to_gone_p95_s"] or 0
        ) <= result["ping_delete_target_s"]
        print(f"ping targets {'met' if ping_met else 'NOT met'}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
