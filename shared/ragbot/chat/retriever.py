"""How chat reaches retrieval: the retriever service over HTTP, or an engine in the same process.

Both satisfy ``Retriever``. The HTTP client sends the request id of the work in progress as
``X-Request-ID`` (so one grep follows a question into the retriever) and bounds every call; a
retriever that is down, slow or answering 5xx becomes ``DependencyUnavailable("retriever")``, a 422
becomes ``ValidationFailed`` with the retriever's message.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import httpx
from pydantic import ValidationError

from ragbot.errors import DependencyUnavailable, NotFound, RagbotError, ValidationFailed
from ragbot.observability.logging import REQUEST_ID_HEADER, get_request_id
from ragbot.retrieval.engine import RetrievalEngine
from ragbot.retrieval.similarity import similarity
from ragbot.schemas.retrieval import PageDocuments, RetrieveRequest, RetrieveResponse
from ragbot.schemas.similarity import SimilarityRequest, SimilarityResponse

RETRIEVER = "retriever"


@runtime_checkable
class Retriever(Protocol):
    """Paragraphs for a query, how close sentences are to it, and which dense models answer."""

    async def retrieve(self, request: RetrieveRequest) -> RetrieveResponse:
        """``POST /v1/retrieve``."""

    async def similarity(self, request: SimilarityRequest) -> SimilarityResponse:
        """``POST /v1/similarity``."""

    async def page(self, page_id: int) -> PageDocuments:
        """``GET /v1/pages/{page_id}``: the page's paragraphs in order; ``NotFound`` when not indexed."""

    async def model_names(self) -> list[str]:
        """The dense models retrieval uses."""

    async def ping(self) -> bool:
        """True when retrieval answers."""

    async def ping_store(self) -> bool:
        """True when the search store behind retrieval answers (Elasticsearch or the embedded one)."""

    async def close(self) -> None:
        """Release connections."""


