"""``make run``: Redis if needed, the services as local processes, the sample pages indexed by pinging.

Starts Redis through ``python -m ragbot.dev.services up`` on 6379 unless ``RAGBOT_REDIS_URL`` is set,
then ingest, the embedder worker, the retriever and (when present) chat with the embedded store at
``var/ragbot.sqlite3``; waits for each health endpoint; serves ``samples/kolzchut/pages.jsonl`` from a
local wiki on 127.0.0.1:8090 that answers like the content API; pings ingest for every sample page
(the real ping path); waits until every job has ended; prints the URLs and an example query. Ctrl-C
or SIGTERM stops everything it started. Logs go to ``var/log/``.

With ``--mediawiki`` (``make run-wiki``) the pages come from a real wiki instead: the throwaway MediaWiki
of ``scripts/services.sh`` (Debian's package on PHP's built-in server, 127.0.0.1:8480) with the sample
pages imported as wikitext through its Action API; the worker polls it on Celery beat
(``RAGBOT_MEDIAWIKI_*``, ``RAGBOT_WORKER_BEAT``) and the run waits until the retriever serves every
imported page. Its store is ``var/wiki/``; edits made in the wiki are retrievable one poll later.

A second stack beside a running one: its own ``--var-dir`` and ``--wiki-port``, the services' ports moved
with ``RAGBOT_INGEST_PORT``, ``RAGBOT_WORKER_METRICS_PORT``, ``RAGBOT_RETRIEVER_PORT`` and
``RAGBOT_CHAT_PORT`` (chat follows the retriever's port), and its own Redis database and queue
(``RAGBOT_REDIS_URL=redis://127.0.0.1:6390/7``, ``RAGBOT_WORKER_QUEUE``) so the workers do not share jobs.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType

import httpx
import redis

from ragbot.dev.mediawiki import LocalMediaWiki, sample_wikitext
from ragbot.dev.servers import (
    EMBEDDED_LLM_MODE,
    TUNED_SCRIPTS,
    LocalWiki,
    ServiceProcess,
    load_pages,
    local_service,
)
from ragbot.messaging.wiki_poll import cursor_key
from ragbot.settings import (
    get_chat_settings,
    get_client_settings,
    get_ingest_settings,
    get_redis_settings,
    get_retriever_settings,
    get_worker_settings,
)

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_REDIS_PORT = 6379
DEFAULT_MEDIAWIKI_PORT = 8480
MEDIAWIKI_POLL_INTERVAL_S = "5"
SAMPLES = ROOT / "samples" / "kolzchut" / "pages.jsonl"
# e5's query side tuned on Kol-Zchut's questions (`ragbot tune-queries`): the sample wiki's English
# questions search with it, as the check before the fifteenth question set decided (docs/benchmarks.md),
# and its Hebrew ones too (TUNED_SCRIPTS) since the check on the thirty-fifth and thirty-sixth.
TUNED_QUERIES = ROOT / "samples" / "kolzchut" / "e5-queries.npz"
# Kol-Zchut's answered questions (`ragbot remember-questions`) vote for pages, as the check on the
# twenty-second to twenty-fourth question sets decided, refitted on 58 read sets, with their unanswered
# questions, after the check on the fifty-ninth and sixtieth (docs/benchmarks.md).
QUESTION_MEMORY = ROOT / "samples" / "kolzchut" / "question-memory.npz"
START_TIMEOUT_S = 300.0
INDEX_TIMEOUT_S = 600.0


class Stop(Exception):
    """Raised by the signal handlers to unwind and stop every child."""


def say(message: str = "") -> None:
    """Write a line for the person at the terminal."""
    sys.stdout.write(message + "\n")
    sys.stdout.flush()


def _on_signal(signum: int, _frame: FrameType | None) -> None:
    raise Stop(signal.Signals(signum).name)


def _services(action: str, owner: str, *, services: str = "redis", **knobs: str) -> int:
    """Run ``python -m ragbot.dev.services <action>`` for ``services`` (our Redis by default), tagged
    with our owner."""
    env = {
        **os.environ,
        "RAGBOT_SERVICES": services,
        "REDIS_PORT": str(DEFAULT_REDIS_PORT),
        "RAGBOT_SERVICES_OWNER": owner,
        **knobs,
    }
    return subprocess.run(
        [sys.executable, "-m", "ragbot.dev.services", action], env=env, check=False
    ).returncode


def ensure_redis(owner: str) -> tuple[str, bool]:
    """The Redis URL to use, and whether this run started Redis (and so must stop it)."""
    url = os.environ.get("RAGBOT_REDIS_URL")
    if url:
        say(f"redis: using RAGBOT_REDIS_URL={url}")
        return url, False
    if _services("up", owner) != 0:
        raise SystemExit("could not start Redis (see the message above), or set RAGBOT_REDIS_URL")
    return f"redis://127.0.0.1:{DEFAULT_REDIS_PORT}/0", True


def stop_redis(owner: str) -> None:
    """Stop the Redis this run started (``down`` only stops what carries our owner tag)."""
    _services("down", owner)


def start_mediawiki(owner: str, wiki: LocalMediaWiki) -> None:
    """Start the throwaway MediaWiki of ragbot.dev.services (a fresh install unless one answers)."""
    if _services("up", owner, services="mediawiki", **wiki.knobs()) != 0:
        raise SystemExit("could not start MediaWiki (see the message above)")


def stop_mediawiki(owner: str, wiki: LocalMediaWiki) -> None:
    """Stop the wiki this run started (``down`` only stops what carries our owner tag)."""
    _services("down", owner, services="mediawiki", **wiki.knobs())


def service_env(redis_url: str, var: Path, wiki_host: str) -> dict[str, str]:
    """The children's environment: ours plus the local defaults of `make run`."""
    env = dict(os.environ)
    # Chat talks to the retriever this run starts, whatever port RAGBOT_RETRIEVER_PORT moved it to.
    env.setdefault("RAGBOT_CHAT_RETRIEVER_URL", f"http://127.0.0.1:{get_retriever_settings().port}")
    # ...and its web UI's documents page talks to this run's ingest.
    env.setdefault("RAGBOT_CHAT_INGEST_URL", f"http://127.0.0.1:{get_ingest_settings().port}")
    chat = get_chat_settings()
    if chat.llm_backend == "llamacpp":
        # The embedded 135M model's answers do not read well (docs/benchmarks.md, "Answers"): quote
        # the sources instead, unless a mode is configured (environment or .env); the UI and the API
        # still offer every mode.
        for name in ("default_mode", "kolzchut_mode"):
            if name not in chat.model_fields_set:
                env[f"RAGBOT_CHAT_{name.upper()}"] = EMBEDDED_LLM_MODE
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TRANSFORMERS_OFFLINE", "1")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    # the sample wiki's retriever choices; one set (an empty value turns a file off) in the environment
    # or .env is left alone
    retriever = get_retriever_settings()
    samples = {
        "query_tuning_path": str(TUNED_QUERIES),
        "query_tuning_scripts": json.dumps(list(TUNED_SCRIPTS)),
        "question_memory_path": str(QUESTION_MEMORY),
    }
    for name, value in samples.items():
        if name not in retriever.model_fields_set:
            env[f"RAGBOT_RETRIEVER_{name.upper()}"] = value
    env["RAGBOT_REDIS_URL"] = redis_url
    env["RAGBOT_STORE_BACKEND"] = "embedded"
    env["RAGBOT_STORE_EMBEDDED_PATH"] = str(var / "ragbot.sqlite3")
    env["RAGBOT_PROMETHEUS_MULTIPROC_DIR"] = str(var / "metrics" / "embedder")
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    allowed = json.loads(env.get("RAGBOT_INGEST_ALLOWED_CALLBACK_HOSTS", "[]") or "[]")
    if wiki_host not in allowed and "*" not in allowed:
        # The sample wiki's host and port: an entry without a port allows only 80 (ragbot.sources.ssrf).
        env["RAGBOT_INGEST_ALLOWED_CALLBACK_HOSTS"] = json.dumps([*allowed, wiki_host])
    return env


