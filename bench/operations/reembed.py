"""Figures of a blue/green re-embed under load: queries and pings throughout ``ragbot reembed``.

The scenario of ``tests/e2e/test_reembed_e2e.py`` (``tests/support/reembed_scenario.py``) at a larger
size, on the embedded store (and Elasticsearch when ``RAGBOT_TEST_ES_URL`` answers): ``measure()``
returns ``reembed_failed_queries`` (queries that got no 200) and ``reembed_empty_results`` (queries
for an indexed page whose answer lacked it), both with target 0, plus the run's context. Wired into
the operations report (``bench/report.py``); run alone: ``uv run python -m bench.operations.reembed``.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from support import reembed_scenario  # noqa: E402

PAGES = 40
REDIS_URL = "redis://127.0.0.1:6390/0"


def measure(*, pages: int = PAGES, backends: tuple[str, ...] = ("embedded",)) -> dict[str, Any]:
    """Run the scenario per backend; failed queries and empty results are summed over backends."""
    redis_url = os.environ.get("RAGBOT_TEST_REDIS_URL", REDIS_URL)
    es_url = os.environ.get("RAGBOT_TEST_ES_URL", "").rstrip("/")
    out: dict[str, Any] = {"reembed_failed_queries": 0, "reembed_empty_results": 0}
    for backend in backends:
        with tempfile.TemporaryDirectory(prefix=f"reembed-{backend}-") as tmp:
            figures = reembed_scenario.run(
                backend=backend,
                redis_url=redis_url,
                es_url=es_url if backend == "elasticsearch" else "",
                tmp=Path(tmp),
                pages=pages,
                max_pings=10,
                timeout_s=600.0,
            )
        out["reembed_failed_queries"] += figures.failed_queries
        out["reembed_empty_results"] += figures.empty_results
        out[f"reembed_{backend}_queries"] = figures.queries
        out[f"reembed_{backend}_pings"] = figures.pings
        out[f"reembed_{backend}_pages"] = figures.pages
        out[f"reembed_{backend}_lost_pages"] = len(figures.lost_pages) + len(figures.deleted_still_there)
        out[f"reembed_{backend}_seconds"] = figures.reembed_s
        out[f"reembed_{backend}_switched"] = figures.reembed_exit == 0 and figures.switched_to != "legacy"
        out[f"reembed_{backend}_old_dropped"] = figures.old_dropped
    return out


if __name__ == "__main__":
    chosen = ("embedded", "elasticsearch") if os.environ.get("RAGBOT_TEST_ES_URL") else ("embedded",)
    result = measure(backends=chosen)
    target = ROOT / "bench" / "results" / "operations_reembed.json"
    target.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    sys.stdout.write(json.dumps(result, indent=2) + "\n")
