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

The ping path (``ping_*`` keys) runs when local checkouts of Kol-Zchut's ChatbotRagContent and the two
extensions it needs are given (``--chatbotragcontent DIR --articletype DIR --articlecontentarea DIR``):
``bench/indexing/kolzchut_wiki.py`` loads them into a bench-only wiki of its own (its own port, run dir
and ``RAGBOT_SERVICES_OWNER``) whose ``$wgChatbotRagContentPingURL`` is the bench's ingest, with a job
runner beside it. Ingest, the worker (no beat: nothing polls) and the retriever then follow that wiki by
its pings alone (``tests/support/wiki_stack.py`` ``ping_stack``). ``SEED_PAGES`` pages are indexed first
(so that one delete stays under reconcile's guard share), then ``--ping-pages`` pages are each created,
edited, moved and deleted one at a time, timed as above:

- ``ping_edit_to_retrievable_p50_s`` / ``_p95_s``: edit → job → ping → fetch from the content route →
  retrievable; target p95 ≤ 5 s;
- ``ping_move_to_renamed_p50_s`` / ``_p95_s``: the extension pings the moved page's id;
- ``ping_delete_to_gone_p50_s`` / ``_p95_s``: the extension's delete ping names no page (``page_id: 0``);
  ingest reconciles against the wiki's page list ``--delete-window`` seconds after it; target ≤ that
  window + 5 s.

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
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from support.mediawiki import WikiSession  # noqa: E402
from support.wiki_stack import WikiStack, ping_stack, polling_stack  # noqa: E402

from bench.indexing.kolzchut_wiki import (  # noqa: E402
    EXTENSIONS,
    JOB_RUNNER_DESCRIPTION,
    ExtensionDirs,
    extension_dirs,
    extension_wiki,
    page_list_url,
)
from ragbot.dev.mediawiki import sample_wikitext  # noqa: E402
from ragbot.dev.servers import free_port, load_pages  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "wiki.json"
SAMPLES = ROOT / "samples" / "kolzchut" / "pages.jsonl"
DEFINITION = {
    "identifier_field": "page_id",
    "saved_fields": {"title": "text", "page_id": "integer", "url": "keyword", "content": "text"},
    "field_for_llm": "content",
    "models": {"multilingual-e5-small": "content"},
}
FOLLOW_TIMEOUT_S = 120.0
SETTLE_TIMEOUT_S = 900.0
PROBE_EVERY_S = 0.05
QUESTION_EVERY_S = 0.5
QUESTIONS = (
    "מי זכאי להחזר מס הכנסה?",
    "נקודות זיכוי לנשים",
    "פטור ממס לעיוורים",
    "האם מלגה חייבת במס?",
)
STORM_EDITED, STORM_EDITS_EACH, STORM_DELETED, STORM_MOVED, STORM_RESTORED = 20, 3, 10, 5, 2
PAGE_TEXT_CHARS = 1500  # the head of a sample page: a storm of 100 stays a few minutes on two cores
PING_TARGET_S = 5.0
# Indexed before the timed pages: a delete then removes 1 of at least 8 pages, under reconcile's guard
# (RAGBOT_INGEST_RECONCILE_MAX_REMOVE_SHARE, 0.2), as one delete among a real wiki's pages would.
SEED_PAGES = 6


def word() -> str:
    """A word no other page holds, so a lexical search for it finds exactly the page that has it."""
    return "mark" + uuid.uuid4().hex[:12]


def percentile(values: list[float], share: float) -> float | None:
    """The nearest-rank percentile, rounded to 10 ms; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, max(0, round(share * len(ordered)) - 1))], 2)


def spread(name: str, values: list[float]) -> dict[str, Any]:
    return {f"{name}_p50_s": percentile(values, 0.5), f"{name}_p95_s": percentile(values, 0.95)}


def cpu_name() -> str:
    """The CPU's model name (Linux), else what platform says."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def page_texts() -> list[str]:
    """The sample pages' heads as wikitext (cut at a line end)."""
    texts = []
    for page in load_pages(SAMPLES):
        text = sample_wikitext(page)
        texts.append(
            text[: text.rfind("\n", 0, PAGE_TEXT_CHARS) + 1] if len(text) > PAGE_TEXT_CHARS else text
        )
    return texts


def timed(stack: WikiStack, check: Callable[[], object], *, what: str) -> float:
    """Seconds until ``check`` holds, probed every PROBE_EVERY_S (the clock starts before the call)."""
    start = time.monotonic()
    stack.wait_for(check, timeout_s=FOLLOW_TIMEOUT_S, what=what, every_s=PROBE_EVERY_S)
    return time.monotonic() - start


def follow_one(stack: WikiStack, wiki: WikiSession, *, n: int, body: str) -> tuple[float, float, float]:
    """Create a page (untimed), then time its edit, its move and its delete: (edit, move, delete) s."""
    first, second = word(), word()
    title = wiki.title(f"זמן {n}")
    wiki.edit(title, f"{first}\n{body}")
    stack.wait_for(lambda: stack.holding(first), timeout_s=FOLLOW_TIMEOUT_S, what=f"page {title} created")
    wiki.edit(title, f"{second}\n{body}")
    edit = timed(stack, lambda: stack.holding(second), what=f"the edit of {title}")
    moved_to = wiki.move(title, wiki.title(f"זמן הועבר {n}"))["to"]
    move = timed(
        stack,
        lambda: any(d["title"] == moved_to for d in stack.holding(second)),
        what=f"{title} under its new title",
    )
    wiki.delete(moved_to)
    delete = timed(stack, lambda: stack.holding(second) == [], what=f"{moved_to} gone")
    print(f"page {n}: edit {edit:.2f} s, move {move:.2f} s, delete {delete:.2f} s", flush=True)
    return edit, move, delete


def latencies(stack: WikiStack, wiki: WikiSession, *, pages: int) -> dict[str, Any]:
    """``pages`` pages followed one at a time, so each latency is measured alone."""
    texts = page_texts()
    edits: list[float] = []
    moves: list[float] = []
    deletes: list[float] = []
    for n in range(pages):
        edit, move, delete = follow_one(stack, wiki, n=n, body=texts[n % len(texts)])
        edits.append(edit)
        moves.append(move)
        deletes.append(delete)
    return {
        "pages": pages,
        **spread("edit_to_retrievable", edits),
        **spread("move_to_renamed", moves),
        **spread("delete_to_gone", deletes),
        "edit_to_retrievable_max_s": round(max(edits), 2),
        "move_to_renamed_max_s": round(max(moves), 2),
        "delete_to_gone_max_s": round(max(deletes), 2),
    }


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


def load_average() -> list[float]:
    """The 1, 5 and 15 minute load averages (the machine is shared: figures are read beside them)."""
    return [round(v, 2) for v in os.getloadavg()]


def redis_url() -> str:
    return os.environ.get("RAGBOT_TEST_REDIS_URL", "redis://127.0.0.1:6390/0")


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


def seed(stack: WikiStack, wiki: WikiSession, *, count: int) -> None:
    """Create ``count`` pages and wait until each is retrievable (untimed)."""
    texts = page_texts()
    for n in range(count):
        marker = word()
        wiki.edit(wiki.title(f"בסיס {n}"), f"{marker}\n{texts[n % len(texts)]}")
        stack.wait_for(partial(stack.holding, marker), timeout_s=FOLLOW_TIMEOUT_S, what=f"seed page {n}")


def restore_and_move_out(stack: WikiStack, wiki: WikiSession, *, n: int, body: str) -> tuple[float, float]:
    """A page deleted (untimed until gone), then restored and timed until retrievable again (the
    extension pings the restored page with its old revision), then moved out of the indexed namespace
    and timed until gone (the extension pings its id; the content route answers 404 "irrelevant title")."""
    marker = word()
    title = wiki.title(f"שחזור {n}")
    wiki.edit(title, f"{marker}\n{body}")
    stack.wait_for(partial(stack.holding, marker), timeout_s=FOLLOW_TIMEOUT_S, what=f"page {title} created")
    wiki.delete(title)
    stack.wait_for(lambda: stack.holding(marker) == [], timeout_s=FOLLOW_TIMEOUT_S, what=f"{title} gone")
    wiki.undelete(title)
    restore = timed(stack, partial(stack.holding, marker), what=f"{title} restored")
    wiki.move(title, f"שיחה:{title}", redirect=False)
    move_out = timed(stack, lambda: stack.holding(marker) == [], what=f"{title} moved out of namespace 0")
    print(f"restore {n}: restored {restore:.2f} s, moved out {move_out:.2f} s", flush=True)
    return restore, move_out


def errors_logged(folder: Path) -> int:
    """ERROR (or worse) lines in the services' JSON logs and failed jobs in the wiki's job runner logs."""
    count = 0
    for path in [*folder.glob("*.log"), *folder.glob("wiki/run/mediawiki-*/jobs-*.log")]:
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            if '"level": "ERROR"' in line or '"level": "CRITICAL"' in line or " error=" in line:
                count += 1
    return count


@contextmanager
def work_folder(keep: Path | None) -> Iterator[str]:
    """``keep`` (created, left in place for the logs) or a temporary folder removed afterwards."""
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        yield str(keep)
        return
    with tempfile.TemporaryDirectory(prefix="ragbot-bench-wiki-ping-") as tmp:
        yield tmp


def measure_ping(
    *,
    dirs: ExtensionDirs,
    pages: int,
    delete_window_s: float,
    restores_count: int = 3,
    keep: Path | None = None,
) -> dict[str, Any]:
    """The ping part: a bench-only wiki running the real ChatbotRagContent, followed by its pings alone."""
    started = time.monotonic()
    load_before = load_average()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with (
        work_folder(keep) as tmp,
        ping_stack(
            redis_url=redis_url(),
            list_url=page_list_url(url),
            tmp=Path(tmp),
            definition=DEFINITION,
            delete_window_s=delete_window_s,
            extra_env={"RAGBOT_RATE_LIMIT_ENABLED": "false"},
        ) as stack,
        extension_wiki(
            dirs=dirs,
            folder=Path(tmp) / "wiki",
            port=port,
            ping_url=str(stack.ingest.base_url.join("/v1/pages/changed")),
            namespaces=[0],
        ) as extension,
    ):
        wiki = WikiSession(
            url=extension.url,
            user=os.environ.get("MW_ADMIN_USER", "Admin"),
            password=os.environ.get("MW_ADMIN_PASSWORD", "ragbot-test-admin-password"),
            config_file=str(extension.config_file),
            prefix=f"Ragbot bench {uuid.uuid4().hex[:8]} ",
        )
        wiki.login()
        try:
            seed(stack, wiki, count=SEED_PAGES)
            figures = latencies(stack, wiki, pages=pages)
            texts = page_texts()
            restores: list[float] = []
            moves_out: list[float] = []
            for n in range(restores_count):
                restore, move_out = restore_and_move_out(stack, wiki, n=n, body=texts[n % len(texts)])
                restores.append(restore)
                moves_out.append(move_out)
            figures |= {
                **spread("restore_to_retrievable", restores),
                **spread("move_out_to_gone", moves_out),
                "restores": restores_count,
            }
            stack.assert_alive()
            dead = stack.dead_letters()
        finally:
            wiki.close()
        errors = errors_logged(Path(tmp))
    return {
        "ping_path": "ChatbotRagContent's ragUpdate job pings POST /v1/pages/changed; "
        "its delete ping (page_id 0) reconciles against the wiki's allpages list after the window",
        "ping_wiki": "a bench-only MediaWiki 1.39 (Debian), SQLite, PHP built-in server, no polling",
        "ping_job_runner": JOB_RUNNER_DESCRIPTION,
        "ping_extensions": extension.extensions,
        "ping_compat": extension.compat,
        "ping_target_s": PING_TARGET_S,
        "ping_delete_window_s": delete_window_s,
        "ping_delete_target_s": delete_window_s + 5.0,
        "ping_seed_pages": SEED_PAGES,
        **{f"ping_{key}": value for key, value in figures.items()},
        "ping_dead_letters": len(dead),
        "ping_errors_logged": errors,
        "ping_wall_s": round(time.monotonic() - started, 1),
        "ping_measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "ping_load_average_before": load_before,
        "ping_load_average_after": load_average(),
        "cpu": cpu_name(),
        "cpus": os.cpu_count(),
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
