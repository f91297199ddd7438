"""The re-embed scenario through real processes, shared by the e2e test and ``bench/operations/reembed.py``.

A stack (ingest, embedder worker, retriever as children, a local wiki) indexes ``pages`` pages with
one definition; the definition file is then changed (the same model now also embeds the title, a
new vector field) and ``ragbot reembed`` runs while one thread queries every page by a word only it
holds and another edits and pings pages (and deletes one). Counted: queries that failed (not 200),
queries whose page was missing from the answer (which may hold every page: a page missing
means it was not searchable in the generation queried), and, once the switch happened, pages the new
generation lacks or holds at an older revision than the wiki's.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import redis

from ragbot.dev.servers import LocalWiki, ServiceProcess, free_port, load_pages
from support.processes import delete_es_prefix, delete_redis_prefix, stack_env, stack_processes
from support.waits import holds_within, poll

SAMPLES = Path(__file__).resolve().parents[2] / "samples" / "kolzchut" / "pages.jsonl"
MODEL = "all-MiniLM-L6-v2"
OLD_DEFINITION: dict[str, Any] = {
    "identifier_field": "page_id",
    "saved_fields": {"title": "text", "page_id": "integer", "url": "keyword", "content": "text"},
    "field_for_llm": "content",
    "models": {MODEL: "content"},
}
NEW_DEFINITION: dict[str, Any] = {**OLD_DEFINITION, "models": {MODEL: ["title", "content"]}}
FIRST_PAGE = 300_000
DROP_AFTER_S = 8.0


@dataclass
class Figures:
    """What one run counted."""

    pages: int = 0
    queries: int = 0
    failed_queries: int = 0
    empty_results: int = 0
    pings: int = 0
    lost_pages: list[int] = field(default_factory=list)
    deleted_still_there: list[int] = field(default_factory=list)
    reembed_exit: int | None = None
    reembed_output: str = ""
    reembed_s: float = 0.0
    switched_to: str = ""
    old_dropped: bool = False
    errors: list[str] = field(default_factory=list)


def word(page_id: int) -> str:
    """A word only this page holds."""
    return f"zq{page_id}x"


def leading_paragraphs(content: str, max_chars: int | None) -> str:
    """The page's first paragraphs up to ``max_chars`` characters (at least one); all with None."""
    if max_chars is None:
        return content
    kept: list[str] = []
    length = 0
    for paragraph in content.split("\n\n"):
        length += len(paragraph) + (2 if kept else 0)
        if kept and length > max_chars:
            break
        kept.append(paragraph)
    return "\n\n".join(kept)


def make_pages(count: int, *, max_chars: int | None = None) -> list[dict[str, Any]]:
    """``count`` pages from the Kol-Zchut samples, each with its own id and word (each sample cut to its
    first ``max_chars`` characters of paragraphs when given)."""
    samples = load_pages(SAMPLES)
    pages = []
    for n in range(count):
        base = samples[n % len(samples)]
        page_id = FIRST_PAGE + n
        content = leading_paragraphs(base["content"], max_chars)
        pages.append(
            {
                **base,
                "page_id": page_id,
                "revision_id": 1,
                "title": f"{base['title']} {n}",
                "content": f"{content}\n\nמילה {word(page_id)} בעמוד {n}.",
            }
        )
    return pages


