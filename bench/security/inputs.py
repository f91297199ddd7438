"""Hostile inputs against ingest, the retriever and chat: how many were tried, and how many got a 5xx.

The catalogue is ``tests/support/hostile.py`` (SSRF callback URLs, bad JSON on every service, over-long
and out-of-range fields, NUL and bidi overrides, hostile uploads); the apps run in process over the test
fakes, with chat's sessions in a real Redis (``RAGBOT_TEST_REDIS_URL``, set by ``make bench``, else
``RAGBOT_REDIS_URL``, else ``redis://127.0.0.1:6379/0``). Also counted: answers whose status was not
the one the catalogue expects (``bad_inputs_unexpected``). Prints the figures as JSON.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from support.hostile import catalogue, hostile_apps  # noqa: E402


def redis_url() -> str:
    """Where chat keeps its sessions for the run."""
    return (
        os.environ.get("RAGBOT_TEST_REDIS_URL")
        or os.environ.get("RAGBOT_REDIS_URL")
        or "redis://127.0.0.1:6379/0"
    )


def measure() -> dict[str, int]:
    """Send every catalogued bad input once; count them, the 5xx answers and the unexpected statuses."""
    cases = catalogue()
    server_errors = unexpected = 0
    with hostile_apps(redis_url=redis_url()) as apps:
        for case in cases:
            status = apps.send(case).status_code
            server_errors += status >= 500
            unexpected += status != case.expect
    return {
        "bad_inputs_tried": len(cases),
        "bad_inputs_5xx": server_errors,
        "bad_inputs_unexpected": unexpected,
    }


if __name__ == "__main__":
    json.dump(measure(), sys.stdout, indent=2)
    sys.stdout.write("\n")
