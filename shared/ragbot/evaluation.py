"""Retrieval quality on BEIR-layout data, measured through ragbot's real indexing and retrieval paths.

``ragbot eval --dataset DIR`` drives this module:

1. ``load_beir`` reads ``corpus.jsonl``, ``queries.jsonl`` and ``qrels/<split>.tsv``.
2. ``index_dataset`` turns every corpus document into one page (title + text) and writes it the way
   the embedder worker does: ``build_stored_paragraphs`` (split, embed every (model, field) pair)
   then ``store.replace_page``. A long document becomes several paragraphs of one page.
3. ``run_config`` sends every query through ``RetrievalEngine.run`` with ``paragraphs_per_page`` of
   ``[1] * pages``: the ranked pages are the ranked documents (a page ranks by its best paragraph).
4. ``score_run`` computes nDCG@10 (trec_eval's linear gains), recall@10, recall@100 and MRR@10,
   averaged over the queries that have judgements; latency is the wall time of each query's
   retrieval, query embedding included, one query at a time.

Every configuration uses the engine's defaults (``RetrieverSettings``) except what it names: BM25
alone, each dense model alone, hybrid, hybrid + rerank when a reranker is given, and "default" (a
request that names nothing: the figure the targets are about). Reranked documents are what the engine
returns: at most ``rerank_top_n`` paragraphs, so a reranked recall@100 is bounded by the rerank depth.

``VectorCache`` keeps passage and query vectors on disk between runs (experiments re-index the same
corpus many times on a two-core machine); the indexing path is unchanged, only the model call is
skipped for texts seen before.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ragbot.definition import DocumentDefinition, parse_definition
from ragbot.errors import ConfigurationError, ValidationFailed
from ragbot.indexing.embed import build_stored_paragraphs
from ragbot.ports import Embedder, Reranker, SearchStore, Vector
from ragbot.rerankers.training import TrainingPair
from ragbot.retrieval import RetrievalDefaults, RetrievalEngine
from ragbot.schemas.pages import Page
from ragbot.schemas.retrieval import FusionMethod, RetrieveRequest, SearchMode

logger = logging.getLogger(__name__)

CUTOFFS = (10, 100)
METRICS = ("ndcg@10", "recall@10", "recall@100", "mrr@10")
MAX_PAGES = 100  # RetrieveRequest allows 100 entries in paragraphs_per_page


# -- BEIR data ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BeirDocument:
    """One corpus entry."""

    doc_id: str
    title: str
    text: str


@dataclass(slots=True)
class BeirDataset:
    """A BEIR dataset restricted to one split: the queries that split judges, and its judgements."""

    name: str
    path: Path
    split: str
    corpus: dict[str, BeirDocument]
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]


def _jsonl(path: Path) -> list[dict[str, Any]]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise ConfigurationError(
            f"{path} not found (BEIR layout: corpus.jsonl, queries.jsonl, qrels/)"
        ) from None
    rows = []
    for number, line in enumerate(lines, start=1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ValidationFailed(f"{path}:{number}: not JSON ({exc})", field=str(path)) from None
    return rows


def load_qrels(path: Path) -> dict[str, dict[str, int]]:
    """``query-id  corpus-id  score`` rows (a header line is skipped); scores <= 0 are kept as 0."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise ConfigurationError(f"{path} not found") from None
    qrels: dict[str, dict[str, int]] = {}
    for number, line in enumerate(lines, start=1):
        parts = line.split("\t") if "\t" in line else line.split()
        if not parts or not line.strip():
            continue
        if len(parts) < 3 or not parts[-1].strip().lstrip("-").isdigit():
            if number == 1:
                continue  # header
            raise ValidationFailed(f"{path}:{number}: expected query-id, corpus-id, score", field=str(path))
        qrels.setdefault(parts[0], {})[parts[1]] = int(parts[-1])
    return qrels