def build_services(env: dict[str, str], logs: Path) -> list[ServiceProcess]:
    """Ingest, worker, retriever and chat (when its package has an entry point)."""
    ingest, worker, retriever = get_ingest_settings(), get_worker_settings(), get_retriever_settings()
    services = [
        local_service("ingest", module="ragbot_ingest", port=ingest.port, env=env, log_dir=logs, cwd=ROOT),
        local_service(
            "embedder",
            module="ragbot_embedder",
            port=worker.metrics_port,
            env=env,
            log_dir=logs,
            cwd=ROOT,
            health="readyz",
        ),
        local_service(
            "retriever", module="ragbot_retriever", port=retriever.port, env=env, log_dir=logs, cwd=ROOT
        ),
    ]
    if importlib.util.find_spec("ragbot_chat.__main__") is not None:
        chat = get_chat_settings()
        services.append(
            local_service("chat", module="ragbot_chat", port=chat.port, env=env, log_dir=logs, cwd=ROOT)
        )
    return services


class Refused(Exception):
    """Ingest refused the sample pings (keys are configured and the credential is missing or wrong)."""


def index_samples(*, ingest_url: str, wiki: LocalWiki, pages: list[dict[str, object]]) -> dict[str, int]:
    """Ping ingest for every sample page and wait until every job has ended; returns states counted.

    With keys configured (RAGBOT_AUTH_KEYS), the pings and job reads carry RAGBOT_CLIENT_API_KEY (a key
    with the ingest scope); a refusal raises ``Refused`` with ingest's reason.
    """
    headers = get_client_settings().headers()
    if headers:
        say("indexing the samples with the key in RAGBOT_CLIENT_API_KEY")
    job_ids: list[str] = []
    with httpx.Client(base_url=ingest_url, timeout=30.0, headers=headers) as client:
        for page in pages:
            response = client.post("/v1/pages/changed", json=wiki.ping(int(str(page["page_id"]))))
            if response.status_code in (401, 403):
                raise Refused(f"ingest answered {response.status_code}: {response.json().get('detail')}")
            response.raise_for_status()
            job_ids.append(response.json()["job_id"])
        say(f"pinged ingest for {len(job_ids)} sample pages; waiting for the embedder")
        deadline = time.monotonic() + INDEX_TIMEOUT_S
        states: dict[str, str] = {}
        while time.monotonic() < deadline:
            for job_id in job_ids:
                if states.get(job_id) in ("done", "skipped", "failed"):
                    continue
                record = client.get(f"/v1/jobs/{job_id}").json()
                states[job_id] = record["state"]
                if record["state"] == "failed":
                    say(f"  job {job_id} (page {record['page_id']}) failed: {record['error']}")
            if all(s in ("done", "skipped", "failed") for s in states.values()) and len(states) == len(
                job_ids
            ):
                break
            time.sleep(0.5)
        else:
            raise SystemExit(f"indexing did not finish in {INDEX_TIMEOUT_S:.0f} s; see var/log/embedder.log")
    counts: dict[str, int] = {}
    for state in states.values():
        counts[state] = counts.get(state, 0) + 1
    return counts


