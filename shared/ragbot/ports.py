"""Ports: the Protocols every adapter implements. Services depend on these, never on vendors."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel

from ragbot.schemas.mediawiki import WikiChanges, WikiCursor, WikiPageState
from ragbot.schemas.pages import Page, PageState

Vector = npt.NDArray[np.float32]
FilterValue = str | int | float | bool | list[str | int | float | bool]
Filters = Mapping[str, FilterValue]


@dataclass(slots=True)
class StoredParagraph:
    """One paragraph as written to a store: saved fields, vectors by vector-field name."""

    doc_id: str
    page_id: int
    revision_id: int
    paragraph: int
    fields: dict[str, Any]
    vectors: dict[str, Vector] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PageWrite:
    """One page's new revision for ``SearchStore.replace_pages``."""

    page_id: int
    revision_id: int
    paragraphs: Sequence[StoredParagraph]


@dataclass(slots=True)
class SearchHit:
    """A paragraph found by a search: its id, the branch's raw score and its vector-free source."""

    doc_id: str
    score: float
    source: dict[str, Any]

    @property
    def page_id(self) -> int:
        """The page the paragraph belongs to."""
        return int(self.source["page_id"])


@runtime_checkable
class SearchStore(Protocol):
    """Where paragraphs live. Elasticsearch and the embedded store pass one contract suite."""

    async def ensure_ready(self) -> None:
        """Create indices/tables/templates if missing (idempotent)."""

    async def ping(self) -> bool:
        """True when the store answers (for /readyz)."""

    async def warm_up(self) -> None:
        """Load what searches read into memory before the first query needs it (idempotent)."""

    async def replace_page(
        self, *, page_id: int, revision_id: int, paragraphs: Sequence[StoredParagraph]
    ) -> None:
        """Write a revision's paragraphs, then drop every other revision of the page (never a gap)."""

    async def replace_pages(self, writes: Sequence[PageWrite]) -> dict[int, Exception]:
        """``replace_page`` for many pages in one round of requests; returns the pages that failed.

        Each page is replaced as ``replace_page`` would (a failed one keeps its old revision) and
        fails on its own: its error goes in the result, keyed by page id, and the others are still
        written. A store that is down raises ``StoreUnavailable``; a page id given twice, ValueError.
        """

    async def delete_page(self, *, page_id: int) -> int:
        """Remove a page from every shard; returns how many paragraphs went."""

    async def page_state(self, *, page_id: int) -> PageState | None:
        """The indexed revision, paragraph count and last update of a page, or None."""

    async def list_pages(self, *, limit: int = 100, offset: int = 0) -> list[PageState]:
        """Indexed pages by ascending page id: newest revision, paragraphs, title, last update.

        ``paragraphs_per_model`` stays empty here (``page_state`` has it, per page).
        """

    async def page_revisions(self) -> dict[int, int]:
        """Every indexed page id with its newest revision, read in one pass (what reconcile compares)."""

    async def page_paragraphs(self, *, page_id: int) -> list[SearchHit]:
        """Every paragraph of a page in paragraph order (score 0)."""

    async def knn(
        self, *, vector_field: str, vector: Vector, k: int, filters: Filters | None = None
    ) -> list[SearchHit]:
        """Top-k by cosine; score is cosine + 1 (kolzchut-ragbot's scale, 0..2)."""

    async def bm25(
        self, *, query: str, k: int, fields: Sequence[str] | None = None, filters: Filters | None = None
    ) -> list[SearchHit]:
        """Top-k by BM25 over the text fields (Hebrew-aware analysis, same on every store)."""

    async def get(self, *, doc_ids: Sequence[str]) -> list[SearchHit]:
        """Paragraphs by id, in the order asked, missing ones left out."""

    async def count(self) -> int:
        """Number of paragraphs stored."""

    async def close(self) -> None:
        """Release connections and files."""


@runtime_checkable
class Embedder(Protocol):
    """A text embedding model. ``warm_up`` loads it; construction never does."""

    name: str

    @property
    def dimension(self) -> int:
        """Vector size, read from the model."""

    @property
    def max_tokens(self) -> int:
        """Longest input the model takes, in its own tokens."""

    def warm_up(self) -> None:
        """Load the model (idempotent)."""

    def count_tokens(self, text: str) -> int:
        """Length of ``text`` in this model's tokens."""

    def embed_queries(self, texts: Sequence[str]) -> Vector:
        """L2-normalised query vectors, shape (n, dimension)."""

    def embed_passages(self, texts: Sequence[str]) -> Vector:
        """L2-normalised passage vectors, shape (n, dimension)."""

    def close(self) -> None:
        """Free the model."""


@runtime_checkable
class Reranker(Protocol):
    """A cross-encoder scoring (query, passage) pairs jointly."""

    def warm_up(self) -> None:
        """Load the model (idempotent)."""

    def score(self, query: str, passages: Sequence[str]) -> list[float]:
        """One relevance score per passage, higher is better."""

    def close(self) -> None:
        """Free the model."""