class Stack:
    """ingest + worker + retriever for one store backend, and the wiki they read."""

    def __init__(self, *, backend: str, redis_url: str, es_url: str, tmp: Path) -> None:
        run_id = uuid.uuid4().hex[:10]
        self.backend = backend
        self.redis_url = redis_url
        self.es_url = es_url
        self.prefix = f"e2e-re-{run_id}"
        self.tmp = tmp
        self.answer_pages = 10
        self.definition = tmp / "definition.json"
        self.definition.write_text(json.dumps(OLD_DEFINITION), encoding="utf-8")
        ports = {"ingest": free_port(), "retriever": free_port(), "worker": free_port()}
        self.env = stack_env(
            definition=self.definition,
            redis_url=redis_url,
            prefix=self.prefix,
            tmp=tmp,
            ports=ports,
            store=backend,
            es_url=es_url,
            overrides={
                "RAGBOT_INGEST_REINDEX_BATCH_PAGES": "8",
                "RAGBOT_RETRIEVER_GENERATION_POLL_S": "0.3",
                "RAGBOT_WORKER_RETRY_BACKOFF_S": "0.05",
                "RAGBOT_WORKER_RETRY_BACKOFF_MAX_S": "0.2",
                "RAGBOT_WORKER_REEMBED_DROP_AFTER_S": str(DROP_AFTER_S),
                "RAGBOT_TORCH_THREADS": "1",
            },
        )
        self.wiki = LocalWiki([])
        self.processes: list[ServiceProcess] = stack_processes(ports, self.env, log_dir=tmp)
        self.ingest = httpx.Client(base_url=f"http://127.0.0.1:{ports['ingest']}", timeout=30.0)
        self.retriever = httpx.Client(base_url=f"http://127.0.0.1:{ports['retriever']}", timeout=30.0)

    def start(self, *, timeout_s: float = 240.0) -> None:
        self.wiki.start()
        for proc in self.processes:
            proc.start()
        for proc in self.processes:
            proc.wait_healthy(timeout_s=timeout_s)

    def stop(self) -> dict[str, int | None]:
        codes = {proc.name: proc.stop() for proc in self.processes}
        self.ingest.close()
        self.retriever.close()
        self.wiki.stop()
        delete_redis_prefix(self.redis_url, self.prefix)
        if self.es_url:
            delete_es_prefix(self.es_url, self.prefix)
        return codes

    def logs(self) -> str:
        return "\n".join(f"--- {p.name} ---\n{p.log_tail(40)}" for p in self.processes)

    def ping(self, page_id: int) -> str:
        response = self.ingest.post("/v1/pages/changed", json=self.wiki.ping(page_id))
        response.raise_for_status()
        return str(response.json()["job_id"])

    def wait_jobs(self, job_ids: list[str], *, timeout_s: float = 300.0) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout_s
        records = []
        for job_id in job_ids:

            def ended(job_id: str = job_id) -> dict[str, Any] | None:
                record: dict[str, Any] = self.ingest.get(f"/v1/jobs/{job_id}").json()
                return record if record["state"] in ("done", "skipped", "failed") else None

            left = max(0.0, deadline - time.monotonic())
            records.append(poll(f"job {job_id} to end", ended, timeout_s=left, every_s=0.1, detail=self.logs))
        return records

    def found(self, page_id: int) -> tuple[bool, bool]:
        """(answered, the page came back) for a query of the page's own word."""
        try:
            response = self.retriever.post(
                "/v1/retrieve",
                json={"query": f"מילה {word(page_id)}", "paragraphs_per_page": [1] * self.answer_pages},
            )
        except httpx.HTTPError:
            return False, False
        if response.status_code != 200:
            return False, False
        return True, any(int(d["page_id"]) == page_id for d in response.json()["documents"])

    def start_reembed(self, *, timeout_s: float) -> subprocess.Popen[str]:
        """Change the definition file and start ``ragbot reembed`` (it waits for the switch)."""
        self.definition.write_text(json.dumps(NEW_DEFINITION), encoding="utf-8")
        command = [
            sys.executable,
            "-m",
            "ragbot.cli.main",
            "reembed",
            "--callback-url",
            self.wiki.callback_url,
        ]
        command += ["--poll", "0.2", "--timeout", str(timeout_s)]
        return subprocess.Popen(
            command, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=self.tmp
        )

    def building(self) -> bool:
        """True once the re-embed's mark is in Redis (its pages are being queued)."""
        client = redis.Redis.from_url(self.redis_url)
        try:
            return bool(client.exists(f"{self.prefix}:reembed"))
        finally:
            client.close()


def store_view(stack: Stack) -> Mapping[str, Any]:
    """The live generation and its pages, read straight from the store (not through a service)."""
    import asyncio

    from ragbot.definition import parse_definition
    from ragbot.messaging.reembed import all_pages
    from ragbot.settings import StoreSettings
    from ragbot.stores.generations import LEGACY, build_generations, open_generation

    settings = StoreSettings(
        backend=stack.backend,
        embedded_path=stack.tmp / "ragbot.sqlite3",
        es_url=stack.es_url or "http://127.0.0.1:9",
        es_index_prefix=stack.prefix,
    )

    async def read() -> dict[str, Any]:
        gens = build_generations(settings)
        try:
            live = await gens.live()
            opened = open_generation(
                settings=settings,
                generation=live,
                configured=parse_definition(NEW_DEFINITION),
                configured_dimensions={},
            )
            pages = {p.page_id: p.revision_id for p in await all_pages(opened.store)}
            per_model = {}
            for page_id in pages:
                state = await opened.store.page_state(page_id=page_id)
                per_model[page_id] = state.paragraphs_per_model if state else {}
            await opened.store.close()
            legacy = await gens.get(generation_id=LEGACY)
            return {"live": live, "pages": pages, "per_model": per_model, "legacy_left": legacy is not None}
        finally:
            await gens.close()

    return asyncio.run(read())


