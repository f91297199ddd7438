"""In-process BM25 for the embedded store: term postings read from SQLite, scored with numpy.

SQLite keeps, per paragraph, the ids of its terms, their frequency in each text field and the
fields' lengths (``ragbot.text.analyze`` tokens). This module turns those rows into an inverted
index (CSR: term -> paragraph positions and per-field frequencies) plus a small "delta" of rows
added since, and scores a query term by term with vectorised numpy, so the cost is a few array
operations per query term instead of a per-row callback.

Scoring is Lucene's BM25 as Elasticsearch's ``combined_fields`` applies it (BM25F): for field
weights w, ``tf = sum(w_f * tf_f)``, ``dl = sum(w_f * len_f)``, ``avgdl = sum(w_f * avglen_f)``,
``idf = ln(1 + (N - n + 0.5) / (n + 0.5))`` with n the live paragraphs having the term in a
weighted field, and ``score = sum(idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl)))``,
k1 1.2, b 0.75 (Elasticsearch 8 reports the same (k1 + 1) scale). Elasticsearch stores lengths
lossily and counts deleted documents until segments merge, so scores agree closely, not to the
last digit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import numpy.typing as npt

K1 = 1.2
B = 0.75

_IDs = npt.NDArray[np.int64]
_Pos = npt.NDArray[np.int32]
_TFs = npt.NDArray[np.uint16]
_F32 = npt.NDArray[np.float32]


def positions_of(ids: _IDs, wanted: _IDs) -> _IDs:
    """Positions in the ascending ``ids`` of those ``wanted`` ids that are present."""
    if len(ids) == 0 or len(wanted) == 0:
        return np.empty(0, dtype=np.int64)
    pos = np.searchsorted(ids, wanted)
    inside = pos < len(ids)
    pos, wanted = pos[inside], wanted[inside]
    found: _IDs = pos[ids[pos] == wanted].astype(np.int64, copy=False)
    return found


@dataclass(frozen=True, slots=True)
class LexicalRow:
    """One paragraph's lexical data as stored: term ids (ascending), tf per field, field lengths."""

    row_id: int
    terms: npt.NDArray[np.uint32]
    tfs: _TFs  # shape (len(terms), fields)
    lengths: _F32  # shape (fields,)

    @classmethod
    def from_blobs(cls, row_id: int, terms: bytes, tfs: bytes, lengths: bytes, fields: int) -> LexicalRow:
        """Decode the BLOB columns written by ``encode``."""
        t = np.frombuffer(terms, dtype="<u4")
        return cls(
            row_id,
            t,
            np.frombuffer(tfs, dtype="<u2").reshape(len(t), fields),
            np.frombuffer(lengths, dtype="<u4").astype(np.float32),
        )


def encode(
    term_ids: Sequence[int], tfs: Sequence[Sequence[int]], lengths: Sequence[int]
) -> tuple[bytes, bytes, bytes]:
    """BLOBs for one paragraph: term ids ascending (uint32), tfs (uint16, capped), lengths (uint32)."""
    order = np.argsort(np.asarray(term_ids, dtype=np.int64), kind="stable")
    terms = np.asarray(term_ids, dtype="<u4")[order]
    freq = np.minimum(np.asarray(tfs, dtype=np.int64).reshape(len(term_ids), len(lengths)), 65535)
    return terms.tobytes(), freq.astype("<u2")[order].tobytes(), np.asarray(lengths, dtype="<u4").tobytes()


@dataclass(frozen=True, slots=True)
class _View:
    """A consistent snapshot for one search (arrays are shared, never resized in place)."""

    ids: _IDs
    alive: npt.NDArray[np.bool_]
    lengths: _F32
    n_alive: int
    length_sums: npt.NDArray[np.float64]
    offsets: _IDs
    docs: _Pos
    tfs: _TFs
    delta_terms: npt.NDArray[np.uint32]
    delta_docs: _Pos
    delta_tfs: _TFs
    tail: tuple[tuple[npt.NDArray[np.uint32], _Pos, _TFs], ...]