def import_samples(wiki: LocalMediaWiki, pages: list[dict[str, object]]) -> dict[int, int]:
    """Write every sample page into the wiki as wikitext; {page id: revision id} as the wiki answered."""
    writer = wiki.writer()
    try:
        revisions: dict[int, int] = {}
        for page in pages:
            edit = writer.edit(title=str(page["title"]), text=sample_wikitext(page))
            revisions[int(edit["pageid"])] = int(edit["newrevid"])
        return revisions
    finally:
        writer.close()


def mediawiki_env(env: dict[str, str], wiki: LocalMediaWiki) -> dict[str, str]:
    """The worker polls the wiki on Celery beat (an interval set in the environment or .env wins)."""
    env = dict(env)
    env["RAGBOT_MEDIAWIKI_API_URL"] = wiki.api_url
    env.setdefault("RAGBOT_MEDIAWIKI_POLL_INTERVAL_S", MEDIAWIKI_POLL_INTERVAL_S)
    env["RAGBOT_WORKER_BEAT"] = "true"
    return env


def forget_old_index(*, redis_url: str, var: Path, api_url: str) -> None:
    """A freshly installed wiki numbers its pages and changes from 1 again: drop the poll cursor and
    the store an earlier wiki left, so the first poll is a full sync into an empty store."""
    client = redis.Redis.from_url(redis_url)
    try:
        client.delete(f"{get_redis_settings().key_prefix}:{cursor_key(api_url)}")
    finally:
        client.close()
    for path in var.glob("ragbot*"):
        if path.is_file():
            path.unlink()


