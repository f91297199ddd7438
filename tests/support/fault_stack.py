"""Every service as a real process over infrastructure a test may break: a two-node Elasticsearch cluster
(indices with one replica, the services given both nodes' URLs) and a dedicated Redis with AOF on.

ingest, the embedder worker, the retriever and chat (embedded llama.cpp, 8-token answers) run as
``python -m`` children with MiniLM on the CPU; a local wiki answers the content API. The scenarios that
break things live in ``support.fault_scenarios``; ``tests/e2e/test_faults.py`` and
``bench/security/faults.py`` both drive them.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from support.es_cluster import EsCluster
from support.fake_wiki import FakeWiki, load_pages
from support.processes import ServiceProcess, free_port, local_service, service_env
from support.redis_server import RedisServer
from support.waits import holds_within

DEFINITION = {
    "identifier_field": "page_id",
    "saved_fields": {"title": "text", "page_id": "integer", "url": "keyword", "content": "text"},
    "field_for_llm": "content",
    "models": {"all-MiniLM-L6-v2": "content"},
}
FINAL = frozenset({"done", "skipped", "failed"})
START_TIMEOUT_S = 300.0
VISIBILITY_TIMEOUT_S = 15


@dataclass
class FaultStack:
    """The running processes, the breakable infrastructure and HTTP clients for each service."""

    cluster: EsCluster
    redis: RedisServer
    wiki: FakeWiki
    processes: dict[str, ServiceProcess]
    ingest: httpx.Client
    retriever: httpx.Client
    chat: httpx.Client
    prefix: str
    samples: list[dict[str, Any]]

    def job(self, job_id: str) -> dict[str, Any]:
        response = self.ingest.get(f"/v1/jobs/{job_id}")
        assert response.status_code == 200, response.text
        record: dict[str, Any] = response.json()
        return record

    def wait_jobs(self, job_ids: list[str], *, timeout_s: float) -> dict[str, dict[str, Any]]:
        """Bounded wait until every job is in a final state; the last records either way."""
        records: dict[str, dict[str, Any]] = {}

        def all_ended() -> bool:
            for job_id in job_ids:
                if records.get(job_id, {}).get("state") not in FINAL:
                    try:
                        records[job_id] = self.job(job_id)
                    except (AssertionError, httpx.HTTPError) as exc:  # Redis restarting: ask again
                        records[job_id] = {"state": "unknown", "error": str(exc)}
            if all(r.get("state") in FINAL for r in records.values()):
                return True
            self.assert_alive()
            return False

        holds_within(all_ended, timeout_s=timeout_s, every_s=0.25)
        return records

    def ping(self, page: dict[str, Any]) -> str:
        """Put a page's new revision in the wiki and send the wiki's ping; the job id."""
        self.wiki.put(page)
        response = self.ingest.post("/v1/pages/changed", json=self.wiki.ping(int(page["page_id"])))
        assert response.status_code == 202, response.text
        return str(response.json()["job_id"])

    def page(self, page_id: int, revision_id: int) -> dict[str, Any]:
        """A sample page under another id and revision, cut to a few paragraphs (fast to embed)."""
        sample = self.samples[page_id % len(self.samples)]
        content = f"{sample['content'][:1200]}\n\nRevision {revision_id} of page {page_id}."
        return {**sample, "page_id": page_id, "revision_id": revision_id, "content": content}

    def page_state(self, page_id: int) -> dict[str, Any] | None:
        response = self.ingest.get(f"/v1/pages/{page_id}")
        if response.status_code == 404:
            return None
        assert response.status_code == 200, response.text
        state: dict[str, Any] = response.json()
        return state

    def es_count(self, query: dict[str, Any], *, preference: str | None = None) -> int:
        params = {"preference": preference} if preference else None
        response = httpx.post(
            f"{self.cluster.master_url}/{self.prefix}_*/_count",
            json={"query": query},
            params=params,
            timeout=30,
        )
        response.raise_for_status()
        return int(response.json()["count"])

    def refresh(self) -> None:
        httpx.post(f"{self.cluster.master_url}/{self.prefix}_*/_refresh", timeout=60).raise_for_status()

    def shards(self) -> list[dict[str, str]]:
        response = httpx.get(
            f"{self.cluster.master_url}/_cat/shards/{self.prefix}_*",
            params={"format": "json", "h": "index,shard,prirep,state,node"},
            timeout=30,
        )
        rows: list[dict[str, str]] = response.json()
        return rows

    def assert_alive(self) -> None:
        for proc in self.processes.values():
            assert proc.alive(), f"{proc.name} died:\n{proc.log_tail()}"

    def logs(self) -> str:
        return "\n".join(f"--- {p.name} ---\n{p.log_tail(25)}" for p in self.processes.values())


def _env(
    *, cluster: EsCluster, redis_url: str, prefix: str, tmp: Path, ports: dict[str, int]
) -> dict[str, str]:
    definition = tmp / "definition.json"
    definition.write_text(json.dumps(DEFINITION), encoding="utf-8")
    env = service_env(
        {
            "RAGBOT_DOCUMENT_DEFINITION": str(definition),
            "RAGBOT_DEVICE": "cpu",
            "RAGBOT_REDIS_URL": redis_url,
            "RAGBOT_REDIS_KEY_PREFIX": prefix,
            "RAGBOT_STORE_BACKEND": "elasticsearch",
            "RAGBOT_STORE_ES_URL": cluster.urls,
            "RAGBOT_STORE_ES_INDEX_PREFIX": prefix,
            "RAGBOT_STORE_ES_REPLICAS": "1",
            "RAGBOT_STORE_ES_TIMEOUT_S": "5",
            "RAGBOT_INGEST_PORT": str(ports["ingest"]),
            "RAGBOT_INGEST_ALLOWED_CALLBACK_HOSTS": '["127.0.0.1:*"]',
            "RAGBOT_INGEST_REINDEX_BATCH_PAGES": "4",
            "RAGBOT_WORKER_QUEUE": prefix,
            "RAGBOT_WORKER_MAX_RETRIES": "40",
            "RAGBOT_WORKER_RETRY_BACKOFF_S": "0.5",
            "RAGBOT_WORKER_RETRY_BACKOFF_MAX_S": "2",
            "RAGBOT_WORKER_VISIBILITY_TIMEOUT_S": str(VISIBILITY_TIMEOUT_S),
            "RAGBOT_WORKER_UNACKED_RESTORE_INTERVAL_S": "1",
            "RAGBOT_WORKER_METRICS_PORT": str(ports["worker"]),
            "RAGBOT_PROMETHEUS_MULTIPROC_DIR": str(tmp / "metrics"),
            "RAGBOT_RETRIEVER_PORT": str(ports["retriever"]),
            "RAGBOT_CHAT_PORT": str(ports["chat"]),
            "RAGBOT_CHAT_RETRIEVER_URL": f"http://127.0.0.1:{ports['retriever']}",
            "RAGBOT_CHAT_LLM_BACKEND": "llamacpp",
            "RAGBOT_CHAT_LLM_MAX_TOKENS": "8",
            "RAGBOT_CHAT_CONTEXT_MAX_CHARS": "300",
            "RAGBOT_CHAT_PARAGRAPHS_PER_PAGE": "[2, 1]",
            "RAGBOT_CHAT_LLAMACPP_PARALLEL": "1",
            "RAGBOT_CHAT_LLAMACPP_CONTEXT_TOKENS": "2048",
        }
    )
    for name in ("RAGBOT_RETRIEVER_RERANKER_PATH", "RAGBOT_CHAT_PROMPTS_DIR"):
        env.pop(name, None)
    return env


@contextmanager
def fault_stack(tmp: Path) -> Iterator[FaultStack]:
    """Start the cluster, Redis and the four services (bounded waits); stop and delete all of it after."""
    prefix = f"e2e-faults-{uuid.uuid4().hex[:10]}"
    ports = {name: free_port() for name in ("ingest", "worker", "retriever", "chat")}
    with ExitStack() as cleanup:
        cluster = EsCluster()
        cleanup.callback(cluster.stop)
        launchers = cluster.launch()
        redis_server = RedisServer(tmp / "redis").start()
        cleanup.callback(redis_server.stop)
        env = _env(cluster=cluster, redis_url=redis_server.url, prefix=prefix, tmp=tmp, ports=ports)
        wiki = FakeWiki().start()
        cleanup.callback(wiki.stop)
        processes = {
            "ingest": local_service(
                "ingest", module="ragbot_ingest", port=ports["ingest"], env=env, log_dir=tmp
            ),
            "worker": ServiceProcess(
                name="worker",
                module="ragbot_embedder",
                env=env,
                health_url=f"http://127.0.0.1:{ports['worker']}/readyz",
                log_path=tmp / "worker.log",
                cwd=tmp,
            ),
            "retriever": local_service(
                "retriever", module="ragbot_retriever", port=ports["retriever"], env=env, log_dir=tmp
            ),
            "chat": local_service("chat", module="ragbot_chat", port=ports["chat"], env=env, log_dir=tmp),
        }
        # chat (no Elasticsearch of its own) loads its LLM while the nodes start; the others need them.
        for name in ("chat", "ingest", "worker", "retriever"):
            processes[name].start()
            cleanup.callback(processes[name].stop)
            if name == "chat":
                cluster.await_launch(launchers)
        for proc in processes.values():
            proc.wait_healthy(timeout_s=START_TIMEOUT_S)
        clients = {
            name: cleanup.enter_context(httpx.Client(base_url=f"http://127.0.0.1:{ports[name]}", timeout=60))
            for name in ("ingest", "retriever", "chat")
        }
        yield FaultStack(
            cluster=cluster,
            redis=redis_server,
            wiki=wiki,
            processes=processes,
            ingest=clients["ingest"],
            retriever=clients["retriever"],
            chat=clients["chat"],
            prefix=prefix,
            samples=load_pages(),
        )