class HttpRetriever:
    """The retriever service's HTTP API."""

    def __init__(
        self,
        *,
        base_url: str,
        timeout_s: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
        api_key: str | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._client = httpx.AsyncClient(
            base_url=self.base_url,
            timeout=httpx.Timeout(timeout_s, connect=min(5.0, timeout_s)),
            transport=transport,
            headers={"Authorization": f"Bearer {api_key}"} if api_key else None,
        )

    async def _call(self, method: str, path: str, json: dict[str, Any] | None = None) -> httpx.Response:
        rid = get_request_id()
        try:
            response = await self._client.request(
                method, path, json=json, headers={REQUEST_ID_HEADER: rid} if rid else None
            )
        except httpx.TimeoutException:
            raise DependencyUnavailable(
                f"the retriever at {self.base_url} did not answer in time", dependency=RETRIEVER
            ) from None
        except httpx.HTTPError as exc:
            raise DependencyUnavailable(
                f"the retriever at {self.base_url} is unreachable: {exc or type(exc).__name__}",
                dependency=RETRIEVER,
            ) from None
        if response.status_code == 404 and method == "GET":
            raise NotFound(f"the retriever has no {path}: {_detail(response)}")
        if response.status_code == 422:
            raise ValidationFailed(f"the retriever refused the query: {_detail(response)}", field="question")
        if response.status_code >= 400:
            raise DependencyUnavailable(
                f"the retriever answered HTTP {response.status_code}: {_detail(response)}",
                dependency=RETRIEVER,
            )
        return response

    async def retrieve(self, request: RetrieveRequest) -> RetrieveResponse:
        """Documents, debug and timings for one query."""
        response = await self._call("POST", "/v1/retrieve", request.model_dump(exclude_none=True))
        try:
            return RetrieveResponse.model_validate(response.json())
        except (ValueError, ValidationError) as exc:
            raise DependencyUnavailable(
                f"the retriever sent a body that is not a RetrieveResponse: {exc}", dependency=RETRIEVER
            ) from None

    async def similarity(self, request: SimilarityRequest) -> SimilarityResponse:
        """Cosines of short texts to a query, from the retriever's loaded model."""
        response = await self._call("POST", "/v1/similarity", request.model_dump(exclude_none=True))
        try:
            return SimilarityResponse.model_validate(response.json())
        except (ValueError, ValidationError) as exc:
            raise DependencyUnavailable(
                f"the retriever sent a body that is not a SimilarityResponse: {exc}", dependency=RETRIEVER
            ) from None

    async def page(self, page_id: int) -> PageDocuments:
        """``GET /v1/pages/{page_id}``."""
        response = await self._call("GET", f"/v1/pages/{page_id}")
        try:
            return PageDocuments.model_validate(response.json())
        except (ValueError, ValidationError) as exc:
            raise DependencyUnavailable(
                f"the retriever sent a body that is not a PageDocuments: {exc}", dependency=RETRIEVER
            ) from None

    async def model_names(self) -> list[str]:
        """Names from ``GET /v1/models``."""
        response = await self._call("GET", "/v1/models")
        try:
            return [str(m["name"]) for m in response.json()["models"]]
        except (ValueError, KeyError, TypeError) as exc:
            raise DependencyUnavailable(
                f"the retriever sent bad /v1/models: {exc}", dependency=RETRIEVER
            ) from None

    async def ping(self) -> bool:
        """``GET /healthz`` answers 200."""
        try:
            response = await self._client.get("/healthz")
        except httpx.HTTPError:
            return False
        return response.status_code == 200

    async def ping_store(self) -> bool:
        """``GET /readyz`` reports its ``store`` check ready."""
        try:
            response = await self._client.get("/readyz")
            checks = response.json().get("checks", {})
        except (httpx.HTTPError, ValueError, AttributeError):
            return False
        return isinstance(checks, dict) and checks.get("store") is True

    async def close(self) -> None:
        """Close the connection pool."""
        await self._client.aclose()


def _detail(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:300]
    detail = body.get("detail") if isinstance(body, dict) else body
    if isinstance(detail, list) and detail and isinstance(detail[0], dict):
        return str(detail[0].get("msg", detail[0]))[:300]
    return str(detail)[:300]


class EngineRetriever:
    """A ``RetrievalEngine`` in this process (tests, benchmarks, single-process setups)."""

    def __init__(self, engine: RetrievalEngine) -> None:
        self.engine = engine

    async def retrieve(self, request: RetrieveRequest) -> RetrieveResponse:
        """Run the engine; its dependency errors already carry our types."""
        try:
            return await self.engine.retrieve(request)
        except RagbotError:
            raise
        except OSError as exc:
            raise DependencyUnavailable(f"retrieval failed: {exc}", dependency=RETRIEVER) from exc

    async def similarity(self, request: SimilarityRequest) -> SimilarityResponse:
        """Score with the engine's own embedders."""
        return await similarity(
            embedders=self.engine.embedders, request=request, timeout_s=self.engine.defaults.embed_timeout_s
        )

    async def page(self, page_id: int) -> PageDocuments:
        """The page's paragraphs from the engine's store."""
        try:
            documents = await self.engine.page_documents(page_id)
        except RagbotError:
            raise
        except OSError as exc:
            raise DependencyUnavailable(
                f"reading page {page_id} failed: {exc}", dependency=RETRIEVER
            ) from exc
        if not documents:
            raise NotFound(f"page {page_id} is not indexed")
        return PageDocuments.model_validate({"page_id": page_id, "documents": documents})

    async def model_names(self) -> list[str]:
        """The engine's dense models."""
        return [str(m["name"]) for m in self.engine.models_info()]

    async def ping(self) -> bool:
        """The engine's store answers."""
        return await self.engine.store.ping()

    async def ping_store(self) -> bool:
        """The engine's store answers (the same check: the engine is its store here)."""
        return await self.engine.store.ping()

    async def close(self) -> None:
        """The engine belongs to whoever built it: nothing to release here."""