def load_beir(path: Path, *, split: str = "test", max_queries: int | None = None) -> BeirDataset:
    """Read a BEIR folder; only queries with at least one relevant document in ``split`` are kept."""
    path = Path(path)
    corpus = {
        str(row["_id"]): BeirDocument(
            str(row["_id"]), str(row.get("title") or ""), str(row.get("text") or "")
        )
        for row in _jsonl(path / "corpus.jsonl")
    }
    all_queries = {str(row["_id"]): str(row.get("text") or "") for row in _jsonl(path / "queries.jsonl")}
    qrels = load_qrels(path / "qrels" / f"{split}.tsv")
    judged = [q for q, rels in qrels.items() if q in all_queries and any(s > 0 for s in rels.values())]
    if max_queries is not None:
        judged = judged[:max_queries]
    if not corpus or not judged:
        raise ValidationFailed(f"{path}: empty corpus or no judged {split} queries", field="dataset")
    return BeirDataset(
        name=path.name,
        path=path,
        split=split,
        corpus=corpus,
        queries={q: all_queries[q] for q in judged},
        qrels={q: qrels[q] for q in judged},
    )


def pairs_from_beir(dataset: BeirDataset, *, with_title: bool = False) -> list[TrainingPair]:
    """(query, relevant document) pairs of the dataset's split, for ``ragbot train-reranker``."""
    pairs = []
    for qid, rels in dataset.qrels.items():
        for doc_id, score in rels.items():
            doc = dataset.corpus.get(doc_id)
            if score > 0 and doc is not None and doc.text.strip():
                text = f"{doc.title}\n{doc.text}" if with_title and doc.title else doc.text
                pairs.append(TrainingPair(query=dataset.queries[qid], positive=text))
    return pairs


def corpus_texts(dataset: BeirDataset, *, with_title: bool = False) -> list[str]:
    """Every document's text (optionally title first): the pool BM25 mines hard negatives from."""
    return [
        f"{d.title}\n{d.text}" if with_title and d.title else d.text
        for d in dataset.corpus.values()
        if d.text.strip()
    ]


# -- metrics ------------------------------------------------------------------------------------


def ndcg_at_k(ranked: Sequence[str], relevant: Mapping[str, int], k: int) -> float:
    """nDCG@k with linear gains (trec_eval's ``ndcg_cut``, as BEIR reports it)."""
    dcg = sum(max(relevant.get(d, 0), 0) / math.log2(i + 2) for i, d in enumerate(ranked[:k]))
    ideal = sorted((g for g in relevant.values() if g > 0), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg if idcg > 0 else 0.0


def recall_at_k(ranked: Sequence[str], relevant: Mapping[str, int], k: int) -> float:
    """Share of the relevant documents found in the top k."""
    wanted = {d for d, g in relevant.items() if g > 0}
    if not wanted:
        return 0.0
    return len(wanted.intersection(ranked[:k])) / len(wanted)


def mrr_at_k(ranked: Sequence[str], relevant: Mapping[str, int], k: int) -> float:
    """Reciprocal rank of the first relevant document in the top k (0 when none)."""
    for i, d in enumerate(ranked[:k]):
        if relevant.get(d, 0) > 0:
            return 1.0 / (i + 1)
    return 0.0


def score_run(run: Mapping[str, Sequence[str]], qrels: Mapping[str, Mapping[str, int]]) -> dict[str, float]:
    """Mean nDCG@10, recall@10, recall@100 and MRR@10 over the judged queries (missing runs score 0)."""
    if not qrels:
        return dict.fromkeys(METRICS, 0.0)
    totals = dict.fromkeys(METRICS, 0.0)
    for qid, relevant in qrels.items():
        ranked = list(dict.fromkeys(run.get(qid, ())))
        totals["ndcg@10"] += ndcg_at_k(ranked, relevant, 10)
        totals["recall@10"] += recall_at_k(ranked, relevant, 10)
        totals["recall@100"] += recall_at_k(ranked, relevant, 100)
        totals["mrr@10"] += mrr_at_k(ranked, relevant, 10)
    return {name: value / len(qrels) for name, value in totals.items()}


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) by linear interpolation; 0 for no values."""
    if not values:
        return 0.0
    return float(np.percentile(np.asarray(values, dtype=np.float64), q))


def latency_summary(ms: Sequence[float]) -> dict[str, float]:
    """p50, p95 and mean of per-query latencies in milliseconds."""
    return {
        "p50": round(percentile(ms, 50), 2),
        "p95": round(percentile(ms, 95), 2),
        "mean": round(statistics.fmean(ms), 2) if ms else 0.0,
    }


# -- configurations -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EvalConfig:
    """One way of retrieving: what the request sets; None leaves a knob to the engine's default."""

    name: str
    mode: SearchMode | None
    models: dict[str, float] | None = None
    bm25_weight: float | None = None
    fusion: FusionMethod | None = None
    rrf_k: int | None = None
    rerank: bool | None = False

    def request(self, query: str, *, retrieval_size: int, pages: int) -> RetrieveRequest:
        """The retrieve request for one query: ``pages`` pages, one paragraph each."""
        if not 1 <= pages <= MAX_PAGES:
            raise ValidationFailed(f"pages must be 1..{MAX_PAGES}, got {pages}", field="pages")
        return RetrieveRequest(
            query=query,
            retrieval_size=retrieval_size,
            paragraphs_per_page=[1] * pages,
            mode=self.mode,
            models=self.models,
            bm25_weight=self.bm25_weight,
            fusion=self.fusion,
            rrf_k=self.rrf_k,
            rerank=self.rerank,
        )