def run(
    *,
    backend: str,
    redis_url: str,
    es_url: str,
    tmp: Path,
    pages: int,
    max_pings: int = 4,
    ping_pause_s: float = 1.0,
    query_pause_s: float = 0.1,
    timeout_s: float = 300.0,
    page_chars: int | None = None,
) -> Figures:
    """The whole scenario (pages cut to ``page_chars`` characters when given); the stack is always torn
    down."""
    figures = Figures(pages=pages)
    stack = Stack(backend=backend, redis_url=redis_url, es_url=es_url, tmp=tmp)
    # Every page may come back: an answer without the page means the page was not searchable in
    # the generation queried (ranking among pages is the retrieval benches' subject, not this one's).
    stack.answer_pages = min(pages, 100)
    records = make_pages(pages, max_chars=page_chars)
    for page in records:
        stack.wiki.put(page)
    try:
        stack.start()
        jobs = [stack.ping(int(p["page_id"])) for p in records]
        failed = [r for r in stack.wait_jobs(jobs) if r["state"] != "done"]
        if failed:
            raise AssertionError(f"initial indexing failed: {failed[:3]}\n{stack.logs()}")
        revisions = {int(p["page_id"]): 1 for p in records}
        deleted: set[int] = set()
        stop = threading.Event()
        lock = threading.Lock()

        def query() -> None:
            n = 0
            while not stop.is_set():
                time.sleep(query_pause_s)
                with lock:
                    live_pages = [p for p in revisions if p not in deleted]
                page_id = live_pages[n % len(live_pages)]
                n += 1
                answered, came_back = stack.found(page_id)
                with lock:
                    if page_id in deleted:  # deleted while the query ran
                        continue
                    figures.queries += 1
                    if not answered:
                        figures.failed_queries += 1
                    elif not came_back:
                        figures.empty_results += 1
                        figures.errors.append(f"page {page_id} missing from its query's answer")

        ping_jobs: list[str] = []

        building = threading.Event()

        def edit() -> None:
            building.wait()  # edits while the new generation is being built (the case that matters)
            n = 0
            while not stop.is_set() and n < max_pings:
                page_id = FIRST_PAGE + (n * 7) % pages
                n += 1
                if n == 3:  # one page leaves the wiki during the build: it must leave both generations
                    victim = FIRST_PAGE + pages - 1
                    with lock:
                        deleted.add(victim)
                    stack.wiki.remove(victim)
                    ping_jobs.append(stack.ping(victim))
                    continue
                if page_id in deleted:
                    continue
                with lock:
                    revisions[page_id] += 1
                page = {**records[page_id - FIRST_PAGE], "revision_id": revisions[page_id]}
                page["content"] = f"{page['content']}\n\nעריכה {revisions[page_id]}."
                stack.wiki.put(page)
                ping_jobs.append(stack.ping(page_id))
                figures.pings += 1
                time.sleep(ping_pause_s)

        threads = [threading.Thread(target=query, daemon=True), threading.Thread(target=edit, daemon=True)]
        for t in threads:
            t.start()
        started = time.monotonic()
        reembed = stack.start_reembed(timeout_s=timeout_s)
        holds_within(lambda: reembed.poll() is not None or stack.building(), timeout_s=timeout_s, every_s=0.1)
        building.set()
        out, _ = reembed.communicate(timeout=timeout_s + 60)
        figures.reembed_s = round(time.monotonic() - started, 2)
        figures.reembed_exit = reembed.returncode
        figures.reembed_output = out[-3000:]
        # Queries go on across the retriever's move to the new generation: a few more after the switch.
        with lock:
            queries_at_switch = figures.queries
        holds_within(lambda: figures.queries >= queries_at_switch + 3, timeout_s=60)
        stop.set()
        for t in threads:
            t.join(timeout=60)
        stack.wait_jobs(ping_jobs)
        view = store_view(stack)
        figures.switched_to = view["live"].generation_id
        for page_id, revision in revisions.items():
            held = view["pages"].get(page_id)
            if page_id in deleted:
                if held is not None:
                    figures.deleted_still_there.append(page_id)
            elif held is None or held < revision or view["per_model"].get(page_id, {}).get(MODEL, 0) == 0:
                figures.lost_pages.append(page_id)
        figures.old_dropped = holds_within(
            lambda: not store_view(stack)["legacy_left"], timeout_s=DROP_AFTER_S + 20, every_s=0.5
        )
        if figures.reembed_exit != 0:
            figures.errors.append(stack.logs())
        return figures
    finally:
        codes = stack.stop()
        if any(code not in (0, -15, None) for code in codes.values()):
            figures.errors.append(f"a service did not stop cleanly: {codes}")
