"""``make bench``: every benchmark, subject by subject, each in its own process; flat JSON in bench/results/.

Benchmarks live by what they measure: ``bench/indexing``, ``bench/retrieval``, ``bench/answers``,
``bench/chat``, ``bench/security``, ``bench/operations`` and (``scripts/compose_stack.py``) containers;
``bench/report.py`` merges several into one published file (``hebrew``, ``operations``, ``security``).
Each writes ``bench/results/<name>.json`` under the name docs/benchmarks.md quotes.

Benchmarks that need data take it from ``RAGBOT_DATA_DIR`` (a folder holding ``beir/scifact`` and
``beir/heq-test``; default ``../shared/data`` when it exists). Redis and Elasticsearch come from
``RAGBOT_TEST_REDIS_URL`` / ``RAGBOT_TEST_ES_URL``, the MediaWiki from ``RAGBOT_TEST_MEDIAWIKI_*``
(``make bench`` starts all three). One runs after the other,
so none measures while another loads the machine. A failing benchmark is reported and the others still
run; the exit code says whether all passed.

Not listed: ``bench/indexing/gpu.py`` (the embedder on CUDA against the CPU) needs a GPU, which CI and
the dev machines lack; without one it says so and exits 0. Its figures (bench/results/gpu.json) come from
a device run (docs/benchmarks.md, "GPU").

To add one: put the script under its subject's folder (runnable as ``python -m bench.<subject>.<name>``)
and add a ``Bench`` to that subject's list in ``subjects()`` (a script path ending in ``.py`` works too).

Run: ``uv run python -m bench.run [--subject retrieval ...] [--only NAME ...]``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from bench.answers.sets import WHOLE_SETS, set_file

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Bench:
    """One benchmark as its own process: ``python -m <target> <args>`` (``python <target>``: a script)."""

    name: str  # what --only takes; its results file is bench/results/<name>.json by habit
    target: str  # a module ("bench.retrieval.retriever") or a script path ("scripts/compose_stack.py")
    args: tuple[str, ...] = ()

    def command(self) -> list[str]:
        if self.target.endswith(".py"):
            return [sys.executable, self.target, *self.args]
        return [sys.executable, "-m", self.target, *self.args]


def data_dir() -> Path | None:
    """Where the evaluation data sets live, if anywhere."""
    configured = os.environ.get("RAGBOT_DATA_DIR")
    candidate = Path(configured) if configured else ROOT.parent / "shared" / "data"
    return candidate if (candidate / "beir").is_dir() else None


def retrieval_quality(data: Path) -> list[Bench]:
    """The benchmarks that need the BEIR sets, in order: the blend weight first, the retriever reads it."""
    scifact, heq = str(data / "beir" / "scifact"), str(data / "beir" / "heq-test")
    reranker = ROOT / "var" / "models" / "scifact-reranker"
    retriever: tuple[str, ...] = ("--scifact", scifact, "--heq", heq)
    found: list[Bench] = []
    if reranker.is_dir():
        # The reranker as bench/retrieval/rerank_blend.py measured it: int8 on ONNX Runtime, 96 tokens a
        # pair (what fits 150 ms for 20 pairs on two AVX2 cores, docs/benchmarks.md), blended at the
        # weight chosen on SciFact's train split when that sweep has run.
        serving = ("--reranker", str(reranker), "--reranker-max-length", "96", "--reranker-quantize")
        blend_args: tuple[str, ...] = ("--dataset", scifact, "--split", "train", *serving)
        blend_args += ("--store-path", str(ROOT / "var" / "eval" / "scifact-blend.sqlite3"))
        blend_args += ("--cache-dir", str(ROOT / "var" / "eval-cache"))
        found.append(Bench("rerank_blend", "bench.retrieval.rerank_blend", blend_args))
        blend = ROOT / "bench" / "results" / "rerank_blend_scifact_train.json"
        retriever += (*serving, "--rerank-weight-from", str(blend))
    found.append(Bench("retriever", "bench.retrieval.retriever", retriever))
    found.append(Bench("hebrew_fusion_variants", "bench.retrieval.fusion_variants"))
    found.append(Bench("hebrew_analyzer", "bench.retrieval.hebrew_analyzer", ("--dataset", heq)))
    return found


def subjects(data: Path | None) -> dict[str, list[Bench]]:
    """Every benchmark ``make bench`` runs, by subject, in run order."""
    return {
        "indexing": [
            Bench("indexing", "bench.indexing.pipeline"),
            # Haystack's indexing pipeline against ragbot's paths (Haystack installed for it alone by uv)
            *([Bench("indexing_peer", "bench.indexing.peer", ("--data", str(data)))] if data else []),
            # a worker polling the real MediaWiki (RAGBOT_TEST_MEDIAWIKI_*): edit, move, delete, a storm
            Bench("wiki", "bench.indexing.wiki"),
        ],
        "retrieval": [
            Bench("embedded_store", "bench.retrieval.embedded_store"),
            *(retrieval_quality(data) if data is not None else []),
        ],
        # abstention and boilerplate on the held-out half of samples/kolzchut/abstention_questions.json,
        # then on the sets held out whole (each read once clean, after its candidate was fixed)
        "answers": [
            Bench("answers", "bench.answers.abstention"),
            *(
                Bench(
                    f"answers_{name}",
                    "bench.answers.abstention",
                    (
                        "--questions",
                        set_file(name),
                        "--out",
                        f"bench/results/answers_{name}.json",
                    ),
                )
                for name in WHOLE_SETS
            ),
            # the abstention gate's fit, out of fold, on the sets read before it (not the shipped file)
            Bench("pair_gate_fit", "bench.answers.pair_gate", ("--gate-out", "var/bench/pair_gate.json")),
            # English questions' gold page rank over the Hebrew pages, untranslated and translated
            Bench("crosslingual", "bench.answers.crosslingual"),
            # the question memory, each read file answered with the other files' questions remembered
            Bench("question_memory", "bench.answers.question_memory"),
        ],
        "chat": [Bench("chat", "bench.chat.sessions")],
        "security": [Bench("security", "bench.report", ("security",))],
        "operations": [Bench("operations", "bench.report", ("operations",))],
        # Issue 17's report spans subjects (e5 speed and quality, the default definition's indexing,
        # answers, make run's footprint); parts whose data is missing fail and say so.
        "reports": [Bench("hebrew", "bench.report", ("hebrew",))],
        # make test-compose's run: image sizes, cold and warm builds, compose up and the smoke's timings.
        "containers": [Bench("containers", "scripts/compose_stack.py", ("all",))],
    }


def main() -> int:
    """Run the selected benchmarks and print a summary line for each."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--subject", nargs="+", help="subjects to run (default: all)")
    parser.add_argument("--only", nargs="+", help="benchmark names to run (default: all)")
    args = parser.parse_args()
    data = data_dir()
    if data is None:
        print("no data sets found (set RAGBOT_DATA_DIR): skipping the retriever quality benchmarks")
    selected = [
        (subject, bench)
        for subject, benches in subjects(data).items()
        if not args.subject or subject in args.subject
        for bench in benches
        if not args.only or bench.name in args.only
    ]
    failed: list[str] = []
    for subject, bench in selected:
        command = bench.command()
        print(f"\n=== {subject}/{bench.name}: {' '.join(command)}", flush=True)
        started = time.perf_counter()
        rc = subprocess.run(command, cwd=ROOT, check=False).returncode
        print(f"=== {bench.name}: exit {rc} after {time.perf_counter() - started:.0f} s", flush=True)
        if rc != 0:
            failed.append(bench.name)
    if failed:
        print(f"failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