def wait_polled(*, retriever_url: str, revisions: dict[int, int], services: list[ServiceProcess]) -> int:
    """Wait until the retriever serves every imported page at its revision; how many it serves."""
    waiting = dict(revisions)
    deadline = time.monotonic() + INDEX_TIMEOUT_S
    with httpx.Client(base_url=retriever_url, timeout=30.0) as client:
        while waiting and time.monotonic() < deadline:
            for proc in services:
                if not proc.alive():
                    raise RuntimeError(f"{proc.name} exited while the pages were indexed:\n{proc.log_tail()}")
            for page_id, revision in list(waiting.items()):
                response = client.get(f"/v1/pages/{page_id}")
                documents = response.json().get("documents", []) if response.status_code == 200 else []
                if documents and int(documents[0].get("revision_id") or 0) >= revision:
                    del waiting[page_id]
            time.sleep(1.0)  # a handful of requests a second stays far below the retriever's rate limit
    if waiting:
        raise SystemExit(
            f"pages {sorted(waiting)} were not indexed in {INDEX_TIMEOUT_S:.0f} s; see the embedder's log"
        )
    return len(revisions)


def wait_forever(services: list[ServiceProcess]) -> None:
    """Block until a signal arrives; leave if a service dies."""
    while True:
        for proc in services:
            if not proc.alive():
                raise SystemExit(f"{proc.name} stopped unexpectedly:\n{proc.log_tail()}")
        time.sleep(1.0)


def print_urls(services: list[ServiceProcess], wiki_lines: list[str], retriever_port: int) -> None:
    """The URLs and an example query."""
    say()
    say("ragbot is running:")
    for proc in services:
        say(f"  {proc.name:<10} {proc.health_url.rsplit('/', 1)[0]}   (log: {proc.log_path})")
    for line in wiki_lines:
        say(f"  {line}")
    chat = next((p for p in services if p.name == "chat"), None)
    if chat is not None:
        base = chat.health_url.rsplit("/", 1)[0]
        say()
        say(f"Web UI: {base}/  (chat)   {base}/documents   {base}/admin")
    say()
    say("Try a search:")
    query = json.dumps(
        {"query": "פטור ממס הכנסה לעיוורים", "paragraphs_per_page": [3, 2, 1]}, ensure_ascii=False
    )
    say(
        f"  curl -s -X POST http://127.0.0.1:{retriever_port}/v1/retrieve "
        f"-H 'Content-Type: application/json' -d '{query}'"
    )
    say()
    say("Press Ctrl-C to stop everything.")


