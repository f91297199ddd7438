"""Fault figures for issue 14: an Elasticsearch data node killed under load, and Redis restarted.

``measure()`` runs the scenarios of ``tests/e2e/test_faults.py`` (``support.fault_scenarios`` over
``support.fault_stack``: a two-node cluster with one replica, Redis with AOF, every service as a real
process) once and returns flat figures; the security report merges them into ``security.json``.

- ``es_node_loss_pages_lost`` (target 0): pages not at the wiki's last revision, or not indexed exactly
  once, after the node came back;
- ``es_node_loss_failed_queries`` (reported): retriever queries that did not answer 200 meanwhile;
- ``redis_restart_sessions_lost`` (target 0): chat sessions gone or shorter after the restart.

Run: ``uv run python -m bench.security.faults`` (prints the JSON).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from support.fault_scenarios import es_node_loss, redis_restart  # noqa: E402
from support.fault_stack import fault_stack  # noqa: E402


def measure() -> dict[str, int | float]:
    """One run of both faults; the figures (and what explains them) as a flat dict."""
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ragbot-faults-") as tmp, fault_stack(Path(tmp)) as stack:
        loss = es_node_loss(stack)
        restart = redis_restart(stack)
    return {
        "es_node_loss_pages_lost": loss.pages_lost,
        "es_node_loss_failed_queries": loss.failed_queries,
        "es_node_loss_queries": loss.queries,
        "es_node_loss_queries_answered_while_down": loss.answered_while_down,
        "es_node_loss_pages": loss.pages,
        "es_node_loss_jobs_not_done": loss.jobs_not_done,
        "es_node_loss_primaries_on_killed_node": loss.primaries_on_killed_node,
        "es_node_loss_down_s": round(loss.down_s, 1),
        "redis_restart_sessions_lost": restart.sessions_lost,
        "redis_restart_sessions": restart.sessions,
        "redis_restart_reindex_done": int(restart.reindex.get("state") == "done"),
        "redis_restart_reindex_pages_stale": restart.reindex_pages_stale,
        "redis_restart_unreachable_s": round(restart.unreachable_s, 2),
        "faults_wall_s": round(time.monotonic() - began, 1),
    }


if __name__ == "__main__":
    sys.stdout.write(json.dumps(measure(), indent=2) + "\n")
