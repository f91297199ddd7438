"""One vector field's rows in process, and exact cosine top-k over them (the embedded store's kNN)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import numpy.typing as npt

from ragbot.stores.dense import screened_scores
from ragbot.stores.lexical import positions_of, top_positions

IntArray = npt.NDArray[np.int64]


@dataclass
class Matrix:
    """One vector field's rows: ids ascending (AUTOINCREMENT never reuses one), unit vectors, liveness.

    ``half`` is a float16 copy of ``vecs`` for the screened exact search (``ragbot.stores.dense``).
    """

    # Compact when dead rows exceed max(compact_min, a quarter of the rows).
    compact_min: ClassVar[int] = 1024

    dim: int
    ids: IntArray = field(init=False)
    vecs: npt.NDArray[np.float32] = field(init=False)
    half: npt.NDArray[np.float16] = field(init=False)
    alive: npt.NDArray[np.bool_] = field(init=False)
    size: int = 0
    dead: int = 0

    def __post_init__(self) -> None:
        self.ids = np.empty(0, dtype=np.int64)
        self.vecs = np.empty((0, self.dim), dtype=np.float32)
        self.half = np.empty((0, self.dim), dtype=np.float16)
        self.alive = np.empty(0, dtype=np.bool_)

    def append(self, ids: IntArray, vecs: npt.NDArray[np.float32]) -> None:
        """Add rows with ids above every id held, normalised to unit length."""
        n = len(ids)
        if n == 0:
            return
        if self.size + n > len(self.ids):
            # 25% headroom: the matrices are the store's biggest memory cost; growing copies them.
            cap = max(1024, (self.size + n) * 5 // 4)
            new_ids = np.empty(cap, dtype=np.int64)
            new_vecs = np.empty((cap, self.dim), dtype=np.float32)
            new_half = np.empty((cap, self.dim), dtype=np.float16)
            new_alive = np.zeros(cap, dtype=np.bool_)
            new_ids[: self.size] = self.ids[: self.size]
            new_vecs[: self.size] = self.vecs[: self.size]
            new_half[: self.size] = self.half[: self.size]
            new_alive[: self.size] = self.alive[: self.size]
            self.ids, self.vecs, self.half, self.alive = new_ids, new_vecs, new_half, new_alive
        end = self.size + n
        norms = np.linalg.norm(vecs, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        self.ids[self.size : end] = ids
        self.vecs[self.size : end] = vecs / norms
        self.half[self.size : end] = self.vecs[self.size : end]
        self.alive[self.size : end] = True
        self.size = end

    def remove(self, ids: IntArray) -> None:
        """Mark the rows dead, compacting once enough of them are."""
        pos = positions_of(self.ids[: self.size], ids)
        pos = pos[self.alive[pos]]
        self.alive[pos] = False
        self.dead += len(pos)
        if self.dead > max(self.compact_min, self.size // 4):
            keep = np.flatnonzero(self.alive[: self.size])
            self.ids, self.vecs, self.alive = self.ids[keep], self.vecs[keep], self.alive[keep]
            self.half = self.half[keep]
            self.size, self.dead = len(keep), 0

    def view(self) -> View:
        """Arrays to search without the owner's lock (appends never move rows below ``size``)."""
        n = self.size
        return self.ids[:n], self.vecs[:n], self.half[:n], self.alive[:n], self.dead


View = tuple[IntArray, npt.NDArray[np.float32], npt.NDArray[np.float16], npt.NDArray[np.bool_], int]


def top_k(
    view: View, query: npt.NDArray[np.float32], k: int, allowed: IntArray | None
) -> list[tuple[int, float]]:
    """Exact top-k (id, cosine) among live rows, optionally only among ``allowed`` ids."""
    ids, vecs, half, alive, dead = view
    if allowed is not None and len(allowed) * 4 < len(ids):
        pos = positions_of(ids, allowed)
        pos = pos[alive[pos]]
        scores = vecs[pos] @ query
        cand = ids[pos]
    else:
        mask: npt.NDArray[np.bool_] | None = alive if dead else None
        if allowed is not None:
            mask = np.zeros(len(ids), dtype=np.bool_)
            mask[positions_of(ids, allowed)] = True
            mask &= alive
        pos, scores = screened_scores(vecs, half, query, k, mask)
        cand = ids[pos]
    finite = np.flatnonzero(np.isfinite(scores))
    if len(finite) < len(scores):
        scores, cand = scores[finite], cand[finite]
    return [(int(cand[i]), float(scores[i])) for i in top_positions(scores, cand, k)]