def standard_configs(model_names: Sequence[str], *, with_rerank: bool) -> list[EvalConfig]:
    """BM25, each dense model alone, hybrid (every model + BM25), hybrid + rerank, and "default": a
    request that sets nothing, i.e. the configured defaults (with the reranker when one is given)."""
    configs = [EvalConfig("bm25", "lexical")]
    configs += [EvalConfig(f"dense:{m}", "semantic", models={m: 1.0}) for m in model_names]
    configs.append(EvalConfig("hybrid", "hybrid"))
    if with_rerank:
        configs.append(EvalConfig("hybrid+rerank", "hybrid", rerank=True))
    configs.append(EvalConfig("default", None, rerank=None))
    return configs


# -- the definition and pages -------------------------------------------------------------------


def eval_definition(base: DocumentDefinition, models: Sequence[str] | None = None) -> DocumentDefinition:
    """The configured definition restricted to ``models`` (all when None); it must save title and content."""
    chosen = list(models) if models else list(base.model_names)
    unknown = [m for m in chosen if m not in base.models]
    if unknown:
        raise ConfigurationError(f"model(s) {unknown} are not in the document definition {list(base.models)}")
    for name in ("title", "content"):
        if base.saved_fields.get(name) != "text":
            raise ConfigurationError(
                f"evaluation needs a text field {name!r} in the definition's saved_fields"
            )
    return parse_definition(
        {
            "identifier_field": base.identifier_field,
            "saved_fields": dict(base.saved_fields),
            "field_for_llm": base.field_for_llm,
            "models": {m: list(base.models[m]) for m in chosen},
        },
        origin="evaluation definition",
    )


def beir_page(doc: BeirDocument, page_id: int) -> Page:
    """A corpus document as the one page it becomes (revision 1)."""
    return Page(page_id=page_id, revision_id=1, title=doc.title, content=doc.text, source="file")


def page_ids(dataset: BeirDataset) -> dict[int, str]:
    """page id -> corpus id: the document's position in the corpus, from 1 (stable across runs)."""
    return {i: doc_id for i, doc_id in enumerate(dataset.corpus, start=1)}


# -- the vector cache ---------------------------------------------------------------------------


