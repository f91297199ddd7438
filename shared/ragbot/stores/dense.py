"""Exact top-k by cosine over a big matrix, at half the memory traffic: screen in float16, rescore exact.

An exact search reads every vector. At 100k rows x 384 dimensions that is 154 MB of float32 per
query and field, so the search is memory bound. The embedded store therefore keeps a float16 copy of
each matrix and searches in two steps (timings in docs/benchmarks.md, "Design figures"):

1. **Screen**: scores of every row from the float16 copy (torch's CPU kernels). For unit vectors
   each screened score is within ``SCREEN_ERROR`` of the exact one: rounding q and v to float16
   changes q.v by at most 2u * sum|q_i v_i| <= 2u (u = 2^-11, and sum|q_i v_i| <= |q||v| = 1), the
   float16 output adds at most u, and torch accumulates in float32 (384 terms add under 3e-5).
   Measured worst error: 3e-4 (positive-only vectors).
2. **Rescore**: every row whose screened score is within ``2 * SCREEN_ERROR`` of the k-th best
   screened score is scored again in float32 from the float32 matrix, and the top k come from
   those. A row outside that band cannot be in the exact top k (its exact score is below the
   k-th screened score minus the error, which k rows exceed), so the result is the exact search's,
   ties included. On real queries the band holds about k + 20 rows.

Small matrices (under ``SCREEN_MIN_ROWS``) and machines without torch use one float32 product.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["SCREEN_ERROR", "SCREEN_MIN_ROWS", "screen_available", "screened_scores"]

SCREEN_MIN_ROWS = 20_000
# Bound on |float16 screened score - exact score| for unit vectors: 3u (see above) is 1.47e-3;
# rounded up for the float32 accumulation and the float32 rescoring's own rounding.
SCREEN_ERROR = 2e-3


@functools.cache
def _torch() -> Any:
    try:
        import torch
    except ImportError:  # the store works without torch, at float32 speed
        return None
    return torch


def screen_available() -> bool:
    """True when the float16 screen can run (torch is importable)."""
    return _torch() is not None


def screened_scores(
    vecs: npt.NDArray[np.float32],
    half: npt.NDArray[np.float16],
    query: npt.NDArray[np.float32],
    k: int,
    mask: npt.NDArray[np.bool_] | None,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]:
    """Positions of the rows that may be in the exact top k, with their exact float32 scores.

    ``vecs`` and ``half`` hold the same unit rows; ``mask`` (when given) marks the rows that may be
    returned. Every row of the exact top k (among the masked rows) is in the result; the caller
    takes the top k of the exact scores. Rows excluded by ``mask`` never appear.
    """
    n = len(vecs)
    # Small matrices never import torch: its first import takes seconds, over a query's store timeout.
    torch = _torch() if n >= SCREEN_MIN_ROWS else None
    if torch is None:
        return _exact(vecs, query, mask)
    approx: npt.NDArray[np.float32] = (
        (torch.from_numpy(half) @ torch.from_numpy(query.astype(np.float16))).float().numpy()
    )
    if mask is not None:
        approx[~mask] = -np.inf
    live = int(np.count_nonzero(np.isfinite(approx))) if mask is not None else n
    if live <= k:
        return _exact(vecs, query, mask)
    kth = np.partition(approx, n - k)[n - k]
    positions = np.flatnonzero(approx >= kth - 2 * SCREEN_ERROR).astype(np.int64)
    return positions, vecs[positions] @ query


def _exact(
    vecs: npt.NDArray[np.float32], query: npt.NDArray[np.float32], mask: npt.NDArray[np.bool_] | None
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]:
    scores = vecs @ query
    if mask is None:
        return np.arange(len(vecs), dtype=np.int64), scores
    positions = np.flatnonzero(mask).astype(np.int64)
    return positions, scores[positions]
