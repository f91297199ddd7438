"""HTTP routes of the retriever: ``POST /v1/retrieve`` and ``GET /v1/models``."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel

from ragbot.http.limits import RATE_LIMITED, rate_limit
from ragbot.observability.metrics import retrieval_metrics
from ragbot.schemas.retrieval import RetrieveRequest, RetrieveResponse
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


@router.get("/models", response_model=ModelsResponse)
async def models(engine: EngineDep) -> ModelsResponse:
    """Which models answer, so clients can weight them by name."""
    return ModelsResponse(models=[ModelInfo.model_validate(m) for m in engine.models_info()])
