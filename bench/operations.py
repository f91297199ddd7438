"""``bench/operations.py``: issue 16's figures in one flat JSON, ``bench/results/operations.json``.

Each part measures in its own module and returns a flat dict; this script runs them one after the
other (none measures while another loads the machine), prints each part's figures, and writes the
union (targets in ``docs/benchmarks.md``). A part whose module is not in the tree yet is reported as
absent and skipped, so the frame runs while the parts land one by one:

- ``bench/operations_reconcile.py``: ``reconcile_removed_wrong``;
- ``bench/operations_reembed.py``: ``reembed_failed_queries``, ``reembed_empty_results``;
- ``bench/operations_tracing.py``: ``tracing_overhead_p50_ms``;
- ``bench/operations_workers.py``: ``two_workers_duplicates``, ``two_workers_speedup``.

Run: ``uv run python bench/operations.py [--only workers ...] [--out bench/results/operations.json]``
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
PARTS = ("reconcile", "reembed", "tracing", "workers")


def part_exists(name: str) -> bool:
    """Whether ``bench/operations_<name>.py`` is in the tree."""
    return (ROOT / "bench" / f"operations_{name}.py").is_file()


def run_part(name: str) -> dict[str, Any]:
    """One part's figures (its module's ``measure()``, awaited when it is a coroutine function)."""
    sys.path.insert(0, str(ROOT / "bench"))
    module = importlib.import_module(f"operations_{name}")
    measure = module.measure
    result = asyncio.run(measure()) if inspect.iscoroutinefunction(measure) else measure()
    return dict(result)


def main() -> int:
    """Run the parts present, print their figures, write the flat JSON; exit 1 when a part failed."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", choices=PARTS, help="parts to run (default: all present)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "operations.json")
    args = parser.parse_args()
    figures: dict[str, Any] = {}
    failed: list[str] = []
    for name in args.only or PARTS:
        if not part_exists(name):
            print(f"{name}: absent (no bench/operations_{name}.py yet), skipped", flush=True)
            continue
        started = time.perf_counter()
        try:
            part = run_part(name)
        except Exception as exc:  # a failing part is reported; the others still run
            print(f"{name}: failed: {exc!r}", flush=True)
            failed.append(name)
            continue
        print(f"{name} ({time.perf_counter() - started:.0f} s): {json.dumps(part)}", flush=True)
        figures.update(part)
    if args.out.exists():  # a part not run this time keeps its last figures
        figures = {**json.loads(args.out.read_text(encoding="utf-8")), **figures}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(figures, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
