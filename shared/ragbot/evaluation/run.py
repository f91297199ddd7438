"""Index a BEIR corpus through the indexing pipeline and run every configuration's queries."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ragbot.definition import DocumentDefinition
from ragbot.evaluation.configs import MAX_PAGES, EvalConfig, standard_configs
from ragbot.evaluation.data import BeirDataset, beir_page, page_ids
from ragbot.evaluation.metrics import latency_summary, score_run
from ragbot.evaluation.report import ConfigResult, EvalReport
from ragbot.indexing.paragraphs import DEFAULT_LINK_TARGETS, DEFAULT_PARAGRAPH_TOKENS, LinkTargets
from ragbot.indexing.pipeline import IndexingHooks, IndexingPipeline, SplitOptions
from ragbot.ports import Embedder, Reranker, SearchStore
from ragbot.retrieval import RetrievalDefaults, RetrievalEngine
from ragbot.schemas.pages import Page


@dataclass(slots=True)
class IndexStats:
    """What indexing the corpus produced."""

    pages: int
    paragraphs: int
    seconds: float


def _bar(total: int, desc: str, enabled: bool) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="q" if desc.startswith("query") else "doc", disable=not enabled)


async def index_dataset(
    dataset: BeirDataset,
    *,
    store: SearchStore,
    definition: DocumentDefinition,
    embedders: Mapping[str, Embedder],
    max_tokens: int,
    link_targets: LinkTargets = DEFAULT_LINK_TARGETS,
    show_progress: bool = False,
) -> IndexStats:
    """Index every document as one page through the indexing pipeline, all pages in one call."""
    started = time.perf_counter()
    pipeline = IndexingPipeline(
        definition=definition,
        embedders=embedders,
        split=SplitOptions(max_tokens=max_tokens, link_targets=link_targets),
    )
    ids = page_ids(dataset)
    pages = [beir_page(dataset.corpus[doc_id], page_id) for page_id, doc_id in ids.items()]
    pages = [p for p in pages if p.title.strip() or p.content.strip()]
    with _bar(len(ids), "indexing", show_progress) as bar:
        hooks = _Progress(bar)
        bar.update(len(ids) - len(pages))  # empty documents: nothing to index
        # Every page in one call: the pipeline embeds them in shared batches (a document's vectors
        # do not depend on its batch: tests/unit/test_batch_vectors.py) and writes them a
        # group at a time, as the worker and ``ragbot index`` do.
        await pipeline.index(pages, store=store, hooks=hooks)
    return IndexStats(
        pages=len(ids), paragraphs=hooks.paragraphs, seconds=round(time.perf_counter() - started, 1)
    )


class _Progress(IndexingHooks):
    """Counts written paragraphs and moves the progress bar, a page at a time."""

    def __init__(self, bar: Any) -> None:
        self.bar = bar
        self.paragraphs = 0

    async def written(self, page: Page, paragraphs: int) -> None:
        self.paragraphs += paragraphs
        self.bar.update(1)


async def run_config(
    engine: RetrievalEngine,
    dataset: BeirDataset,
    config: EvalConfig,
    *,
    retrieval_size: int = 100,
    pages: int = MAX_PAGES,
    show_progress: bool = False,
) -> ConfigResult:
    """Every judged query through the engine, one at a time; ranked pages become ranked documents."""
    doc_of = page_ids(dataset)
    run: dict[str, list[str]] = {}
    latencies: list[float] = []
    with _bar(len(dataset.queries), f"queries {config.name}", show_progress) as bar:
        for qid, text in dataset.queries.items():
            request = config.request(text, retrieval_size=retrieval_size, pages=pages)
            t0 = time.perf_counter()
            result = await engine.run(request)
            latencies.append((time.perf_counter() - t0) * 1000.0)
            run[qid] = [doc_of[h.page_id] for h in result.documents if h.page_id in doc_of]
            bar.update(1)
    return ConfigResult(
        config=config, metrics=score_run(run, dataset.qrels), latency_ms=latency_summary(latencies), run=run
    )


async def evaluate(
    dataset: BeirDataset,
    *,
    store: SearchStore,
    definition: DocumentDefinition,
    embedders: Mapping[str, Embedder],
    defaults: RetrievalDefaults,
    reranker: Reranker | None = None,
    configs: Sequence[EvalConfig] | None = None,
    max_tokens: int = DEFAULT_PARAGRAPH_TOKENS,
    link_targets: LinkTargets = DEFAULT_LINK_TARGETS,
    retrieval_size: int = 100,
    pages: int = MAX_PAGES,
    reindex: bool = True,
    store_name: str = "embedded",
    show_progress: bool = False,
) -> EvalReport:
    """Index the corpus (unless ``reindex`` is False and the store already holds it), run every config."""
    stats = IndexStats(pages=len(dataset.corpus), paragraphs=await store.count(), seconds=0.0)
    if reindex or stats.paragraphs == 0:
        stats = await index_dataset(
            dataset,
            store=store,
            definition=definition,
            embedders=embedders,
            max_tokens=max_tokens,
            link_targets=link_targets,
            show_progress=show_progress,
        )
    engine = RetrievalEngine(
        store=store, embedders=embedders, definition=definition, reranker=reranker, defaults=defaults
    )
    chosen = (
        list(configs)
        if configs is not None
        else standard_configs(definition.model_names, with_rerank=reranker is not None)
    )
    results = []
    for config in chosen:
        results.append(
            await run_config(
                engine,
                dataset,
                config,
                retrieval_size=retrieval_size,
                pages=pages,
                show_progress=show_progress,
            )
        )
    return EvalReport(
        dataset=dataset.name,
        split=dataset.split,
        store=store_name,
        models=list(definition.model_names),
        reranker=str(getattr(reranker, "path", type(reranker).__name__)) if reranker is not None else None,
        documents=len(dataset.corpus),
        paragraphs=stats.paragraphs,
        queries=len(dataset.queries),
        index_seconds=stats.seconds,
        defaults={k: v for k, v in asdict(defaults).items() if not k.endswith("timeout_s")},
        results=results,
    )
