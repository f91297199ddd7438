"""The float16 screen with float32 rescoring returns exactly the float32 search's top k."""

from __future__ import annotations

import numpy as np
import pytest

from ragbot.stores.dense import SCREEN_ERROR, SCREEN_MIN_ROWS, screen_available, screened_scores
from ragbot.stores.lexical import top_positions


def _unit(rows: np.ndarray) -> np.ndarray:
    unit: np.ndarray = (rows / np.linalg.norm(rows, axis=-1, keepdims=True)).astype(np.float32)
    return unit


def _exact_top(vecs: np.ndarray, query: np.ndarray, k: int, mask: np.ndarray | None) -> list[int]:
    scores = vecs @ query
    ids = np.arange(len(vecs), dtype=np.int64)
    if mask is not None:
        scores, ids = scores[mask], ids[mask]
    return [int(ids[i]) for i in top_positions(scores, ids, k)]


def _screened_top(vecs: np.ndarray, query: np.ndarray, k: int, mask: np.ndarray | None) -> list[int]:
    positions, scores = screened_scores(vecs, vecs.astype(np.float16), query, k, mask)
    return [int(positions[i]) for i in top_positions(scores, positions, k)]


@pytest.mark.parametrize("kind", ["clustered", "positive", "near_duplicates"])
def test_screened_top_k_equals_exact_top_k(kind: str) -> None:
    assert screen_available()
    rng = np.random.default_rng(3)
    n = SCREEN_MIN_ROWS + 5000
    if kind == "clustered":  # one shared direction, as real embeddings have
        vecs = _unit(rng.standard_normal((n, 384)) + 0.6 * rng.standard_normal((1, 384)))
    elif kind == "positive":  # every product positive: the worst case for rounding errors
        vecs = _unit(np.abs(rng.standard_normal((n, 384))))
    else:  # many rows within float16's error of each other
        base = rng.standard_normal((1, 384))
        vecs = _unit(base + 1e-3 * rng.standard_normal((n, 384)))
    for i in range(8):
        query = _unit(vecs[i * 7] + 0.5 * rng.standard_normal(384))
        mask = rng.random(n) > 0.3 if i % 3 == 0 else None
        for k in (1, 10, 50):
            assert _screened_top(vecs, query, k, mask) == _exact_top(vecs, query, k, mask)


def test_screen_errors_stay_inside_the_bound() -> None:
    rng = np.random.default_rng(5)
    vecs = _unit(np.abs(rng.standard_normal((SCREEN_MIN_ROWS, 384))))
    query = _unit(np.abs(rng.standard_normal(384)))
    import torch

    approx = (torch.from_numpy(vecs.astype(np.float16)) @ torch.from_numpy(query.astype(np.float16))).float()
    error = np.abs(approx.numpy() - vecs.astype(np.float64) @ query.astype(np.float64)).max()
    assert error < SCREEN_ERROR / 2


def test_screen_keeps_few_rows_and_honours_the_mask() -> None:
    rng = np.random.default_rng(9)
    n = SCREEN_MIN_ROWS * 2
    vecs = _unit(rng.standard_normal((n, 384)))
    query = vecs[17]
    mask = np.ones(n, dtype=np.bool_)
    mask[17] = False  # the best row is excluded
    positions, scores = screened_scores(vecs, vecs.astype(np.float16), query, 10, mask)
    assert 17 not in positions.tolist()
    assert 10 <= len(positions) < 1000  # rescoring touches a band, not the matrix
    assert scores.dtype == np.float32


def test_small_matrices_and_fewer_live_rows_than_k_are_scored_exactly() -> None:
    rng = np.random.default_rng(1)
    vecs = _unit(rng.standard_normal((100, 8)))
    positions, scores = screened_scores(vecs, vecs.astype(np.float16), vecs[0], 5, None)
    assert len(positions) == 100
    np.testing.assert_allclose(scores, vecs @ vecs[0], rtol=1e-6)
    big = _unit(rng.standard_normal((SCREEN_MIN_ROWS, 8)))
    mask = np.zeros(len(big), dtype=np.bool_)
    mask[:3] = True
    positions, _ = screened_scores(big, big.astype(np.float16), big[0], 5, mask)
    assert positions.tolist() == [0, 1, 2]


def test_a_small_matrix_never_imports_torch() -> None:
    """torch's first import takes seconds: a small store's first query must not pay it (fuzzing found a
    10 s first kNN, past the store timeout)."""
    from ragbot.stores import dense

    dense._torch.cache_clear()
    vecs = _unit(np.random.default_rng(1).normal(size=(50, 8)))
    screened_scores(vecs, vecs.astype(np.float16), vecs[0], 5, None)
    assert dense._torch.cache_info().misses == 0
