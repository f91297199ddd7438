"""FastAPI dependencies: what the lifespan built, as ``Annotated`` aliases."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request

from ragbot.errors import DependencyUnavailable
from ragbot.http.app import app_resources
from ragbot.messaging.reconcile_trigger import ReconcileTrigger
from ragbot.messaging.reindex import WikiLister
from ragbot.ports import SearchStore
from ragbot.settings import IngestSettings
from ragbot_ingest.service.ports import CommandSender, JobRepository, UploadIds


@dataclass(slots=True)
class Resources:
    """What ingest holds for its lifetime."""

    settings: IngestSettings
    jobs: JobRepository
    sender: CommandSender
    store: SearchStore | None = None
    uploads: UploadIds | None = None
    lister: WikiLister | None = None
    trigger: ReconcileTrigger | None = None  # one reconcile per burst of delete pings


def get_resources(request: Request) -> Resources:
    """The resources of this app (503 while the lifespan has not built them)."""
    return app_resources(request, Resources, starting="ingest", dependency="ingest")


ResourcesDep = Annotated[Resources, Depends(get_resources)]


def get_settings(resources: ResourcesDep) -> IngestSettings:
    """Ingest settings (allow-list, caps)."""
    return resources.settings


def get_jobs(resources: ResourcesDep) -> JobRepository:
    """The job records."""
    return resources.jobs


def get_sender(resources: ResourcesDep) -> CommandSender:
    """The command sender."""
    return resources.sender


def get_store(resources: ResourcesDep) -> SearchStore:
    """The search store, read for page state (503 when ingest could not open it)."""
    if resources.store is None:
        raise DependencyUnavailable("ingest has no search store configured", dependency="store")
    return resources.store


def get_upload_ids(resources: ResourcesDep) -> UploadIds:
    """The upload key -> page id registry (503 when ingest has none)."""
    if resources.uploads is None:
        raise DependencyUnavailable("ingest has no upload id registry configured", dependency="redis")
    return resources.uploads


def get_lister(resources: ResourcesDep) -> WikiLister:
    """The wiki listing reader (allow-listed hosts, caps and timeouts from the settings)."""
    if resources.lister is not None:
        return resources.lister
    settings = resources.settings
    return WikiLister(
        allowed_hosts=settings.allowed_callback_hosts,
        timeout_s=settings.fetch_timeout_s,
        max_pages=settings.max_reindex_pages,
    )


SettingsDep = Annotated[IngestSettings, Depends(get_settings)]
JobsDep = Annotated[JobRepository, Depends(get_jobs)]
SenderDep = Annotated[CommandSender, Depends(get_sender)]
StoreDep = Annotated[SearchStore, Depends(get_store)]
UploadIdsDep = Annotated[UploadIds, Depends(get_upload_ids)]
ListerDep = Annotated[WikiLister, Depends(get_lister)]
