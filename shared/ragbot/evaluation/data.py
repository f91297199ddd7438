"""BEIR-layout data sets: corpus, queries and judgements, and each document as one ragbot page."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ragbot.errors import ConfigurationError, ValidationFailed
from ragbot.rerankers.training import TrainingPair
from ragbot.schemas.pages import Page


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


def beir_page(doc: BeirDocument, page_id: int) -> Page:
    """A corpus document as the one page it becomes (revision 1)."""
    return Page(page_id=page_id, revision_id=1, title=doc.title, content=doc.text, source="file")


def page_ids(dataset: BeirDataset) -> dict[int, str]:
    """page id -> corpus id: the document's position in the corpus, from 1 (stable across runs)."""
    return {i: doc_id for i, doc_id in enumerate(dataset.corpus, start=1)}
