"""The embedded store's BM25 index against a plain-Python reference of the same formula."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

from ragbot.stores import lexical
from ragbot.stores.lexical import LexicalIndex, LexicalRow

FIELDS = 2
VOCAB = 40


def make_doc(rng: np.random.Generator) -> list[list[int]]:
    """Tokens per field as term ids, Zipf-ish so that some terms are everywhere."""
    weights = 1.0 / np.arange(1, VOCAB + 1)
    p = weights / weights.sum()
    return [list(rng.choice(VOCAB, size=int(rng.integers(0, 12)), p=p)) for _ in range(FIELDS)]


def row(row_id: int, doc: list[list[int]]) -> LexicalRow:
    counts: dict[int, list[int]] = {}
    for f, tokens in enumerate(doc):
        for term, tf in Counter(tokens).items():
            counts.setdefault(int(term), [0] * FIELDS)[f] = tf
    blobs = lexical.encode(list(counts), list(counts.values()), [len(t) for t in doc])
    return LexicalRow.from_blobs(row_id, *blobs, FIELDS)


def reference(
    docs: dict[int, list[list[int]]], terms: list[int], w: list[float], k: int
) -> list[tuple[int, float]]:
    n = len(docs)
    avgdl = sum(sum(w[f] * len(d[f]) for f in range(FIELDS)) for d in docs.values()) / n
    scores: dict[int, float] = {}
    for term in terms:
        tf = {i: sum(w[f] * d[f].count(term) for f in range(FIELDS)) for i, d in docs.items()}
        having = {i: t for i, t in tf.items() if t > 0}
        idf = math.log(1 + (n - len(having) + 0.5) / (len(having) + 0.5))
        for i, t in having.items():
            dl = sum(w[f] * len(docs[i][f]) for f in range(FIELDS))
            norm = lexical.K1 * (1 - lexical.B + lexical.B * dl / avgdl)
            scores[i] = scores.get(i, 0.0) + idf * t * (lexical.K1 + 1) / (t + norm)
    return sorted(scores.items(), key=lambda x: (-x[1], x[0]))[:k]


def check(index: LexicalIndex, docs: dict[int, list[list[int]]], rng: np.random.Generator) -> None:
    for _ in range(20):
        terms = [int(t) for t in rng.choice(VOCAB, size=int(rng.integers(1, 4)), replace=False)]
        w = [1.0, float(rng.choice([0.0, 1.0, 2.5]))]
        got = lexical.search(index.view(), terms=terms, weights=np.asarray(w, dtype=np.float32), k=10)
        want = reference(docs, terms, w, len(docs))
        # Same scores in the same order; float32 vs float64 may swap exact ties, so ids are
        # checked through their reference score.
        assert [s for _, s in got] == pytest.approx([s for _, s in want[:10]], rel=1e-4)
        by_id = dict(want)
        for i, score in got:
            assert by_id[i] == pytest.approx(score, rel=1e-4)


def test_built_index_matches_the_reference() -> None:
    rng = np.random.default_rng(1)
    docs = {i: make_doc(rng) for i in range(1, 200)}
    index = LexicalIndex.build([row(i, d) for i, d in docs.items()], FIELDS)
    check(index, docs, rng)


def test_patched_index_matches_the_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    """Appends (tail chunks, merged delta), removals and re-adds score like a fresh build."""
    monkeypatch.setattr(LexicalIndex, "_tail_chunks", 3)
    rng = np.random.default_rng(2)
    docs = {i: make_doc(rng) for i in range(1, 60)}
    index = LexicalIndex.build([row(i, d) for i, d in docs.items()], FIELDS)
    next_id = 60
    for step in range(30):
        gone = [int(i) for i in rng.choice(list(docs), size=3, replace=False)]
        index.remove(np.asarray(sorted(gone), dtype=np.int64))
        for i in gone:
            del docs[i]
        added = {next_id + j: make_doc(rng) for j in range(int(rng.integers(1, 6)))}
        next_id += len(added)
        index.add([row(i, d) for i, d in added.items()])
        docs.update(added)
        if step % 10 == 9:
            check(index, docs, rng)
    assert index.n_alive == len(docs)
    assert sorted(index.live_ids().tolist()) == sorted(docs)


def test_allowed_ids_restrict_the_results() -> None:
    rng = np.random.default_rng(3)
    docs = {i: make_doc(rng) for i in range(1, 100)}
    index = LexicalIndex.build([row(i, d) for i, d in docs.items()], FIELDS)
    allowed = np.asarray([5, 17, 33, 1000], dtype=np.int64)
    got = lexical.search(
        index.view(), terms=[0, 1, 2], weights=np.ones(FIELDS, dtype=np.float32), k=50, allowed=allowed
    )
    assert {i for i, _ in got} <= {5, 17, 33}


def test_empty_index_and_unknown_terms() -> None:
    index = LexicalIndex.build([], FIELDS)
    assert lexical.search(index.view(), terms=[1], weights=np.ones(FIELDS, dtype=np.float32), k=5) == []
    index.add([row(1, [[1, 1], [2]])])
    assert lexical.search(index.view(), terms=[999], weights=np.ones(FIELDS, dtype=np.float32), k=5) == []
    assert [i for i, _ in lexical.search(index.view(), terms=[1], weights=np.ones(2, np.float32), k=5)] == [1]


def test_rebuild_is_asked_for_when_patches_pile_up(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(LexicalIndex, "rebuild_min", 10)
    rng = np.random.default_rng(4)
    index = LexicalIndex.build([row(i, make_doc(rng)) for i in range(1, 40)], FIELDS)
    assert not index.needs_rebuild
    index.remove(np.arange(1, 30, dtype=np.int64))
    assert index.needs_rebuild


def test_loading_from_blobs_equals_building_from_rows() -> None:
    rng = np.random.default_rng(5)
    docs = {i: make_doc(rng) for i in range(1, 80)}
    rows = [row(i, d) for i, d in docs.items()]
    blobs = [(r.row_id, r.terms.tobytes(), r.tfs.tobytes(), r.lengths.astype("<u4").tobytes()) for r in rows]
    built, loaded = LexicalIndex.build(rows, FIELDS), LexicalIndex.from_blobs(blobs, FIELDS)
    for name in ("ids", "lengths", "offsets", "docs", "tfs"):
        np.testing.assert_array_equal(
            getattr(built, name)[: built.size if name in ("ids", "lengths") else None],
            getattr(loaded, name)[: loaded.size if name in ("ids", "lengths") else None],
        )
    check(loaded, docs, rng)
    assert LexicalIndex.from_blobs([], FIELDS).size == 0
