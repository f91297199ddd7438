"""The services the browser tests drive: ingest, the embedder worker, the retriever and chat as
``python -m`` children over an embedded store that starts with the sample pages (multilingual-e5-small),
real Redis under a uuid key prefix and Celery queue, the embedded llama.cpp LLM (SmolLM2-135M, a few
tokens per answer), and a fake wiki that fails one page on purpose."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from support.chat_corpus import write_definition
from support.chat_stack import sample_store
from support.fake_wiki import FakeWiki, load_pages
from support.processes import (
    ServiceProcess,
    delete_redis_prefix,
    free_port,
    local_service,
    stack_env,
)

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / "test-artifacts" / "screenshots"
CHROMIUM = os.environ.get("RAGBOT_TEST_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("RAGBOT_TEST_CHROMEDRIVER", "/usr/bin/chromedriver")
WINDOW = (1280, 900)
START_TIMEOUT_S = 240.0
FAILING_PAGE_ID = 990001


@dataclass
class UiStack:
    """The running services, the fake wiki and where to reach them."""

    chat_url: str
    ingest: httpx.Client
    wiki: FakeWiki
    processes: list[ServiceProcess]

    def logs(self) -> str:
        """The tail of every service log, for failure messages."""
        return "\n".join(f"--- {p.name} ---\n{p.log_tail(25)}" for p in self.processes)


@contextmanager
def running_ui_stack(*, redis_url: str, tmp: Path) -> Iterator[UiStack]:
    """Start the four services over a copy of the sample store; stop them and clean Redis after."""
    store = tmp / "store.sqlite3"
    shutil.copyfile(sample_store(), store)
    definition = write_definition(tmp / "definition.json")
    run_id = uuid.uuid4().hex[:10]
    prefix = f"test-ui-{run_id}"
    ports = {name: free_port() for name in ("ingest", "worker", "retriever", "chat")}
    env = stack_env(
        definition=definition,
        redis_url=redis_url,
        prefix=prefix,
        tmp=tmp,
        ports=ports,
        overrides={
            "RAGBOT_STORE_EMBEDDED_PATH": str(store),
            "RAGBOT_INGEST_FETCH_TIMEOUT_S": "5",
            "RAGBOT_WORKER_MAX_RETRIES": "1",
            "RAGBOT_WORKER_RETRY_BACKOFF_S": "0.05",
            "RAGBOT_WORKER_RETRY_BACKOFF_MAX_S": "0.2",
            "RAGBOT_WORKER_PARAGRAPH_TOKENS": "256",
            "RAGBOT_CHAT_RETRIEVER_URL": f"http://127.0.0.1:{ports['retriever']}",
            "RAGBOT_CHAT_INGEST_URL": f"http://127.0.0.1:{ports['ingest']}",
            "RAGBOT_CHAT_LLM_BACKEND": "llamacpp",
            "RAGBOT_CHAT_LLM_MAX_TOKENS": "24",
            "RAGBOT_CHAT_CONTEXT_MAX_CHARS": "300",
            "RAGBOT_CHAT_PARAGRAPHS_PER_PAGE": "[2, 1]",
            "RAGBOT_CHAT_LLAMACPP_PARALLEL": "2",
            "RAGBOT_CHAT_LLAMACPP_CONTEXT_TOKENS": "2048",
        },
    )
    for name in ("RAGBOT_RETRIEVER_RERANKER_PATH", "RAGBOT_CHAT_PROMPTS_DIR"):
        env.pop(name, None)
    failing = {**load_pages()[1], "page_id": FAILING_PAGE_ID}
    wiki = FakeWiki([failing]).start()
    wiki.fail(FAILING_PAGE_ID, 500)

    def service(name: str, module: str, health: str) -> ServiceProcess:
        return local_service(
            name, module=module, port=ports[name], env=env, log_dir=tmp, cwd=tmp, health=health
        )

    processes = [
        service("ingest", "ragbot_ingest", "healthz"),
        service("worker", "ragbot_embedder", "readyz"),
        service("retriever", "ragbot_retriever", "readyz"),
        service("chat", "ragbot_chat", "readyz"),
    ]
    ingest = httpx.Client(base_url=f"http://127.0.0.1:{ports['ingest']}", timeout=30.0)
    try:
        for proc in processes:
            proc.start()
        for proc in processes:
            proc.wait_healthy(timeout_s=START_TIMEOUT_S)
        yield UiStack(f"http://127.0.0.1:{ports['chat']}", ingest, wiki, processes)
    finally:
        for proc in reversed(processes):
            proc.stop()
        ingest.close()
        wiki.stop()
        delete_redis_prefix(redis_url, prefix)
