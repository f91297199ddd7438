"""How far fusion alone can take the shipped definition on HeQ and SciFact: normalisations and aggregations.

The HeQ target (``heq_ndcg10_default`` >= 0.975) is not met. This bench asks whether another way of
fusing the same branch lists would meet it. It indexes each set once with the shipped definition
(``config/definition.json``), the retriever's defaults and language routing, vectors cached in
``var/eval-cache`` (``bench/retrieval/quality.py``'s ``shipped_setup``). It runs every judged query
through the retrieval engine once and keeps each branch's candidates. Then it re-fuses those lists in several
ways and scores each by nDCG@10 over pages, the way ``ragbot eval`` does:

- ``minmax``: what the retriever ships (``ragbot.retrieval.fusion.fuse_scores``);
- ``zscore``: each list standardised (mean 0, deviation 1), as OpenSearch's ``z_score`` technique;
- ``dbsf``: distribution-based score fusion (Qdrant): mean +- 3 deviations scaled to 0..1;
- ``top50``: min-max over each list's first 50 candidates only;
- ``page_sum``: a page scores its best paragraph plus 0.1 x the rest (pages with many good paragraphs).

It also prints where the gold page of each HeQ question lands under the shipped fusion. Output:
``bench/results/hebrew_fusion_variants.json`` (flat).
Run: ``uv run python -m bench.retrieval.fusion_variants``.
"""

from __future__ import annotations

import asyncio
import json
import math
import statistics
import sys
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench.retrieval.quality import SETS, data_dir, shipped_setup

ROOT = Path(__file__).resolve().parents[2]

Normaliser = Callable[[Sequence[float]], list[float]]
# One query's branches: name -> (weight, [(paragraph id, page id, raw score), ...] best first).
Branches = dict[str, tuple[float, list[tuple[str, int, float]]]]


def min_max(scores: Sequence[float]) -> list[float]:
    from ragbot.retrieval.fusion import min_max as shipped

    return shipped(scores)


def z_score(scores: Sequence[float]) -> list[float]:
    mean, sd = statistics.fmean(scores), statistics.pstdev(scores) or 1.0
    return [(s - mean) / sd for s in scores]


def dbsf(scores: Sequence[float]) -> list[float]:
    mean, sd = statistics.fmean(scores), statistics.pstdev(scores) or 1.0
    low, high = mean - 3 * sd, mean + 3 * sd
    return [(s - low) / (high - low) for s in scores]


def fused_pages(
    branches: Branches, norm: Normaliser, *, top: int | None = None, rest: float = 0.0
) -> list[int]:
    """Pages best first: paragraphs by weighted normalised scores, a page by its best (+ rest x others)."""
    paragraph: dict[str, float] = defaultdict(float)
    page_of: dict[str, int] = {}
    for weight, hits in branches.values():
        hits = hits[:top] if top else hits
        if not hits or weight == 0:
            continue
        for (doc, page, _), value in zip(hits, norm([h[2] for h in hits]), strict=True):
            paragraph[doc] += weight * value
            page_of[doc] = page
    per_page: dict[int, list[float]] = defaultdict(list)
    for doc, value in paragraph.items():
        per_page[page_of[doc]].append(value)
    score = {p: max(v) + rest * (sum(v) - max(v)) for p, v in per_page.items()}
    return sorted(score, key=lambda p: -score[p])


def ndcg10(ranked: Sequence[str], relevant: dict[str, int]) -> float:
    dcg = sum(relevant.get(d, 0) / math.log2(i + 2) for i, d in enumerate(ranked[:10]))
    ideal = sorted(relevant.values(), reverse=True)[:10]
    best = sum(r / math.log2(i + 2) for i, r in enumerate(ideal))
    return dcg / best if best else 0.0


async def candidates(folder: Path) -> tuple[dict[str, Branches], dict[int, str], dict[str, dict[str, int]]]:
    """Every judged query's branch lists under the shipped definition and defaults."""
    from ragbot.evaluation import EvalConfig
    from ragbot.evaluation.data import page_ids
    from ragbot.evaluation.run import index_dataset
    from ragbot.retrieval import RetrievalEngine

    cache = ROOT / "var" / "eval-cache"
    cache.mkdir(parents=True, exist_ok=True)
    runs: dict[str, Branches] = {}
    async with shipped_setup(folder, cache=cache, prefix="ragbot-bench-variants-") as setup:
        dataset = setup.dataset
        await index_dataset(
            dataset,
            store=setup.store,
            definition=setup.definition,
            embedders=setup.embedders,
            max_tokens=setup.worker.paragraph_tokens,
            link_targets=setup.worker.link_targets,
        )
        engine = RetrievalEngine(
            store=setup.store, embedders=setup.embedders, definition=setup.definition, defaults=setup.defaults
        )
        config = EvalConfig("default", None, rerank=None)
        for qid, text in dataset.queries.items():
            if qid not in dataset.qrels:
                continue
            result = await engine.run(config.request(text, retrieval_size=100, pages=10))
            runs[qid] = {
                b.name: (b.weight, [(h.doc_id, h.page_id, h.score) for h in result.candidates[b.name]])
                for b in result.branches
            }
    return runs, page_ids(dataset), dataset.qrels


def variants(short: str, folder: Path) -> dict[str, Any]:
    runs, doc_of, qrels = asyncio.run(candidates(folder))
    ways: dict[str, Callable[[Branches], list[int]]] = {
        "minmax": lambda b: fused_pages(b, min_max),
        "zscore": lambda b: fused_pages(b, z_score),
        "dbsf": lambda b: fused_pages(b, dbsf),
        "top50": lambda b: fused_pages(b, min_max, top=50),
        "page_sum": lambda b: fused_pages(b, min_max, rest=0.1),
    }
    out: dict[str, Any] = {f"{short}_queries": len(runs)}
    for name, way in ways.items():
        scores = [ndcg10([doc_of[p] for p in way(runs[q]) if p in doc_of], qrels[q]) for q in runs]
        out[f"{short}_ndcg10_{name}"] = round(sum(scores) / len(scores), 4)
    ranks: Counter[str] = Counter()
    for qid, branches in runs.items():
        gold = {d for d, r in qrels[qid].items() if r > 0}
        ranked = [doc_of[p] for p in fused_pages(branches, min_max) if p in doc_of]
        rank = next((i + 1 for i, d in enumerate(ranked) if d in gold), None)
        ranks[
            "1" if rank == 1 else "2_3" if rank and rank <= 3 else "4_10" if rank and rank <= 10 else "missed"
        ] += 1
    out.update({f"{short}_gold_rank_{k}": v for k, v in sorted(ranks.items())})
    return out


def main() -> None:
    data = data_dir()
    if data is None:
        raise FileNotFoundError(
            "no BEIR data (set RAGBOT_DATA_DIR to a folder holding beir/heq-test, beir/scifact)"
        )
    figures: dict[str, Any] = {}
    for short, name in SETS.items():
        figures.update(variants(short, data / "beir" / name))
    out = ROOT / "bench" / "results" / "hebrew_fusion_variants.json"
    out.write_text(json.dumps(figures, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    sys.stdout.write(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
