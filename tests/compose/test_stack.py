"""The shipped compose.yaml, booted: pings, uploads, chat, Prometheus, a crashed worker and a restart.

Runs in file order against the stack scripts/compose_stack.py started (``make test-compose``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from typing import Any

import httpx
import pytest
from support.compose_stack import URLS, ComposeStack, wait_for
from support.fake_wiki import FakeWiki

pytestmark = pytest.mark.timeout(1200)

FINAL = {"done", "skipped", "failed"}
BLIND_EXEMPTION = 100035


def retrieved_pages(stack: ComposeStack, query: str, **extra: Any) -> set[int]:
    """The page ids the retriever returns for a query."""
    response = httpx.post(
        f"{URLS['retriever']}/v1/retrieve",
        json={"query": query, "paragraphs_per_page": [3, 3, 3, 3, 3], **extra},
        headers=stack.key("SERVICE_API_KEY"),
        timeout=60,
    )
    response.raise_for_status()
    return {int(d["page_id"]) for d in response.json()["documents"]}


def job_state(stack: ComposeStack, job_id: str) -> str:
    response = httpx.get(f"{URLS['ingest']}/v1/jobs/{job_id}", headers=stack.key("ADMIN_API_KEY"), timeout=30)
    response.raise_for_status()
    return str(response.json()["state"])


def wait_done(stack: ComposeStack, job_ids: list[str], *, timeout: float = 600) -> None:
    """Every job finished (a failed job fails the test at once, with every state)."""

    def finished() -> bool | None:
        states = {job: job_state(stack, job) for job in job_ids}
        if "failed" in states.values():
            pytest.fail(f"a job failed: {states}", pytrace=False)
        # skipped: that revision was already indexed (a rerun against a kept stack)
        return True if set(states.values()) <= {"done", "skipped"} else None

    wait_for(f"{len(job_ids)} jobs to be done", finished, timeout=timeout)


def test_a_wiki_ping_becomes_retrievable(stack: ComposeStack, wiki: FakeWiki) -> None:
    started = time.monotonic()
    pinged = []
    for page_id in sorted(wiki.pages):
        response = httpx.post(
            f"{URLS['ingest']}/v1/pages/changed",
            json=wiki.ping(page_id),
            headers=stack.key("WIKI_API_KEY"),
            timeout=30,
        )
        assert response.status_code == 202, response.text
        pinged.append(response.json()["job_id"])
    wait_done(stack, pinged)
    found = wait_for(
        "the blind people's exemption page to be retrievable",
        lambda: retrieved_pages(stack, "פטור ממס הכנסה לעיוורים") & {BLIND_EXEMPTION} or None,
    )
    assert found == {BLIND_EXEMPTION}
    stack.record(smoke_ping_to_retrievable_s=round(time.monotonic() - started, 1))


def test_an_upload_becomes_retrievable(stack: ComposeStack) -> None:
    started = time.monotonic()
    body = b"# Compose smoke\n\nThe quokka census of Rottnest Island counts marsupials every spring.\n"
    response = httpx.post(
        f"{URLS['ingest']}/v1/documents",
        files={"file": ("quokka.md", body, "text/markdown")},
        headers=stack.key("ADMIN_API_KEY"),
        timeout=60,
    )
    assert response.status_code == 202, response.text
    [document] = response.json()["documents"]
    wait_done(stack, [document["job_id"]])
    wait_for(
        "the uploaded document to be retrievable",
        lambda: retrieved_pages(stack, "quokka census Rottnest") & {int(document["page_id"])} or None,
    )
    stack.record(smoke_upload_to_retrievable_s=round(time.monotonic() - started, 1))


def test_chat_streams_an_answer_with_citations(stack: ComposeStack, wiki: FakeWiki) -> None:
    headers = stack.key("KZCHATBOT_API_KEY")
    session = httpx.post(f"{URLS['chat']}/v1/sessions", json={"mode": "quote"}, headers=headers, timeout=30)
    assert session.status_code == 201, session.text
    started = time.monotonic()
    events: list[tuple[str, dict[str, Any]]] = []
    first_token_s = None
    with httpx.stream(
        "POST",
        f"{URLS['chat']}/v1/sessions/{session.json()['session_id']}/messages",
        json={"question": "מי זכאי לפטור ממס הכנסה לעיוורים?"},
        headers=headers,
        timeout=120,
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        event = ""
        for line in response.iter_lines():
            if line.startswith("event: "):
                event = line.removeprefix("event: ")
            elif line.startswith("data: "):
                events.append((event, json.loads(line.removeprefix("data: "))))
                if event == "token" and first_token_s is None:
                    first_token_s = time.monotonic() - started
    kinds = [kind for kind, _ in events]
    assert kinds[0] == "sources" and kinds[-1] == "done", kinds
    assert "token" in kinds
    done = events[-1][1]
    assert done["citations"], done
    assert {int(c["page_id"]) for c in done["citations"]} <= set(wiki.pages)
    assert first_token_s is not None
    stack.record(smoke_chat_first_token_s=round(first_token_s, 2))


def test_prometheus_scrapes_every_target_and_loads_the_rules(stack: ComposeStack) -> None:
    def all_up() -> list[dict[str, Any]] | None:
        response = httpx.get(f"{URLS['prometheus']}/api/v1/query", params={"query": "up"}, timeout=10)
        results: list[dict[str, Any]] = response.json()["data"]["result"]
        jobs = {r["metric"]["job"]: r["value"][1] for r in results}
        expected = {"prometheus", "ingest", "retriever", "chat", "embedder"}
        return results if expected <= set(jobs) and all(jobs[j] == "1" for j in expected) else None

    wait_for("every Prometheus target to be up (up == 1)", all_up, timeout=120)
    rules = httpx.get(f"{URLS['prometheus']}/api/v1/rules", timeout=10).json()["data"]["groups"]
    assert sum(len(group["rules"]) for group in rules) > 0


def _embedder_pid(stack: ComposeStack) -> tuple[str, int, int]:
    container = stack.compose("ps", "-q", "embedder").split()[0]
    out = subprocess.run(
        ["/usr/bin/docker", "inspect", "-f", "{{.State.Pid}} {{.RestartCount}}", container],
        env=stack.env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return container, int(out[0]), int(out[1])


def test_a_worker_killed_mid_job_is_restarted_and_loses_no_page(stack: ComposeStack) -> None:
    revision = int(time.time())  # new each run, so a kept stack cannot answer "already indexed"
    paragraph = "Quarterly harbour tonnage rose at the northern piers while the ferries kept schedule. " * 12
    pages = [
        {
            "page_id": 990001 + i,
            "revision_id": revision,
            "title": f"Harbour report {i}",
            "content": "\n\n".join(f"== Part {j} ==\n{paragraph} marker{i}x{j}" for j in range(8)),
        }
        for i in range(12)
    ]
    jobs = []
    for page in pages:
        response = httpx.post(
            f"{URLS['ingest']}/v1/pages", json=page, headers=stack.key("ADMIN_API_KEY"), timeout=30
        )
        assert response.status_code == 202, response.text
        jobs.append(response.json()["job_id"])
    wait_for(
        "the worker to start on the batch", lambda: True if job_state(stack, jobs[0]) != "queued" else None
    )
    assert not all(job_state(stack, job) == "done" for job in jobs), (
        "the worker finished before it was killed"
    )
    container, pid, restarts = _embedder_pid(stack)
    os.kill(pid, signal.SIGKILL)  # a crash, not `docker kill`, which counts as a manual stop
    killed = time.monotonic()
    wait_for(
        "compose to restart the killed worker",
        lambda: True if _embedder_pid(stack)[2] > restarts and _embedder_pid(stack)[0] == container else None,
    )
    wait_done(stack, jobs)
    assert {job_state(stack, job) for job in jobs} == {"done"}
    for i in range(len(pages)):
        page_id = 990001 + i
        assert page_id in retrieved_pages(stack, f"harbour tonnage marker{i}x3", filters={"page_id": page_id})
    stack.record(smoke_worker_crash_to_jobs_done_s=round(time.monotonic() - killed, 1))


def test_the_index_survives_compose_down_and_up(stack: ComposeStack) -> None:
    started = time.monotonic()
    stack.compose("down")
    stack.compose("up", "-d", "--wait", "--wait-timeout", "600")
    stack.record(smoke_down_up_s=round(time.monotonic() - started, 1))
    found = wait_for(
        "the exemption page after down and up",
        lambda: retrieved_pages(stack, "פטור ממס הכנסה לעיוורים") & {BLIND_EXEMPTION} or None,
    )
    assert found == {BLIND_EXEMPTION}
