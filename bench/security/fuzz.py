"""The fuzz figures of the security benchmark: Schemathesis against ingest, the retriever and chat as real
processes, each for a fixed time budget (``BUDGET_S``, 45 s; the fuzz tests of ``make test`` spend 15 s).

``fuzz_cases`` counts the test cases Schemathesis generated and sent, over all three services;
``fuzz_5xx`` the responses with a status of 500 or more (target 0). Redis comes from
``RAGBOT_TEST_REDIS_URL`` (``make bench`` sets it), else the test Redis on 6390.

Run: ``uv run python -m bench.security.fuzz [--seconds 60]``; prints the figures as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from support.fuzz import fuzz_stack, run_schemathesis  # noqa: E402

DEFAULT_REDIS_URL = "redis://127.0.0.1:6390/0"
BUDGET_S = 45  # seconds of fuzzing per service


def measure(*, seconds: int = BUDGET_S, redis_url: str | None = None) -> dict[str, int]:
    """Fuzz every service for its budget; the cases run and the 5xx answers, added over services."""
    url = redis_url or os.environ.get("RAGBOT_TEST_REDIS_URL", DEFAULT_REDIS_URL)
    figures = {"fuzz_cases": 0, "fuzz_requests": 0, "fuzz_5xx": 0, "fuzz_failures": 0}
    with tempfile.TemporaryDirectory(prefix="ragbot-fuzz-bench-") as tmp:
        root = Path(tmp)
        with fuzz_stack(redis_url=url, root=root / "stack") as stack:
            for name, base_url in stack.urls.items():
                result = run_schemathesis(
                    service=name, base_url=base_url, report_dir=root / "reports" / name, max_time_s=seconds
                )
                figures["fuzz_cases"] += result.cases
                figures["fuzz_requests"] += result.requests
                figures["fuzz_5xx"] += result.server_errors
                figures["fuzz_failures"] += len(result.failures)
                figures[f"fuzz_cases_{name}"] = result.cases
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--seconds", type=int, default=BUDGET_S, help=f"budget per service (default {BUDGET_S})"
    )
    args = parser.parse_args()
    print(json.dumps(measure(seconds=args.seconds), indent=2))


if __name__ == "__main__":
    main()
