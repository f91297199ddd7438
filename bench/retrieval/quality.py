"""The hebrew report's quality part: HeQ and SciFact nDCG@10 of the default definition and fusion.

What ``ragbot eval --configs default`` measures, for both data sets in one process: the shipped
definition (``config/definition.json``: MiniLM on content, multilingual-e5-small on title, weight
0.5, and content), the retriever's default settings (score fusion, BM25 weight 1, language routing on), a
temporary embedded store, no reranker. The same index is then searched with routing off, so the
routing's effect is read side by side (``*_no_routing``). Vectors are cached in ``var/eval-cache``
(``ragbot eval --cache-dir`` shares it). Data: ``RAGBOT_DATA_DIR`` or ``../shared/data`` (``beir/heq-test``
and ``beir/scifact``); a missing set is reported, not guessed. ``RAGBOT_BENCH_HEBREW_SETS=heq`` measures one
set only (SciFact's 5,183 abstracts take the longest to embed the first time).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SETS = {"heq": "heq-test", "scifact": "scifact"}


def data_dir() -> Path | None:
    """Where the BEIR sets live (``RAGBOT_DATA_DIR``, else ``../shared/data``), if anywhere."""
    configured = os.environ.get("RAGBOT_DATA_DIR")
    candidate = Path(configured) if configured else ROOT.parent / "shared" / "data"
    return candidate if (candidate / "beir").is_dir() else None


@dataclasses.dataclass(slots=True)
class ShippedSetup:
    """One BEIR set with the shipped definition: its cached embedders, the retriever's defaults and a
    temporary embedded store (empty until indexed)."""

    dataset: Any
    definition: Any
    embedders: dict[str, Any]
    defaults: Any
    worker: Any
    store: Any


@contextlib.asynccontextmanager
async def shipped_setup(
    folder: Path, *, cache: Path, max_queries: int | None = None, prefix: str = "ragbot-bench-hebrew-"
) -> AsyncIterator[ShippedSetup]:
    """The shipped definition, defaults (routing on, no reranker) and a fresh store for ``folder``."""
    from ragbot.definition import load_definition
    from ragbot.embedders import build_embedders
    from ragbot.evaluation import VectorCache, eval_definition, load_beir
    from ragbot.retrieval import RetrievalDefaults
    from ragbot.settings import ModelSettings, RetrieverSettings, StoreSettings, WorkerSettings
    from ragbot.stores import build_store

    dataset = load_beir(folder, split="test", max_queries=max_queries)
    definition = eval_definition(load_definition(ROOT / "config" / "definition.json"))
    raw = build_embedders(settings=ModelSettings(models_location=None), definition=definition)
    caches = {name: VectorCache(e, folder=cache) for name, e in raw.items()}
    for embedder in caches.values():
        await asyncio.to_thread(embedder.warm_up)
    defaults = dataclasses.replace(
        RetrievalDefaults.from_settings(RetrieverSettings()), rerank=False, language_routing=True
    )
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        settings = StoreSettings(backend="embedded", embedded_path=Path(tmp) / "eval.sqlite3")
        dimensions = {v.name: caches[v.model].dimension for v in definition.vector_fields}
        store = build_store(settings=settings, definition=definition, dimensions=dimensions)
        await store.ensure_ready()
        try:
            yield ShippedSetup(dataset, definition, dict(caches), defaults, WorkerSettings(), store)
        finally:
            for c in caches.values():
                c.flush()
            await store.close()


async def ndcg_default(folder: Path, *, cache: Path, max_queries: int | None = None) -> dict[str, float]:
    """nDCG@10 of the default configuration with routing on and off, on one index of ``folder``."""
    from ragbot.evaluation import EvalConfig, evaluate

    figures: dict[str, float] = {}
    async with shipped_setup(folder, cache=cache, max_queries=max_queries) as setup:
        for routing, key in ((True, "ndcg10"), (False, "ndcg10_no_routing")):
            started = time.perf_counter()
            report = await evaluate(
                setup.dataset,
                store=setup.store,
                definition=setup.definition,
                embedders=setup.embedders,
                defaults=dataclasses.replace(setup.defaults, language_routing=routing),
                configs=[EvalConfig("default", None, rerank=None)],
                max_tokens=setup.worker.paragraph_tokens,
                link_targets=setup.worker.link_targets,
                reindex=routing,  # the second pass searches the same index
            )
            figures[key] = round(report.results[0].metrics["ndcg@10"], 4)
            figures[f"{key}_s"] = round(time.perf_counter() - started, 1)
        figures["queries"] = len(setup.dataset.queries)
    return figures


async def measure_async(*, max_queries: int | None = None) -> dict[str, Any]:
    """The quality figures for every data set found."""
    data = data_dir()
    if data is None:
        raise FileNotFoundError(
            "no BEIR data (set RAGBOT_DATA_DIR to a folder holding beir/heq-test, beir/scifact)"
        )
    cache = ROOT / "var" / "eval-cache"
    cache.mkdir(parents=True, exist_ok=True)
    out: dict[str, Any] = {}
    wanted = [s.strip() for s in os.environ.get("RAGBOT_BENCH_HEBREW_SETS", ",".join(SETS)).split(",")]
    for short, name in SETS.items():
        if short not in wanted:
            print(f"quality: {short} not asked for (RAGBOT_BENCH_HEBREW_SETS)", file=sys.stderr)
            continue
        folder = data / "beir" / name
        if not folder.is_dir():
            print(f"quality: {folder} is missing: {short}_ndcg10_default not measured", file=sys.stderr)
            continue
        figures = await ndcg_default(folder, cache=cache, max_queries=max_queries)
        out[f"{short}_ndcg10_default"] = figures["ndcg10"]
        out[f"{short}_ndcg10_default_no_routing"] = figures["ndcg10_no_routing"]
        out[f"{short}_queries"] = figures["queries"]
    return out


def measure() -> dict[str, Any]:
    """``heq_ndcg10_default``, ``scifact_ndcg10_default`` and the same with routing off."""
    return asyncio.run(measure_async())


if __name__ == "__main__":
    import json

    sys.stdout.write(json.dumps(measure(), indent=2) + "\n")