@dataclass(slots=True)
class ChatMessage:
    """One message to an LLM."""

    role: str
    content: str


@dataclass(slots=True)
class Usage:
    """Token counts of one generation (``prompt_tokens`` is None when the server does not say)."""

    prompt_tokens: int | None = None
    completion_tokens: int = 0
    finish_reason: str | None = None
    reported: bool = False

    def as_dict(self) -> dict[str, int | None]:
        """The OpenAI-style usage object."""
        total = None if self.prompt_tokens is None else self.prompt_tokens + self.completion_tokens
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": total,
        }


class TokenStream(AsyncIterator[str]):
    """Text pieces of one answer, plus the usage the server reported once it is finished.

    Closing it early (``aclose()``, or the consumer being cancelled) stops generation at the adapter.
    """

    def __init__(self, pieces: AsyncGenerator[str, None], usage: Usage) -> None:
        self._pieces = pieces
        self.usage = usage

    def __aiter__(self) -> TokenStream:
        return self

    async def __anext__(self) -> str:
        return await self._pieces.__anext__()

    async def aclose(self) -> None:
        """Stop generating (idempotent)."""
        await self._pieces.aclose()


@runtime_checkable
class ChatModel(Protocol):
    """A streaming LLM with a name and a lifecycle (``warm_up`` loads it; construction never does).

    The chat pipeline answers and rewrites follow-ups with it; contextual indexing writes contexts.
    """

    backend: str

    @property
    def model(self) -> str:
        """The model name answers are generated with."""

    def warm_up(self) -> None:
        """Load the model or build the client (idempotent; may block: call it from a thread)."""

    async def ping(self) -> bool:
        """True when the LLM can answer (for /readyz)."""

    def stream(
        self,
        *,
        messages: Sequence[ChatMessage],
        temperature: float | None = 0.0,
        max_tokens: int = 512,
        model: str | None = None,
    ) -> TokenStream:
        """Start generating; iterate the result for text pieces.

        ``temperature=None`` sends no temperature at all (models that refuse one, e.g. reasoning models).
        """

    async def close(self) -> None:
        """Free the model or the connections."""


@runtime_checkable
class PageSource(Protocol):
    """Where page content comes from (the wiki's content API)."""

    async def fetch(self, *, page_id: int, callback_url: str) -> Page | None:
        """The page, or None when the source says it left scope (404)."""


@dataclass(frozen=True, slots=True)
class Generation:
    """One index generation: where it lives (``generation_id``) and what built it.

    ``definition`` is the definition file's JSON the generation was embedded with, ``dimensions`` its
    vector sizes and ``split`` its paragraph options; all three are None/empty for a generation made
    before generations existed whose definition was never recorded (``LEGACY`` with no meta).
    """

    generation_id: str
    fingerprint: str | None = None
    definition: Mapping[str, Any] | None = None
    dimensions: Mapping[str, int] = field(default_factory=dict)
    split: Mapping[str, Any] = field(default_factory=dict)


@runtime_checkable
class Generations(Protocol):
    """The store's index generations and the pointer to the live one (switched atomically)."""

    async def live(self) -> Generation:
        """The generation readers should query now."""

    async def get(self, *, generation_id: str) -> Generation | None:
        """A generation's recorded meta, or None when it was never created (or was dropped)."""

    async def record(self, generation: Generation) -> None:
        """Store a generation's meta with it (idempotent); makes its indices or file ready to fill."""

    async def switch(self, *, to: str) -> None:
        """Point readers at generation ``to`` in one atomic step."""

    async def drop(self, *, generation_id: str) -> None:
        """Delete a generation that is not live: its indices or file and its meta."""

    async def close(self) -> None:
        """Release connections."""


@runtime_checkable
class WikiApi(Protocol):
    """A MediaWiki's core Action API (no extension): rendered pages, page states and recent changes."""

    async def page(self, *, page_id: int) -> Page | None:
        """The rendered page as a Page with heading-aware blocks, or None when it is gone."""

    async def states(self, *, page_ids: Sequence[int]) -> list[WikiPageState]:
        """The current state of each page id (gone ones with ``exists`` False)."""

    async def all_pages(self) -> list[WikiPageState]:
        """Every non-redirect page of the configured namespaces (a full sync)."""

    async def latest_cursor(self) -> WikiCursor:
        """The cursor of the newest recent change (a full sync starts from it)."""

    async def changes(self, *, since: WikiCursor) -> WikiChanges:
        """Page ids touched by edits, new pages, deletes, moves and restores after ``since``."""


@runtime_checkable
class CommandSender(Protocol):
    """Sends a command to the embedder by task name (``ragbot.messaging.queue.TaskSender``)."""

    async def send(
        self, *, task: str, message: BaseModel, request_id: str | None = None, countdown: float | None = None
    ) -> str:
        """Publish one command; returns the broker's message id."""
