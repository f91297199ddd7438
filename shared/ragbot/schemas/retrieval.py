"""Bodies of ``POST /v1/retrieve``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

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


# Ids travel as ``_id`` (kolzchut-ragbot's and Elasticsearch's name); Python code may say ``id``.
_BY_ALIAS = ConfigDict(validate_by_name=True, validate_by_alias=True, serialize_by_alias=True)


class RetrievedDocument(BaseModel):
    """A paragraph handed to the LLM: its saved fields (no vectors), id and final score.

    The fields every definition has are typed; the definition's other saved fields (``summary``,
    ``categories``...) come along as extra keys with the types the store holds.
    """

    model_config = ConfigDict(extra="allow", **_BY_ALIAS)
    id: str = Field(alias="_id", description="<page_id>-<revision_id>-<paragraph>")
    page_id: int
    score: float = Field(default=0.0, description="final score: fused, or reranked; 0 when read by page")
    title: str | None = None
    url: str | None = None
    content: str | None = Field(default=None, description="the definition's text field, when it is content")
    paragraph: int | None = Field(default=None, description="its number within the page")
    revision_id: int | None = None


class Candidate(BaseModel):
    """One paragraph a search branch found, with the branch's raw score."""

    model_config = _BY_ALIAS
    id: str = Field(alias="_id")
    score: float = Field(description="dense: cosine + 1 (0..2); bm25: the BM25 score")
    title: str | None = None
    page_id: int
    paragraph: int | None = None


class BranchDebug(BaseModel):
    """One ranked list fused: a dense (model, field) search or BM25."""

    model_config = ConfigDict(extra="allow")
    kind: Literal["dense", "bm25"] | None = None
    model: str | None = None
    field: str | None = None
    weight: float | None = None
    languages: list[str] = Field(default_factory=list, description="languages its model serves; * any")
    tuned: bool = Field(
        default=False,
        description="searched with the model's query encoder tuned on the wiki's questions (its untuned "
        "twin, searched at weight 0, keeps the cosines the answerability rule reads)",
    )
    dropped_by_threshold: int = Field(default=0, description="dense hits under paragraph_relevance_threshold")
    candidates: list[Candidate] = Field(default_factory=list)


def read_kind(branch: object) -> str | None:
    """A debug branch's kind as the chat reads scores: "dense", "bm25", or "tuned" for a dense branch
    searched with a tuned query encoder (its cosines are on another scale than those the chat's rule,
    gate and confidences were fitted on; its untuned twin is searched beside it)."""
    if not isinstance(branch, Mapping):
        return None
    kind = branch.get("kind")
    return "tuned" if branch.get("tuned") else (kind if isinstance(kind, str) else None)


# In a fused row's ``raw_scores``: what the question memory's votes added to its score
# (``ragbot.retrieval.memory``); the score less it is the search's own.
MEMORY_KEY = "memory"


class FusedRow(BaseModel):
    """A paragraph after fusion: its fused score, and its rank and raw score in each branch."""

    model_config = _BY_ALIAS
    id: str = Field(alias="_id")
    page_id: int
    score: float
    ranks: dict[str, int] = Field(default_factory=dict)
    raw_scores: dict[str, float] = Field(default_factory=dict)


class RerankScore(BaseModel):
    """The reranker's score of one fused paragraph."""

    model_config = _BY_ALIAS
    id: str = Field(alias="_id")
    page_id: int
    score: float


class RerankDebug(BaseModel):
    """What the reranker scored and how many paragraphs it kept."""

    scores: list[RerankScore]
    kept: int | None = None
    no_relevant_paragraphs: bool = False


class DetectedLanguage(BaseModel):
    """The question's script and the languages it may be in (language routing)."""

    script: str
    languages: list[str]
    share: float
    letters: int


class BranchRoute(BaseModel):
    """Language routing's decision for one branch: whether it ran and why."""

    kind: str
    languages: list[str]
    ran: bool
    reason: str


class RoutingDebug(BaseModel):
    """Language routing: the detected language, the branches run and skipped, and why."""

    model_config = ConfigDict(extra="allow")
    enabled: bool
    detected: DetectedLanguage | None = None
    fallback: bool = False
    ran: list[str] = Field(default_factory=list)
    skipped: dict[str, str] = Field(default_factory=dict, description="branch -> why it did not run")
    branches: dict[str, BranchRoute] = Field(default_factory=dict)


class TranslationDebug(BaseModel):
    """An English question's content words translated into the corpus's language (one word each)."""

    model: str = Field(description="the multilingual model whose query vector averaged both")
    language: str = Field(description="the corpus language translated into")
    words: str = Field(description="the translation, in the question's word order")


class MemoryNeighbour(BaseModel):
    """A remembered question near the asked one, with the pages that answer it."""

    question: str
    pages: list[int]
    cosine: float


class UnansweredNeighbour(BaseModel):
    """The remembered question the wiki did not answer that is nearest the asked one."""

    question: str
    cosine: float


class MemoryDebug(BaseModel):
    """The question memory's view: the nearest remembered questions and each page's vote share."""

    neighbours: list[MemoryNeighbour] = Field(default_factory=list)
    shares: dict[str, float] = Field(
        default_factory=dict, description="page id -> its vote relative to the best-voted page's"
    )
    weight: float | None = Field(
        default=None,
        description="what the best-voted retrieved page's paragraphs gained, in units of the best fused "
        "score (the memory's weight, more when the nearest remembered question is very near)",
    )
    unanswered: UnansweredNeighbour | None = Field(
        default=None,
        description="the nearest remembered question the wiki did not answer (absent when the memory "
        "holds none); the chat's abstention rule reads its cosine",
    )


class RetrievalDebug(BaseModel):
    """Every stage of one retrieval: the knobs used, each branch's candidates, the fused list, rerank.

    Extra keys are allowed: the chat service notes there what it added (``current_page_error``).
    """

    model_config = ConfigDict(extra="allow")
    mode: SearchMode | None = None
    fusion: FusionMethod | None = None
    rrf_k: float | None = None
    branches: dict[str, BranchDebug] = Field(default_factory=dict, description="by branch name")
    routing: RoutingDebug | None = Field(default=None, description="None in lexical mode")
    fused: list[FusedRow] = Field(default_factory=list)
    pages: list[int] = Field(default_factory=list, description="page ids in the order of the documents")
    rerank: RerankDebug | None = None
    translation: TranslationDebug | None = Field(
        default=None, description="set when RAGBOT_RETRIEVER_TRANSLATE_QUERIES_TO translated the question"
    )
    memory: MemoryDebug | None = Field(
        default=None, description="set when RAGBOT_RETRIEVER_QUESTION_MEMORY_PATH names a question memory"
    )


class PageDocuments(BaseModel):
    """``GET /v1/pages/{page_id}``: every indexed paragraph of one page, in paragraph order (score 0)."""

    page_id: int
    documents: list[RetrievedDocument]


class RetrieveResponse(BaseModel):
    """Documents, the debug view of every stage, and per-stage timings."""

    documents: list[RetrievedDocument]
    debug: RetrievalDebug
    timings_ms: dict[str, float] = Field(description="per stage: embed, dense, bm25, fusion, rerank, total")
