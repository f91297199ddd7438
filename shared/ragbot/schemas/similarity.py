"""Bodies of ``POST /v1/similarity``: how close short texts (answer sentences) are to a query."""

from __future__ import annotations

from typing import Final

from pydantic import BaseModel, Field, field_validator

from ragbot.text.clean import strip_unsafe

MAX_SIMILARITY_TEXTS: Final = 256
MAX_SIMILARITY_TEXT_CHARS: Final = 2000


class SimilarityRequest(BaseModel):
    """A query and the texts to score against it with one of the retriever's loaded models."""

    query: str = Field(min_length=1, max_length=2000)
    texts: list[str] = Field(min_length=1, max_length=MAX_SIMILARITY_TEXTS)
    model: str | None = Field(
        default=None, description="a dense model of the definition (empty: multilingual-e5-small if loaded)"
    )
    vectors: bool = Field(
        default=False,
        description="also send the unit vectors of the query and the texts (the chat's abstention gate)",
    )

    @field_validator("query")
    @classmethod
    def _not_blank(cls, v: str) -> str:
        v = strip_unsafe(v)
        if not v.strip():
            raise ValueError("query must not be blank (control and bidi-override characters are removed)")
        return v

    @field_validator("texts")
    @classmethod
    def _short(cls, v: list[str]) -> list[str]:
        if any(len(t) > MAX_SIMILARITY_TEXT_CHARS for t in v):
            raise ValueError(f"every text must be at most {MAX_SIMILARITY_TEXT_CHARS} characters")
        return [strip_unsafe(t) for t in v]


class SimilarityResponse(BaseModel):
    """One cosine (-1..1) per text, in the order sent, and the model that computed them; with
    ``vectors`` asked, the unit vectors they came from."""

    model: str
    scores: list[float]
    query_vector: list[float] | None = None
    vectors: list[list[float]] | None = None
