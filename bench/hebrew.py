"""``bench/hebrew.py``: issue 17's figures in one flat JSON, ``bench/results/hebrew.json``.

Each part measures in its own module and returns a flat dict; this script runs them one after the
other (none measures while another loads the machine), prints each part's figures and writes the
union (targets in ``docs/benchmarks.md``, section "Hebrew"):

- ``e5`` (``bench/hebrew_e5.py``): ``e5_passages_per_s``, ``minilm_passages_per_s``,
  ``e5_speedup_vs_packaged``, ``e5_query_p50_ms``, ``e5_vector_cosine_min``;
- ``quality`` (``bench/hebrew_quality.py``): ``heq_ndcg10_default``, ``scifact_ndcg10_default`` (the
  shipped definition, the default fusion, language routing on) and the same with routing off;
- ``pipeline`` (``bench/hebrew_indexing.py``): ``default_definition_paragraphs_per_s`` (per e5
  engine too) and ``kolzchut_corpus_minutes``;
- ``settle`` (``bench/hebrew_indexing.py``): ``sample_wiki_settle_s``;
- ``answers`` (``bench/hebrew_answers.py``): ``answers_*`` for the mode ``make run`` uses, with
  ``quote_answers_*`` and ``grounded_answers_*`` side by side;
- ``footprint`` (``bench/hebrew_footprint.py``): ``make run``'s start-up seconds and summed memory per
  e5 engine (``run_*``).

``PARTS`` is the hook for more: a part is a name, a module under ``bench/`` and the function that
returns its figures (plain or a coroutine function), optionally the keys it contributes (default: every
scalar it returns).

Run: ``uv run python bench/hebrew.py [--only e5 quality ...] [--out bench/results/hebrew.json]``
(data from ``RAGBOT_DATA_DIR`` or ``../shared/data``; Redis and Elasticsearch from
``RAGBOT_TEST_REDIS_URL`` / ``RAGBOT_TEST_ES_URL``, as ``make bench`` sets them). A part whose data is
missing fails with a message that says so; the others still run.
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
from typing import Any, NamedTuple

ROOT = Path(__file__).resolve().parents[1]


class Part(NamedTuple):
    """One part of the bench: ``module.function()`` returns its figures; ``keys`` filters them."""

    module: str
    function: str = "measure"
    keys: tuple[str, ...] | None = None


PARTS: dict[str, Part] = {
    "e5": Part(
        "hebrew_e5",
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
    "quality": Part("hebrew_quality"),
    "pipeline": Part("hebrew_indexing", "measure_pipeline"),
    "settle": Part("hebrew_indexing", "measure_settle"),
    "answers": Part("hebrew_answers"),
    "footprint": Part("hebrew_footprint"),
}


def run_part(part: Part) -> dict[str, Any]:
    """One part's flat figures (scalars only, filtered by ``keys`` when given)."""
    sys.path.insert(0, str(ROOT / "bench"))
    measure = getattr(importlib.import_module(part.module), part.function)
    result = asyncio.run(measure()) if inspect.iscoroutinefunction(measure) else measure()
    flat = {k: v for k, v in dict(result).items() if isinstance(v, str | int | float | bool) or v is None}
    return {k: flat[k] for k in part.keys if k in flat} if part.keys else flat


def main() -> int:
    """Run the parts, print their figures, write the flat JSON; exit 1 when a part failed."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", choices=sorted(PARTS), help="parts to run (default: all)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "hebrew.json")
    args = parser.parse_args()
    figures: dict[str, Any] = {}
    failed: list[str] = []
    for name in args.only or PARTS:
        started = time.perf_counter()
        try:
            part = run_part(PARTS[name])
        except Exception as exc:  # a failing part is reported; the others still run
            print(f"{name}: failed: {exc!r}", flush=True)
            failed.append(name)
            continue
        print(f"{name} ({time.perf_counter() - started:.0f} s): {json.dumps(part)}", flush=True)
        figures.update(part)
    if args.out.exists() and (args.only or failed):  # a partial run keeps the other parts' last figures
        figures = {**json.loads(args.out.read_text(encoding="utf-8")), **figures}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(figures, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
