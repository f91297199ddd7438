"""Bodies of ``POST /v1/retrieve``."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator

from ragbot.text.clean import strip_unsafe

SearchMode = Literal["semantic", "lexical", "hybrid"]
FusionMethod = Literal["rrf", "page_rrf", "score"]
FilterValue = str | int | float | bool | list[str | int | float | bool]

# Pages back, and at most this many paragraphs from each (kolzchut-ragbot's default): the API's and chat's.
DEFAULT_PARAGRAPHS_PER_PAGE: tuple[int, ...] = (3, 2, 1)


class RetrieveRequest(BaseModel):
    """A retrieval request; semantics follow kolzchut-ragbot's ``retrieve_documents``."""

    query: str = Field(min_length=1, max_length=2000)
    retrieval_size: int = Field(default=50, ge=1, le=1000, description="candidates per branch")
    paragraphs_per_page: list[int] = Field(
        default_factory=lambda: list(DEFAULT_PARAGRAPHS_PER_PAGE),
        min_length=1,
        max_length=100,
        description="pages back, and at most this many paragraphs from each",
    )
    paragraph_relevance_threshold: float = Field(default=0.0, ge=0.0)
    models: dict[str, float] | None = Field(default=None, description="dense models and their weights")
    bm25_weight: float | None = Field(default=None, ge=0.0)
    mode: SearchMode | None = None
    fusion: FusionMethod | None = None
    rrf_k: int | None = Field(default=None, ge=1, le=10000)
    rerank: bool | None = None
    filters: dict[str, FilterValue] | None = None

    @field_validator("query")
    @classmethod
    def _not_blank(cls, v: str) -> str:
        v = strip_unsafe(v)  # NUL, controls and bidi overrides never reach a model or a store
        if not v.strip():
            raise ValueError("query must not be blank (control and bidi-override characters are removed)")
        return v

    @field_validator("paragraphs_per_page")
    @classmethod
    def _positive(cls, v: list[int]) -> list[int]:
        if any(n < 1 for n in v):
            raise ValueError("every entry of paragraphs_per_page must be >= 1")
        return v

    @field_validator("models")
    @classmethod
    def _weights(cls, v: dict[str, float] | None) -> dict[str, float] | None:
        if v is not None and any(w < 0 for w in v.values()):
            raise ValueError("model weights must be >= 0")
        return v


class RetrievedDocument(BaseModel):
    """A paragraph handed to the LLM: its saved fields (no vectors), id and scores."""

    model_config = {"extra": "allow"}
    id: str = Field(alias="_id")
    page_id: int
    score: float = 0.0


class PageDocuments(BaseModel):
    """``GET /v1/pages/{page_id}``: every indexed paragraph of one page, in paragraph order (score 0)."""

    page_id: int
    documents: list[RetrievedDocument]


class RetrieveResponse(BaseModel):
    """Documents, the debug view of every stage, and per-stage timings."""

    documents: list[dict[str, Any]]
    debug: dict[str, Any]
    timings_ms: dict[str, float]
