"""Cosines between a query and short texts with a loaded dense model: how chat's ``quote`` mode ranks
the sentences of the retrieved paragraphs without a model of its own.

The query is embedded as a query and each text as a passage (the asymmetric use the retrieval models
were trained for: "which passage answers this question"), both L2-normalised, so a score is their dot
product. Without a model named, ``multilingual-e5-small`` answers when it is loaded (it reads Hebrew
and English, and a question in one against sentences in the other), else the definition's first model.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence

import numpy as np

from ragbot.errors import DependencyUnavailable, RagbotError, ValidationFailed
from ragbot.ports import Embedder
from ragbot.schemas.similarity import SimilarityRequest, SimilarityResponse

PREFERRED_MODEL = "multilingual-e5-small"


def choose_model(embedders: Mapping[str, Embedder], wanted: str | None) -> str:
    """The model to score with: ``wanted`` when loaded, else the preferred one, else the first."""
    if wanted:
        if wanted not in embedders:
            raise ValidationFailed(
                f"unknown model {wanted!r}; loaded models: {sorted(embedders)}", field="model"
            )
        return wanted
    if PREFERRED_MODEL in embedders:
        return PREFERRED_MODEL
    if not embedders:
        raise DependencyUnavailable("the retriever has no dense model loaded", dependency="retriever")
    return next(iter(embedders))


def embed(embedder: Embedder, query: str, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """The query's vector and one vector per text (unit length: the models normalise), float32."""
    q = np.asarray(embedder.embed_queries([query]), dtype=np.float32)[0]
    p = np.asarray(embedder.embed_passages(list(texts)), dtype=np.float32).reshape(len(texts), -1)
    return q, p


def _rounded(vector: np.ndarray) -> list[float]:
    return [round(float(v), 6) for v in vector]


async def similarity(
    *, embedders: Mapping[str, Embedder], request: SimilarityRequest, timeout_s: float
) -> SimilarityResponse:
    """Score ``request.texts`` against its query in a thread, bounded by ``timeout_s``."""
    name = choose_model(embedders, request.model)
    embedder = embedders[name]
    try:
        q, p = await asyncio.wait_for(
            asyncio.to_thread(embed, embedder, request.query, request.texts), timeout=timeout_s
        )
    except TimeoutError:
        raise DependencyUnavailable(
            f"model:{name} did not answer within {timeout_s} s", dependency=f"model:{name}"
        ) from None
    except (RagbotError, OSError, RuntimeError) as exc:
        raise DependencyUnavailable(f"model:{name} failed: {exc}", dependency=f"model:{name}") from exc
    scores = [round(float(v), 6) for v in p @ q]
    if not request.vectors:
        return SimilarityResponse(model=name, scores=scores)
    return SimilarityResponse(
        model=name, scores=scores, query_vector=_rounded(q), vectors=[_rounded(row) for row in p]
    )