class VectorCache:
    """An ``Embedder`` that remembers every vector it computed in a file (evaluation only).

    Keys are SHA-1 of (kind, text); the file is ``<model name>.npz`` under the cache folder
    (``<model name>-<precision>.npz`` when the model runs in bfloat16 or float16) and is written by
    ``flush``. Token counting and everything else go to the wrapped model.
    """

    def __init__(self, inner: Embedder, *, folder: Path) -> None:
        self.inner = inner
        self.name = inner.name
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in inner.name)
        self.path = Path(folder) / f"{safe}.npz"
        self._rows: dict[bytes, Vector] = {}
        self._dirty = False
        self._loaded = False
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    @property
    def dimension(self) -> int:
        """The wrapped model's vector size."""
        return self.inner.dimension

    @property
    def max_tokens(self) -> int:
        """The wrapped model's input limit."""
        return self.inner.max_tokens

    def warm_up(self) -> None:
        """Load the wrapped model and the cached vectors."""
        self.inner.warm_up()
        with self._lock:
            if self._loaded:
                return
            precision = str(getattr(self.inner, "resolved_precision", "") or "float32")
            if precision != "float32":  # other vectors than float32's: a file of their own
                self.path = self.path.with_name(f"{self.path.stem}-{precision}.npz")
            if self.path.is_file():
                with np.load(self.path) as data:
                    keys, vectors = data["keys"], data["vectors"]
                if vectors.ndim == 2 and vectors.shape[1] == self.inner.dimension:
                    self._rows = {bytes(k): vectors[i] for i, k in enumerate(keys)}
                else:
                    logger.warning(
                        "ignoring %s: its vectors do not have %d dimensions", self.path, self.dimension
                    )
            self._loaded = True

    def count_tokens(self, text: str) -> int:
        """The wrapped model's token count."""
        return self.inner.count_tokens(text)

    def embed_queries(self, texts: Sequence[str]) -> Vector:
        """Query vectors, from the file where present."""
        return self._embed("q", texts, self.inner.embed_queries)

    def embed_passages(self, texts: Sequence[str]) -> Vector:
        """Passage vectors, from the file where present."""
        return self._embed("p", texts, self.inner.embed_passages)

    def _embed(self, kind: str, texts: Sequence[str], compute: Callable[[Sequence[str]], Vector]) -> Vector:
        keys = [hashlib.sha1(f"{kind}\x00{t}".encode()).digest() for t in texts]
        with self._lock:
            missing = list(dict.fromkeys(t for t, k in zip(texts, keys, strict=True) if k not in self._rows))
        if missing:
            fresh = compute(missing)
            with self._lock:
                for text, row in zip(missing, fresh, strict=True):
                    self._rows[hashlib.sha1(f"{kind}\x00{text}".encode()).digest()] = np.asarray(
                        row, dtype=np.float32
                    )
                self._dirty = True
        with self._lock:
            self.misses += len(missing)
            self.hits += len(texts) - len(missing)
            if not texts:
                return np.zeros((0, self.dimension), dtype=np.float32)
            out: Vector = np.stack([self._rows[k] for k in keys]).astype(np.float32, copy=False)
        return out

    def flush(self) -> None:
        """Write the cache file if anything new was computed (atomically)."""
        with self._lock:
            if not self._dirty:
                return
            keys = list(self._rows)
            vectors = np.stack([self._rows[k] for k in keys]) if keys else np.zeros((0, 0), np.float32)
            self._dirty = False
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, suffix=".npz")
        os.close(fd)
        np.savez(tmp, keys=np.array(keys, dtype="S20"), vectors=vectors)
        os.replace(tmp, self.path)

    def close(self) -> None:
        """Write the cache, then free the wrapped model."""
        self.flush()
        self.inner.close()


# -- indexing and running -----------------------------------------------------------------------


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
    show_progress: bool = False,
) -> IndexStats:
    """Index every document as one page through the worker's path (split, embed, replace_page)."""
    import asyncio

    started = time.perf_counter()
    paragraphs = 0
    ids = page_ids(dataset)
    with _bar(len(ids), "indexing", show_progress) as bar:
        for page_id, doc_id in ids.items():
            page = beir_page(dataset.corpus[doc_id], page_id)
            if page.title.strip() or page.content.strip():
                stored = await asyncio.to_thread(
                    build_stored_paragraphs,
                    page,
                    definition=definition,
                    embedders=embedders,
                    max_tokens=max_tokens,
                )
                await store.replace_page(page_id=page_id, revision_id=1, paragraphs=stored)
                paragraphs += len(stored)
            bar.update(1)
    return IndexStats(pages=len(ids), paragraphs=paragraphs, seconds=round(time.perf_counter() - started, 1))


