"""A learned gate on the abstention rule: how likely a paragraph answers the question, from e5 vectors.

The rule of ``ragbot.chat.answerability`` reads scores (cosines, gaps, key terms). Questions from the
pages' own field that the pages do not answer score like answerable ones there. The gate reads the
vectors themselves: for each numbered paragraph, a logistic regression over the element-wise product
and absolute difference of the question's and the paragraph's unit vectors (what each dimension of the
model agrees and disagrees on), plus their cosine, the retriever's fused score, its share of the best,
the paragraph's rank and whether the question is in another language than the paragraphs. It was fitted
(``bench/answers/pair_gate.py``) on the Kol-Zchut question sets already read, a paragraph labelled by
whether its page answers the question. A turn the rule answers still abstains when the best paragraph's
probability is under the language pair's threshold.

The vectors come from the retriever's own model (``POST /v1/similarity`` with ``vectors``); the gate
says nothing (None) when the retriever cannot send them or sends another model's.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ragbot.chat.retriever import Retriever
from ragbot.errors import ConfigurationError, DependencyUnavailable, ValidationFailed
from ragbot.prompts import PromptDocument
from ragbot.schemas.similarity import MAX_SIMILARITY_TEXT_CHARS, MAX_SIMILARITY_TEXTS, SimilarityRequest
from ragbot.settings import ChatSettings

__all__ = [
    "LANGUAGE_PAIRS",
    "PACKAGED_GATE",
    "TUNED_PAIR",
    "PairGate",
    "best_probability",
    "configured_gate",
    "features",
    "load_gate",
    "paragraph_features",
]

PACKAGED_GATE = Path(__file__).with_name("pair_gate.json")
# A threshold's key: the question in the paragraphs' language, or in another one.
LANGUAGE_PAIRS = ("same_language", "cross_language")
# The key of a cross-language turn whose retrieval also searched a tuned query encoder's list
# (``ragbot.retrieval.tuned``): its own threshold when the file has one (bench/answers/tuned_gate.py).
TUNED_PAIR = "cross_language_tuned"
SCALARS = ("cosine", "score", "score_share", "rank", "cross_language")


def features(
    query: np.ndarray, vectors: np.ndarray, scores: Sequence[float], *, cross_language: bool
) -> np.ndarray:
    """One row per paragraph: ``q * p``, ``|q - p|``, then ``SCALARS`` (the rank counts from 0)."""
    q = np.asarray(query, dtype=np.float64).reshape(1, -1)
    p = np.asarray(vectors, dtype=np.float64).reshape(len(scores), -1)
    s = np.asarray(scores, dtype=np.float64)
    top = s[0] if len(s) and s[0] != 0 else 1.0
    scalars = np.column_stack(
        [p @ q[0], s, s / top, np.arange(len(s), dtype=np.float64), np.full(len(s), float(cross_language))]
    )
    result: np.ndarray = np.hstack([q * p, np.abs(q - p), scalars])
    return result


@dataclass(frozen=True, slots=True)
class PairGate:
    """Weights in raw feature units, the bias, each language pair's threshold and the model they need."""

    weights: np.ndarray
    bias: float
    thresholds: dict[str, float]
    model: str

    def probabilities(self, x: np.ndarray) -> np.ndarray:
        """The probability that each row's paragraph is on a page answering the question."""
        z = np.clip(np.asarray(x, dtype=np.float64) @ self.weights + self.bias, -50.0, 50.0)
        result: np.ndarray = 1.0 / (1.0 + np.exp(-z))
        return result

    def threshold(self, cross_language: bool, *, tuned: bool = False) -> float:
        """The pair's threshold (none given: never abstains); a cross-language turn that searched a tuned
        list reads ``TUNED_PAIR``'s when the file has one."""
        if cross_language and tuned and TUNED_PAIR in self.thresholds:
            return self.thresholds[TUNED_PAIR]
        return self.thresholds.get(LANGUAGE_PAIRS[int(cross_language)], -math.inf)

    def as_json(self) -> dict[str, Any]:
        """The file ``load_gate`` reads."""
        return {
            "model": self.model,
            "bias": round(self.bias, 8),
            "thresholds": {k: round(v, 6) for k, v in self.thresholds.items()},
            "weights": [round(float(w), 8) for w in self.weights],
        }


@functools.cache
def load_gate(path: Path = PACKAGED_GATE) -> PairGate:
    """The gate of a JSON file (``as_json``'s shape), read once per path."""
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
        return PairGate(
            weights=np.asarray(raw["weights"], dtype=np.float64),
            bias=float(raw["bias"]),
            thresholds={str(k): float(v) for k, v in raw["thresholds"].items()},
            model=str(raw["model"]),
        )
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigurationError(
            f"abstention_gate_path: {path} is not a pair gate ({exc}); "
            "fit one with bench/answers/pair_gate.py, or set abstention_gate_enabled=false"
        ) from exc


def configured_gate(settings: ChatSettings) -> PairGate | None:
    """The gate the settings ask for (the shipped file unless ``abstention_gate_path``), or None when
    it or abstention is off; the chat service calls it at start, so a broken file stops the start."""
    if not (settings.abstention_enabled and settings.abstention_gate_enabled):
        return None
    return load_gate(settings.abstention_gate_path or PACKAGED_GATE)


async def paragraph_features(
    *,
    retriever: Retriever,
    model: str,
    question: str,
    texts: Sequence[str],
    scores: Sequence[float],
    cross_language: bool,
) -> np.ndarray | None:
    """``features`` of the paragraphs ``texts`` (cut to the similarity API's limits), from one ``POST
    /v1/similarity`` with vectors; None when there is no paragraph, one is blank, or the retriever cannot
    send ``model``'s vectors. The chat's gate and its fit (``bench/answers/pair_gate.py``) both read it."""
    sent = [t[:MAX_SIMILARITY_TEXT_CHARS] for t in texts][:MAX_SIMILARITY_TEXTS]
    if not sent or not all(t.strip() for t in sent):
        return None
    try:
        response = await retriever.similarity(
            SimilarityRequest(query=question, texts=sent, model=model, vectors=True)
        )
    except (DependencyUnavailable, ValidationFailed):
        return None
    if response.model != model or response.query_vector is None or response.vectors is None:
        return None
    return features(
        np.asarray(response.query_vector),
        np.asarray(response.vectors),
        list(scores)[: len(sent)],
        cross_language=cross_language,
    )


async def best_probability(
    *,
    retriever: Retriever,
    gate: PairGate,
    question: str,
    documents: Sequence[PromptDocument],
    scores: Sequence[float],
    cross_language: bool,
) -> float | None:
    """The best numbered paragraph's probability; None when ``paragraph_features`` has none, or they are
    not as wide as the gate's weights."""
    x = await paragraph_features(
        retriever=retriever,
        model=gate.model,
        question=question,
        texts=[d.text or d.title for d in documents],
        scores=scores,
        cross_language=cross_language,
    )
    if x is None or x.shape[1] != len(gate.weights):
        return None
    return float(gate.probabilities(x).max())
