"""Reports: several benchmarks' figures merged into one flat JSON that docs/benchmarks.md quotes.

A report runs its parts one after the other (none measures while another loads the machine), prints
each part's figures and writes the union to ``bench/results/<report>.json``. A part is a module under
``bench/`` and the function that returns its figures (plain or a coroutine function), optionally the
keys it contributes (default: every scalar it returns). A failing part is reported and the others still
run; a partial run (``--only``, or a failure) keeps the other parts' last figures.

- ``hebrew`` (issue 17; targets in docs/benchmarks.md "Hebrew"): ``e5`` (``bench/retrieval/e5_engines.py``:
  ``e5_passages_per_s``, ``e5_query_p50_ms``, ...), ``quality`` (``bench/retrieval/quality.py``:
  ``heq_ndcg10_default``, ``scifact_ndcg10_default``, with and without language routing), ``pipeline``
  and ``settle`` (``bench/indexing/default_definition.py``: ``default_definition_paragraphs_per_s``,
  ``kolzchut_corpus_minutes``, ``sample_wiki_settle_s``), ``answers`` (``bench/answers/modes.py``:
  ``answers_*``, ``quote_answers_*``, ``grounded_answers_*``), ``footprint``
  (``bench/operations/footprint.py``: ``make run``'s start-up seconds and memory, ``run_*``);
- ``operations`` (issue 16): ``bench/operations/{reconcile,reembed,tracing,workers}.py``:
  ``reconcile_removed_wrong``, ``reembed_failed_queries``, ``reembed_empty_results``,
  ``tracing_overhead_p50_ms``, ``two_workers_duplicates``, ``two_workers_speedup``;
- ``security`` (issue 14): ``bench/security/{auth,limits,inputs,fuzz,faults}.py``:
  ``unauthenticated_writes_accepted``, ``auth_overhead_p50_ms``, ``rate_limit_429_after``,
  ``bad_inputs_tried``, ``bad_inputs_5xx``, ``fuzz_cases``, ``fuzz_5xx``, ``es_node_loss_*``,
  ``redis_restart_sessions_lost``.

Run: ``uv run python -m bench.report hebrew|operations|security [--only PART ...] [--out FILE]`` (data
from ``RAGBOT_DATA_DIR`` or ``../shared/data``; Redis and Elasticsearch from ``RAGBOT_TEST_REDIS_URL`` /
``RAGBOT_TEST_ES_URL``, as ``make bench`` sets them).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import inspect
import json
import time
from pathlib import Path
from typing import Any, NamedTuple

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"


class Part(NamedTuple):
    """One part of a report: ``module.function()`` returns its figures; ``keys`` filters them."""

    module: str
    function: str = "measure"
    keys: tuple[str, ...] | None = None


# Each report's parts, in the order they run; the report's name is its results file's.
REPORTS: dict[str, dict[str, Part]] = {
    "hebrew": {
        "e5": Part(
            "bench.retrieval.e5_engines",
            keys=(
                "e5_passages_per_s",
                "minilm_passages_per_s",
                "packaged_passages_per_s",
                "e5_speedup_vs_packaged",
                "e5_query_p50_ms",
                "packaged_query_p50_ms",
                "e5_vector_cosine_min",
                "e5_precision",
            ),
        ),
        "quality": Part("bench.retrieval.quality"),
        "pipeline": Part("bench.indexing.default_definition", "measure_pipeline"),
        "settle": Part("bench.indexing.default_definition", "measure_settle"),
        "answers": Part("bench.answers.modes"),
        "footprint": Part("bench.operations.footprint"),
    },
    "operations": {
        "reconcile": Part("bench.operations.reconcile"),
        "reembed": Part("bench.operations.reembed"),
        "tracing": Part("bench.operations.tracing"),
        "workers": Part("bench.operations.workers"),
    },
    "security": {
        "auth": Part("bench.security.auth"),
        "limits": Part("bench.security.limits"),
        "inputs": Part("bench.security.inputs"),
        "fuzz": Part("bench.security.fuzz"),
        "faults": Part("bench.security.faults"),
    },
}


def run_part(part: Part) -> dict[str, Any]:
    """One part's flat figures (scalars only, filtered by ``keys`` when given)."""
    measure = getattr(importlib.import_module(part.module), part.function)
    result = asyncio.run(measure()) if inspect.iscoroutinefunction(measure) else measure()
    flat = {k: v for k, v in dict(result).items() if isinstance(v, str | int | float | bool) or v is None}
    return {k: flat[k] for k in part.keys if k in flat} if part.keys else flat


def main(argv: list[str] | None = None) -> int:
    """Run one report's parts, print their figures, write the flat JSON; exit 1 when a part failed."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("report", choices=sorted(REPORTS))
    parser.add_argument("--only", nargs="+", help="parts to run (default: all)")
    parser.add_argument("--out", type=Path, help="default: bench/results/<report>.json")
    args = parser.parse_args(argv)
    parts = REPORTS[args.report]
    unknown = sorted(set(args.only or ()) - set(parts))
    if unknown:
        parser.error(f"{args.report} has no part {', '.join(unknown)} (it has: {', '.join(parts)})")
    out: Path = args.out or RESULTS / f"{args.report}.json"
    figures: dict[str, Any] = {}
    failed: list[str] = []
    for name in args.only or parts:
        started = time.perf_counter()
        try:
            part = run_part(parts[name])
        except Exception as exc:  # a failing part is reported; the others still run
            print(f"{name}: failed: {exc!r}", flush=True)
            failed.append(name)
            continue
        print(f"{name} ({time.perf_counter() - started:.0f} s): {json.dumps(part)}", flush=True)
        figures.update(part)
    if out.exists() and (args.only or failed):  # a partial run keeps the other parts' last figures
        figures = {**json.loads(out.read_text(encoding="utf-8")), **figures}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(figures, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {out}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
