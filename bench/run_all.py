"""``make bench``: run every benchmark in turn and leave their flat JSON in ``bench/results/``.

Benchmarks that need data take it from ``RAGBOT_DATA_DIR`` (a folder holding ``beir/scifact`` and
``beir/heq-test``; default ``../shared/data`` when it exists). Redis and Elasticsearch come from
``RAGBOT_TEST_REDIS_URL`` / ``RAGBOT_TEST_ES_URL``, the MediaWiki from ``RAGBOT_TEST_MEDIAWIKI_*``
(``make bench`` starts all three). Each benchmark runs as
its own process, one after the other, so none measures while another loads the machine. A failing
benchmark is reported and the others still run; the exit code says whether all passed.

Run: ``uv run python bench/run_all.py [--only NAME ...]``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def data_dir() -> Path | None:
    """Where the evaluation data sets live, if anywhere."""
    configured = os.environ.get("RAGBOT_DATA_DIR")
    candidate = Path(configured) if configured else ROOT.parent / "shared" / "data"
    return candidate if (candidate / "beir").is_dir() else None


def commands(data: Path | None) -> dict[str, list[str]]:
    """Each benchmark's command line (results land in bench/results/<name>.json)."""
    py = sys.executable
    out: dict[str, list[str]] = {
        "embedded_store": [py, "bench/embedded_store.py"],
        "indexing": [py, "bench/indexing.py"],
        "chat": [py, "bench/chat.py"],
        "security": [py, "bench/security.py"],
        "operations": [py, "bench/operations.py"],
        "hebrew": [py, "bench/hebrew.py"],  # parts whose data is missing fail and say so
        # a worker polling the real MediaWiki (RAGBOT_TEST_MEDIAWIKI_*): edit, move, delete, a storm
        "wiki": [py, "bench/wiki.py"],
        # make test-compose's run: image sizes, cold and warm builds, compose up and the smoke's timings
        "containers": [py, "scripts/compose_stack.py", "all"],
    }
    if data is not None:
        reranker = ROOT / "var" / "models" / "scifact-reranker"
        retriever = [py, "bench/retriever.py", "--scifact", str(data / "beir" / "scifact")]
        retriever += ["--heq", str(data / "beir" / "heq-test")]
        if reranker.is_dir():
            # The reranker as bench/rerank_blend.py measured it: int8 on ONNX Runtime, 96 tokens a
            # pair (what fits 150 ms for 20 pairs on two AVX2 cores, docs/benchmarks.md), blended at
            # the weight chosen on SciFact's train split when that sweep has run.
            serving = ["--reranker", str(reranker), "--reranker-max-length", "96", "--reranker-quantize"]
            out["rerank_blend"] = [
                py,
                "bench/rerank_blend.py",
                "--dataset",
                str(data / "beir" / "scifact"),
                "--split",
                "train",
                *serving,
                "--store-path",
                str(ROOT / "var" / "eval" / "scifact-blend.sqlite3"),
                "--cache-dir",
                str(ROOT / "var" / "eval-cache"),
            ]
            blend = ROOT / "bench" / "results" / "rerank_blend_scifact_train.json"
            retriever += [*serving, "--rerank-weight-from", str(blend)]
        out["retriever"] = retriever
        out["hebrew_fusion_variants"] = [py, "bench/hebrew_fusion_variants.py"]
        # Haystack's indexing pipeline against ragbot's paths (Haystack installed for it alone by uv)
        out["indexing_peer"] = [py, "bench/indexing_peer.py", "--data", str(data)]
        out["hebrew_analyzer"] = [
            py,
            "bench/hebrew_analyzer.py",
            "--dataset",
            str(data / "beir" / "heq-test"),
        ]
    return out


def main() -> int:
    """Run the selected benchmarks and print a summary line for each."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", help="names to run (default: all)")
    args = parser.parse_args()
    data = data_dir()
    if data is None:
        print("no data sets found (set RAGBOT_DATA_DIR): skipping the retriever quality benchmarks")
    selected = commands(data)
    if args.only:
        selected = {k: v for k, v in selected.items() if k in set(args.only)}
    failed: list[str] = []
    for name, cmd in selected.items():
        print(f"\n=== {name}: {' '.join(cmd)}", flush=True)
        started = time.perf_counter()
        rc = subprocess.run(cmd, cwd=ROOT, check=False).returncode
        print(f"=== {name}: exit {rc} after {time.perf_counter() - started:.0f} s", flush=True)
        if rc != 0:
            failed.append(name)
    if failed:
        print(f"failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