@dataclass(slots=True)
class ConfigResult:
    """One configuration's scores and latency (and its ranked documents per query)."""

    config: EvalConfig
    metrics: dict[str, float]
    latency_ms: dict[str, float]
    run: dict[str, list[str]] = field(default_factory=dict, repr=False)

    def to_json(self) -> dict[str, Any]:
        """The report entry (without the per-query run)."""
        return {
            "name": self.config.name,
            "request": {k: v for k, v in asdict(self.config).items() if k != "name" and v is not None},
            "metrics": {k: round(v, 4) for k, v in self.metrics.items()},
            "latency_ms": self.latency_ms,
        }


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


@dataclass(slots=True)
class EvalReport:
    """Everything ``ragbot eval`` measured, as written to the JSON report."""

    dataset: str
    split: str
    store: str
    models: list[str]
    reranker: str | None
    documents: int
    paragraphs: int
    queries: int
    index_seconds: float
    defaults: dict[str, Any]
    results: list[ConfigResult]

    def to_json(self) -> dict[str, Any]:
        """A plain-JSON dict."""
        return {
            "dataset": self.dataset,
            "split": self.split,
            "store": self.store,
            "models": self.models,
            "reranker": self.reranker,
            "documents": self.documents,
            "paragraphs": self.paragraphs,
            "queries": self.queries,
            "index_seconds": self.index_seconds,
            "defaults": self.defaults,
            "configurations": [r.to_json() for r in self.results],
        }

    def table(self) -> str:
        """A fixed-width table of every configuration's metrics and latency."""
        width = max([len("configuration"), *(len(r.config.name) for r in self.results)])
        head = f"{'configuration':<{width}}  " + "  ".join(f"{m:>10}" for m in METRICS)
        head += f"  {'p50 ms':>8}  {'p95 ms':>8}"
        lines = [head, "-" * len(head)]
        for r in self.results:
            cells = "  ".join(f"{r.metrics[m]:>10.4f}" for m in METRICS)
            lines.append(
                f"{r.config.name:<{width}}  {cells}  {r.latency_ms['p50']:>8.1f}  {r.latency_ms['p95']:>8.1f}"
            )
        return "\n".join(lines)


async def evaluate(
    dataset: BeirDataset,
    *,
    store: SearchStore,
    definition: DocumentDefinition,
    embedders: Mapping[str, Embedder],
    defaults: RetrievalDefaults,
    reranker: Reranker | None = None,
    configs: Sequence[EvalConfig] | None = None,
    max_tokens: int = 512,
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


def write_report(report: EvalReport, path: Path) -> None:
    """Write the JSON report (folders created)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report.to_json(), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def draw_chart(report: EvalReport, path: Path) -> None:
    """A grouped bar chart (PNG): one group per metric, one bar per configuration."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ConfigurationError("--chart needs matplotlib (install ragbot[charts])") from None
    names = [r.config.name for r in report.results]
    x = np.arange(len(METRICS))
    width = 0.8 / max(1, len(names))
    fig, ax = plt.subplots(figsize=(max(8.0, 1.6 * len(METRICS) + 0.5 * len(names) + 2.5), 4.5))
    for i, result in enumerate(report.results):
        values = [result.metrics[m] for m in METRICS]
        bars = ax.bar(x + (i - (len(names) - 1) / 2) * width, values, width, label=result.config.name)
        ax.bar_label(bars, fmt="%.3f", fontsize=7, rotation=90, padding=2)
    ax.set_xticks(x, list(METRICS))
    ax.set_ylim(0, 1.15)
    ax.set_ylabel("score")
    ax.set_title(f"{report.dataset} ({report.split}, {report.queries} queries, {report.store} store)")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
