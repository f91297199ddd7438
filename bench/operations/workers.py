"""Issue 16's worker figures: the same pages indexed by one embedder worker process, then by two at once.

``measure()`` starts ``support.worker_stack`` twice (ingest plus one, then two real
``python -m ragbot_embedder`` processes on one Celery queue, the real Redis and Elasticsearch, a fresh
key and index prefix each time), pings every page once after the workers are ready, and times the pings
until the last job ends; the operations report merges the figures into ``operations.json``.

- ``two_workers_duplicates`` (target 0): with two workers, jobs finished more than once (the workers'
  logs), paragraphs stored twice for a page, and documents sharing an id, together;
- ``two_workers_lost`` (target 0): pinged pages the store does not hold after the two-worker run;
- ``two_workers_speedup`` (reported): one worker's wall time divided by two workers' on the same pages.
  On a 2-core machine shared with other work, two CPU-bound workers compete for the same cores, so
  expect well under 2.

Run: ``uv run python -m bench.operations.workers [--pages N]`` (prints the JSON).
"""

from __future__ import annotations

import argparse
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

from support.worker_stack import Audit, synthetic_pages, worker_stack  # noqa: E402

PAGES = 10
REDIS_URL = os.environ.get("RAGBOT_TEST_REDIS_URL", "redis://127.0.0.1:6390/0")
ES_URL = os.environ.get("RAGBOT_TEST_ES_URL", "http://127.0.0.1:9250").rstrip("/")


def run(*, workers: int, pages: int, tmp: Path) -> tuple[float, Audit, int]:
    """Wall seconds from the first ping to the last job's end, the audit, and jobs that did not end done."""
    corpus = synthetic_pages(pages)
    with worker_stack(redis_url=REDIS_URL, es_url=ES_URL, workers=workers, pages=corpus, tmp=tmp) as stack:
        began = time.perf_counter()
        stack.ping_all([int(p["page_id"]) for p in corpus])
        records = stack.wait_all(timeout_s=900)
        wall = time.perf_counter() - began
        return wall, stack.audit(), sum(r["state"] != "done" for r in records.values())


def measure(pages: int = PAGES) -> dict[str, int | float]:
    """One run with one worker, one with two; the figures (and what explains them) as a flat dict."""
    with tempfile.TemporaryDirectory(prefix="ragbot-workers-") as tmp:
        one_s, one, one_not_done = run(workers=1, pages=pages, tmp=Path(tmp) / "one")
        two_s, two, two_not_done = run(workers=2, pages=pages, tmp=Path(tmp) / "two")
    shares = sorted(two.jobs_per_worker.values())
    return {
        "two_workers_duplicates": two.duplicates,
        "two_workers_lost": len(two.pages_lost),
        "two_workers_speedup": round(one_s / two_s, 2),
        "two_workers_pages": pages,
        "two_workers_paragraphs": two.documents,
        "two_workers_wall_s": round(two_s, 1),
        "two_workers_smaller_share": shares[0] if shares else 0,
        "two_workers_jobs_not_done": two_not_done,
        "one_worker_wall_s": round(one_s, 1),
        "one_worker_duplicates": one.duplicates,
        "one_worker_jobs_not_done": one_not_done,
        "workers_cpus": os.cpu_count() or 0,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=PAGES)
    sys.stdout.write(json.dumps(measure(parser.parse_args().pages), indent=2) + "\n")
