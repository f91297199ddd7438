"""FastAPI dependencies: the resources the lifespan built, as ``Annotated`` aliases."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated

from fastapi import Depends, Request

from ragbot.definition import DocumentDefinition
from ragbot.http.app import app_resources
from ragbot.ports import Embedder, Reranker, SearchStore
from ragbot.retrieval import RetrievalEngine


@dataclass(slots=True)
class Resources:
    """What the retriever holds for its lifetime: the engine and the adapters behind it."""

    engine: RetrievalEngine
    store: SearchStore
    embedders: Mapping[str, Embedder]
    definition: DocumentDefinition
    reranker: Reranker | None = None
    extra: dict[str, object] = field(default_factory=dict)


def get_resources(request: Request) -> Resources:
    """The resources of this app (503 while the lifespan has not built them)."""
    return app_resources(request, Resources, starting="the retriever", dependency="retriever")


ResourcesDep = Annotated[Resources, Depends(get_resources)]


def get_engine(resources: ResourcesDep) -> RetrievalEngine:
    """The retrieval engine every search goes through."""
    return resources.engine


EngineDep = Annotated[RetrievalEngine, Depends(get_engine)]