def main() -> int:
    """Run the local stack until interrupted."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--wiki-port", type=int, default=8090, help="port of the local sample wiki")
    parser.add_argument("--no-index", action="store_true", help="start the services but ping nothing")
    parser.add_argument(
        "--mediawiki",
        action="store_true",
        help="follow a real local MediaWiki instead (make run-wiki): start it, import the sample pages, "
        "index them by polling",
    )
    parser.add_argument(
        "--mediawiki-port", type=int, default=DEFAULT_MEDIAWIKI_PORT, help="port of the local MediaWiki"
    )
    parser.add_argument(
        "--var-dir",
        type=Path,
        default=None,
        help="where the store, logs and metrics go (default var/, with --mediawiki var/wiki/; a second "
        "stack needs its own)",
    )
    args = parser.parse_args()

    signal.signal(signal.SIGINT, _on_signal)
    signal.signal(signal.SIGTERM, _on_signal)
    owner = f"make-run-{os.getpid()}"
    var = (args.var_dir or ROOT / ("var/wiki" if args.mediawiki else "var")).resolve()
    var.mkdir(parents=True, exist_ok=True)
    services: list[ServiceProcess] = []
    wiki: LocalWiki | None = None
    mediawiki: LocalMediaWiki | None = None
    started_redis = started_mediawiki = False
    try:
        redis_url, started_redis = ensure_redis(owner)
        env = service_env(redis_url, var, f"127.0.0.1:{args.wiki_port}")
        pages = load_pages(SAMPLES)
        revisions: dict[int, int] = {}
        if args.mediawiki:
            mediawiki = LocalMediaWiki.from_environ(os.environ, port=args.mediawiki_port)
            fresh = not mediawiki.answers()
            start_mediawiki(owner, mediawiki)
            started_mediawiki = fresh
            if fresh:
                forget_old_index(redis_url=redis_url, var=var, api_url=mediawiki.api_url)
            env = mediawiki_env(env, mediawiki)
            if not args.no_index:
                revisions = import_samples(mediawiki, pages)
                say(f"imported {len(revisions)} sample pages into the wiki at {mediawiki.base_url}")
        services = build_services(env, var / "log")
        for proc in services:
            proc.log_path.unlink(missing_ok=True)  # one run per log file
        for proc in services:
            say(f"starting {proc.name} (python -m {proc.module})")
            proc.start()
        for proc in services:
            proc.wait_healthy(timeout_s=START_TIMEOUT_S)
            say(f"{proc.name} is up: {proc.health_url}")
        retriever_port = get_retriever_settings().port
        if mediawiki is not None:
            interval = env["RAGBOT_MEDIAWIKI_POLL_INTERVAL_S"]
            if revisions:
                say(f"waiting for the worker's poll to index them (every {interval} s)")
                served = wait_polled(
                    retriever_url=f"http://127.0.0.1:{retriever_port}", revisions=revisions, services=services
                )
                say(f"sample pages: {served} indexed by polling the wiki")
            wiki_lines = [
                f"{'wiki':<10} {mediawiki.base_url}/index.php   (MediaWiki: log in as "
                f"{mediawiki.admin_user} / {mediawiki.admin_password}; edits are polled every {interval} s)"
            ]
        else:
            wiki = LocalWiki(pages, host="127.0.0.1", port=args.wiki_port).start()
            if not args.no_index:
                try:
                    counts = index_samples(
                        ingest_url=services[0].health_url.rsplit("/", 1)[0], wiki=wiki, pages=pages
                    )
                    say("sample pages: " + ", ".join(f"{n} {state}" for state, n in sorted(counts.items())))
                except Refused as refused:  # the stack stays up; only the samples are not indexed
                    say(
                        f"sample pages not indexed: {refused}. Keys are configured (RAGBOT_AUTH_KEYS): set "
                        "RAGBOT_CLIENT_API_KEY to a key with the ingest scope, or run with --no-index"
                    )
            wiki_lines = [f"{'wiki':<10} {wiki.base_url}   (sample pages, content API shape)"]
        print_urls(services, wiki_lines, retriever_port)
        wait_forever(services)
    except Stop as stop:
        say(f"\n{stop}: stopping")
    except RuntimeError as exc:  # a service did not come up (its log tail is in the message), or the wiki
        say(str(exc))
        return 1
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        for proc in reversed(services):
            code = proc.stop()
            say(f"stopped {proc.name} (exit {code})")
        if wiki is not None:
            wiki.stop()
        if mediawiki is not None and started_mediawiki:
            stop_mediawiki(owner, mediawiki)
        if started_redis:
            stop_redis(owner)
    return 0


if __name__ == "__main__":
    sys.exit(main())
