"""HTTP routes of the retriever: ``POST /v1/retrieve``, ``POST /v1/similarity``, ``GET /v1/pages/{page_id}``
and ``GET /v1/models``."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path
from pydantic import BaseModel

from ragbot.errors import NotFound
from ragbot.http.limits import RATE_LIMITED, rate_limit
from ragbot.observability.metrics import retrieval_metrics
from ragbot.retrieval.similarity import similarity
from ragbot.schemas.limits import MAX_PAGE_ID
from ragbot.schemas.retrieval import PageDocuments, RetrievedDocument, RetrieveRequest, RetrieveResponse
from ragbot.schemas.similarity import SimilarityRequest, SimilarityResponse
from ragbot_retriever.deps import EngineDep

router = APIRouter(prefix="/v1", tags=["retrieval"])


class ModelInfo(BaseModel):
    """One dense model the retriever searches."""

    name: str
    dimension: int
    vector_fields: list[str]


class ModelsResponse(BaseModel):
    """The dense models, their dimensions and vector fields."""

    models: list[ModelInfo]


@router.post(
    "/retrieve",
    response_model=RetrieveResponse,
    responses=RATE_LIMITED,
    dependencies=[rate_limit("retrieve")],
)
async def retrieve(body: RetrieveRequest, engine: EngineDep) -> RetrieveResponse:
    """Dense + BM25 retrieval, fused and grouped by page, with debug and timings (also recorded in
    ``ragbot_retrieval_stage_seconds``)."""
    response = await engine.retrieve(body)
    retrieval_metrics().observe(response.timings_ms)
    return response


@router.post(
    "/similarity",
    response_model=SimilarityResponse,
    responses=RATE_LIMITED,
    dependencies=[rate_limit("retrieve")],
)
async def score_texts(body: SimilarityRequest, engine: EngineDep) -> SimilarityResponse:
    """Cosines of short texts to a query with a loaded model (chat's ``quote`` mode ranks sentences)."""
    return await similarity(
        embedders=engine.embedders, request=body, timeout_s=engine.defaults.embed_timeout_s
    )


@router.get(
    "/pages/{page_id}",
    response_model=PageDocuments,
    responses=RATE_LIMITED,
    dependencies=[rate_limit("retrieve")],
)
async def get_page(
    page_id: Annotated[int, Path(ge=1, le=MAX_PAGE_ID, description="MediaWiki page id")], engine: EngineDep
) -> PageDocuments:
    """Every paragraph of an indexed page in order (404 when the page is not indexed)."""
    documents = await engine.page_documents(page_id)
    if not documents:
        raise NotFound(f"page {page_id} is not indexed")
    return PageDocuments(page_id=page_id, documents=[RetrievedDocument.model_validate(d) for d in documents])


@router.get("/models", response_model=ModelsResponse)
async def models(engine: EngineDep) -> ModelsResponse:
    """Which models answer, so clients can weight them by name."""
    return ModelsResponse(models=[ModelInfo.model_validate(m) for m in engine.models_info()])
