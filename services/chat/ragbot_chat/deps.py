"""FastAPI dependencies: the resources the lifespan built, as ``Annotated`` aliases."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request

from ragbot.chat.admission import AdmissionGate
from ragbot.chat.feedback import FeedbackLog
from ragbot.chat.kolzchut import ConfigStore
from ragbot.chat.pipeline import ChatPipeline
from ragbot.chat.retriever import Retriever
from ragbot.chat.sessions import ChatStore
from ragbot.http.app import app_resources
from ragbot.http.auth import Principal, owner_of
from ragbot.ports import ChatModel
from ragbot.prompts import PromptLibrary
from ragbot.settings import ChatSettings


@dataclass(slots=True)
class Resources:
    """What the chat service holds for its lifetime."""

    settings: ChatSettings
    llm: ChatModel
    retriever: Retriever
    store: ChatStore
    feedback: FeedbackLog
    configs: ConfigStore
    prompts: PromptLibrary
    pipeline: ChatPipeline
    admission: AdmissionGate


def get_resources(request: Request) -> Resources:
    """The resources of this app (503 while the lifespan has not built them)."""
    return app_resources(request, Resources, starting="the chat service", dependency="chat")


ResourcesDep = Annotated[Resources, Depends(get_resources)]


def caller(request: Request) -> Principal:
    """Who is calling, as the route's auth dependency (which runs first) recognised it."""
    principal = getattr(request.state, "principal", None)
    if isinstance(principal, Principal):
        return principal
    return Principal(name="anonymous", scopes=frozenset(), method="disabled")


def caller_owner(request: Request) -> str:
    """What owns the conversations this caller opens (``ragbot.http.auth.owner_of``)."""
    return owner_of(caller(request))


CallerDep = Annotated[Principal, Depends(caller)]
OwnerDep = Annotated[str, Depends(caller_owner)]
