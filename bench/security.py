"""``bench/security.py``: issue 14's figures in one flat JSON, ``bench/results/security.json``.

Each part measures in its own module and returns a flat dict; this script runs them one after the
other (none measures while another loads the machine), prints each part's figures, and writes the
union (targets in ``docs/benchmarks.md``):

- ``bench/security_auth.py``: ``unauthenticated_writes_accepted`` (every write route of ingest and chat
  tried without credentials and with a wrong-scope key), ``auth_overhead_p50_ms`` (``/v1/retrieve``
  with auth on and off, side by side);
- ``bench/security_limits.py``: ``rate_limit_429_after`` (the request number a limited client is
  refused at, against real Redis);
- ``bench/security_inputs.py``: ``bad_inputs_tried``, ``bad_inputs_5xx``;
- ``bench/security_fuzz.py``: ``fuzz_cases``, ``fuzz_5xx`` (Schemathesis against the three services);
- ``bench/security_faults.py``: ``es_node_loss_pages_lost``, ``es_node_loss_failed_queries``,
  ``redis_restart_sessions_lost``.

Run: ``uv run python bench/security.py [--only auth limits ...] [--out bench/results/security.json]``
(Redis and Elasticsearch from ``RAGBOT_TEST_REDIS_URL`` / ``RAGBOT_TEST_ES_URL``, as ``make bench``
sets them).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import inspect
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PARTS = ("auth", "limits", "inputs", "fuzz", "faults")


def run_part(name: str) -> dict[str, Any]:
    """One part's figures (its module's ``measure()``, awaited when it is a coroutine function)."""
    sys.path.insert(0, str(ROOT / "bench"))
    module = importlib.import_module(f"security_{name}")
    measure = module.measure
    result = asyncio.run(measure()) if inspect.iscoroutinefunction(measure) else measure()
    return dict(result)


def main() -> int:
    """Run the parts, print their figures, write the flat JSON; exit 1 when a part failed."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", choices=PARTS, help="parts to run (default: all)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "security.json")
    args = parser.parse_args()
    figures: dict[str, Any] = {}
    failed: list[str] = []
    for name in args.only or PARTS:
        started = time.perf_counter()
        try:
            part = run_part(name)
        except Exception as exc:  # a failing part is reported; the others still run
            print(f"{name}: failed: {exc!r}", flush=True)
            failed.append(name)
            continue
        print(f"{name} ({time.perf_counter() - started:.0f} s): {json.dumps(part)}", flush=True)
        figures.update(part)
    if args.out.exists() and args.only:  # a partial run keeps the other parts' last figures
        figures = {**json.loads(args.out.read_text(encoding="utf-8")), **figures}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(figures, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