class LexicalIndex:
    """BM25 postings for the live paragraphs; rows are positions in ascending row-id order."""

    # Reload from SQLite once dead rows or unmerged delta postings pass these shares.
    rebuild_dead_share: ClassVar[float] = 0.3
    rebuild_delta_share: ClassVar[float] = 0.25
    rebuild_min: ClassVar[int] = 50_000
    _tail_chunks: ClassVar[int] = 16

    def __init__(self, fields: int) -> None:
        self.fields = fields
        self.ids: _IDs = np.empty(0, dtype=np.int64)
        self.alive = np.empty(0, dtype=np.bool_)
        self.lengths: _F32 = np.empty((0, fields), dtype=np.float32)
        self.size = 0
        self.dead = 0
        self.n_alive = 0
        self.length_sums = np.zeros(fields, dtype=np.float64)
        self.offsets: _IDs = np.zeros(1, dtype=np.int64)
        self.docs: _Pos = np.empty(0, dtype=np.int32)
        self.tfs: _TFs = np.empty((0, fields), dtype=np.uint16)
        self.delta_terms = np.empty(0, dtype=np.uint32)
        self.delta_docs: _Pos = np.empty(0, dtype=np.int32)
        self.delta_tfs: _TFs = np.empty((0, fields), dtype=np.uint16)
        self.tail: list[tuple[npt.NDArray[np.uint32], _Pos, _TFs]] = []

    @property
    def max_id(self) -> int:
        """The largest row id ever added (ids only grow: AUTOINCREMENT)."""
        return int(self.ids[self.size - 1]) if self.size else 0

    def live_ids(self) -> _IDs:
        """Row ids of the live paragraphs."""
        out: _IDs = self.ids[: self.size][self.alive[: self.size]]
        return out

    @property
    def needs_rebuild(self) -> bool:
        """True when a reload would be smaller and faster to search than patching further."""
        delta = len(self.delta_terms) + sum(len(t[0]) for t in self.tail)
        return self.dead > max(self.rebuild_min, self.rebuild_dead_share * self.size) or delta > max(
            self.rebuild_min, self.rebuild_delta_share * len(self.docs)
        )

    @classmethod
    def build(cls, rows: Sequence[LexicalRow], fields: int) -> LexicalIndex:
        """A fresh index from rows in ascending row-id order (all in the main CSR)."""
        index = cls(fields)
        index._append_docs(rows)
        if rows:
            index._set_postings(
                np.concatenate([r.terms for r in rows]).astype(np.int64),
                np.repeat(np.arange(len(rows), dtype=np.int32), [len(r.terms) for r in rows]),
                np.concatenate([r.tfs for r in rows]).reshape(-1, fields),
            )
        return index

    @classmethod
    def from_blobs(cls, rows: Sequence[tuple[int, bytes, bytes, bytes]], fields: int) -> LexicalIndex:
        """A fresh index straight from (row id, terms, tfs, lengths) BLOB rows, ascending by id."""
        index = cls(fields)
        n = len(rows)
        if n == 0:
            return index
        index.ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=n)
        index.alive = np.ones(n, dtype=np.bool_)
        index.lengths = np.frombuffer(b"".join(r[3] for r in rows), dtype="<u4").reshape(n, fields)
        index.lengths = index.lengths.astype(np.float32)
        index.size = index.n_alive = n
        index.length_sums = index.lengths.sum(axis=0, dtype=np.float64)
        counts = np.fromiter((len(r[1]) // 4 for r in rows), dtype=np.int64, count=n)
        index._set_postings(
            np.frombuffer(b"".join(r[1] for r in rows), dtype="<u4").astype(np.int64),
            np.repeat(np.arange(n, dtype=np.int32), counts),
            np.frombuffer(b"".join(r[2] for r in rows), dtype="<u2").reshape(-1, fields),
        )
        return index

    def _set_postings(self, terms: _IDs, docs: _Pos, tfs: _TFs) -> None:
        """The main CSR from every (term, row position, tfs) posting: grouped by term id."""
        order = np.argsort(terms)  # any order within a term will do
        counts = np.bincount(terms, minlength=int(terms.max(initial=0)) + 1)
        self.offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self.docs, self.tfs = docs[order], np.ascontiguousarray(tfs[order])

    def _append_docs(self, rows: Sequence[LexicalRow]) -> int:
        start, n = self.size, len(rows)
        if start + n > len(self.ids):
            cap = max(1024, 2 * (start + n))
            ids = np.empty(cap, dtype=np.int64)
            alive = np.zeros(cap, dtype=np.bool_)
            lengths = np.zeros((cap, self.fields), dtype=np.float32)
            ids[:start], alive[:start], lengths[:start] = (
                self.ids[:start],
                self.alive[:start],
                self.lengths[:start],
            )
            self.ids, self.alive, self.lengths = ids, alive, lengths
        if n:
            self.ids[start : start + n] = [r.row_id for r in rows]
            self.lengths[start : start + n] = np.stack([r.lengths for r in rows])
            self.alive[start : start + n] = True
            self.length_sums += self.lengths[start : start + n].sum(axis=0, dtype=np.float64)
        self.size += n
        self.n_alive += n
        return start

    def add(self, rows: Sequence[LexicalRow]) -> None:
        """Append rows (row ids above ``max_id``) as delta postings."""
        if not rows:
            return
        start = self._append_docs(rows)
        terms = np.concatenate([r.terms for r in rows])
        docs = np.repeat(np.arange(start, start + len(rows), dtype=np.int32), [len(r.terms) for r in rows])
        tfs = np.concatenate([r.tfs for r in rows]).reshape(-1, self.fields)
        self.tail.append((terms, docs, tfs))
        if len(self.tail) > self._tail_chunks:
            # Sort the small tail, then let timsort merge two sorted runs: linear in the delta.
            t_terms = np.concatenate([t[0] for t in self.tail])
            t_order = np.argsort(t_terms, kind="stable")
            all_terms = np.concatenate([self.delta_terms, t_terms[t_order]])
            all_docs = np.concatenate([self.delta_docs, np.concatenate([t[1] for t in self.tail])[t_order]])
            all_tfs = np.concatenate([self.delta_tfs, np.concatenate([t[2] for t in self.tail])[t_order]])
            order = np.argsort(all_terms, kind="stable")
            self.delta_terms, self.delta_docs, self.delta_tfs = (
                all_terms[order],
                all_docs[order],
                all_tfs[order],
            )
            self.tail = []

    def remove(self, ids: _IDs) -> None:
        """Mark rows dead (unknown or already dead ids are ignored)."""
        if self.size == 0 or len(ids) == 0:
            return
        pos = positions_of(self.ids[: self.size], ids)
        pos = pos[self.alive[pos]]
        if len(pos):
            self.alive[pos] = False
            self.length_sums -= self.lengths[pos].sum(axis=0, dtype=np.float64)
            self.n_alive -= len(pos)
            self.dead += len(pos)

    def view(self) -> _View:
        """A snapshot to search without holding the owner's lock."""
        n = self.size
        return _View(
            self.ids[:n],
            self.alive[:n],
            self.lengths[:n],
            self.n_alive,
            self.length_sums.copy(),
            self.offsets,
            self.docs,
            self.tfs,
            self.delta_terms,
            self.delta_docs,
            self.delta_tfs,
            tuple(self.tail),
        )


def _postings(view: _View, term: int) -> tuple[_Pos, _TFs]:
    docs: list[_Pos] = []
    tfs: list[_TFs] = []
    if term + 1 < len(view.offsets):
        a, b = int(view.offsets[term]), int(view.offsets[term + 1])
        docs.append(view.docs[a:b])
        tfs.append(view.tfs[a:b])
    lo, hi = np.searchsorted(view.delta_terms, [term, term + 1])
    if hi > lo:
        docs.append(view.delta_docs[lo:hi])
        tfs.append(view.delta_tfs[lo:hi])
    for t_terms, t_docs, t_tfs in view.tail:
        hit = t_terms == term
        if hit.any():
            docs.append(t_docs[hit])
            tfs.append(t_tfs[hit])
    if not docs:
        return np.empty(0, dtype=np.int32), np.empty((0, view.tfs.shape[1]), dtype=np.uint16)
    if len(docs) == 1:
        return docs[0], tfs[0]
    return np.concatenate(docs), np.concatenate(tfs)


def search(
    view: _View, *, terms: Sequence[int], weights: _F32, k: int, allowed: _IDs | None = None
) -> list[tuple[int, float]]:
    """Top-k (row id, BM25F score) for the query's term ids; ``allowed`` restricts to those row ids."""
    n_docs = view.n_alive
    if n_docs <= 0 or not terms:
        return []
    used = [f for f in range(len(weights)) if weights[f] > 0]
    if not used:
        return []
    avgdl = sum(float(view.length_sums[f] * weights[f]) for f in used) / n_docs or 1.0
    # Per paragraph once per query: k1 * (1 - b + b * dl / avgdl) with the weighted length.
    dl = view.lengths[:, used[0]] * weights[used[0]]
    for f in used[1:]:
        dl = dl + view.lengths[:, f] * weights[f]
    norm_all = np.float32(K1 * (1.0 - B)) + np.float32(K1 * B / avgdl) * dl
    every_field_counts = len(used) == len(weights)
    all_alive = view.n_alive == len(view.ids)
    scores = np.zeros(len(view.ids), dtype=np.float32)
    for term in terms:
        docs, tfs = _postings(view, term)
        tf = tfs[:, used[0]] * weights[used[0]]
        for f in used[1:]:
            tf = tf + tfs[:, f] * weights[f]
        # n counts live paragraphs with the term in a weighted field; dead ones and unweighted
        # fields still flow through the arithmetic (tf 0 adds 0; dead rows are zeroed below),
        # which is cheaper than compacting every posting list.
        if all_alive and every_field_counts:
            df = len(docs)
        elif every_field_counts:
            df = int(np.count_nonzero(view.alive[docs]))
        else:
            df = int(np.count_nonzero((tf > 0) & view.alive[docs]))
        if df == 0:
            continue
        idf = np.float32(np.log1p((n_docs - df + 0.5) / (df + 0.5)) * (K1 + 1.0))
        scores[docs] += idf * tf / (tf + norm_all[docs])
    if not all_alive:
        scores[~view.alive] = 0.0
    if allowed is not None:
        mask = np.zeros(len(scores), dtype=np.bool_)
        mask[positions_of(view.ids, allowed)] = True
        scores[~mask] = 0.0
    candidates = np.flatnonzero(scores > 0)
    top = top_positions(scores[candidates], view.ids[candidates], k)
    return [(int(view.ids[candidates[i]]), float(scores[candidates[i]])) for i in top]


def top_positions(scores: npt.NDArray[np.float32], ids: _IDs, k: int) -> _IDs:
    """Positions of the k best scores, ties broken by the lower id (also at the cut)."""
    if len(scores) > k:
        kth = np.partition(scores, len(scores) - k)[len(scores) - k]
        keep = np.flatnonzero(scores >= kth)  # every tie of the k-th score, then order and cut
    else:
        keep = np.arange(len(scores))
    ordered: _IDs = keep[np.lexsort((ids[keep], -scores[keep]))][:k].astype(np.int64, copy=False)
    return ordered
