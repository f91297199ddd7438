"""Contextual retrieval: an LLM writes one or two sentences situating each paragraph in its page.

The context is prepended to the paragraph's text before it is embedded (``ragbot.indexing.embed``), so a
paragraph that says "the allowance is paid monthly" is found by a question about the page's subject
even when the paragraph never names it. The stored text is unchanged; the context is not shown to
the chat LLM.

Cost control: contexts are cached in Redis under ``<prefix>:ctx:<sha256>``, the hash taken over the
prompt version, the model, the page title, the paragraph's heading and its text. An edit re-pays only
for the paragraphs it changed; a repeated or reordered page pays nothing. The page excerpt the LLM
sees is not part of the key on purpose: an edit elsewhere in the page does not re-pay for every
paragraph.

Failure policy: contextual retrieval improves ranking, freshness matters more. A paragraph whose
context the LLM could not write (error, timeout, empty answer) is embedded without one, nothing is
cached for it, and the next index of the page tries again; a Redis error makes the whole page go
without contexts. Both are logged.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from redis.asyncio import Redis

from ragbot.errors import DependencyUnavailable, RagbotError
from ragbot.messaging.redis import redis_guard
from ragbot.ports import ChatMessage, ChatModel, StoredParagraph
from ragbot.schemas.pages import Page

__all__ = [
    "PROMPT_VERSION",
    "ContextCache",
    "ContextStats",
    "Contextualizer",
    "MemoryContextCache",
    "RedisContextCache",
    "context_key",
    "context_messages",
]

logger = logging.getLogger(__name__)

PROMPT_VERSION = "ctx-v1"
_SYSTEM = (
    "You situate a passage within the document it comes from, to improve search retrieval. "
    "Answer with one or two short sentences in the language of the document, and nothing else."
)
_USER = """<document>
{document}
</document>
Here is the passage we want to situate within the whole document:
<passage>
{passage}
</passage>
Please give a short succinct context to situate this passage within the overall document for the \
purposes of improving search retrieval of the passage. Answer only with the succinct context and \
nothing else."""


class ContextCache(Protocol):
    """Where contexts are kept between index runs (Redis in production)."""

    async def get_many(self, keys: Sequence[str]) -> list[str | None]:
        """The cached context of each key, None where there is none."""

    async def set_many(self, items: Mapping[str, str]) -> None:
        """Cache contexts by key."""


class RedisContextCache:
    """Contexts as Redis strings ``<prefix>:ctx:<key>`` that expire after ``ttl_s``."""

    def __init__(self, *, redis: Redis, key_prefix: str, ttl_s: int) -> None:
        self.redis = redis
        self.prefix = f"{key_prefix}:ctx:"
        self.ttl_s = ttl_s

    async def get_many(self, keys: Sequence[str]) -> list[str | None]:
        """MGET of the keys."""
        if not keys:
            return []
        with redis_guard("read the context cache"):
            raws = await self.redis.mget([self.prefix + k for k in keys])
        return [r.decode("utf-8") if isinstance(r, bytes) else r for r in raws]

    async def set_many(self, items: Mapping[str, str]) -> None:
        """SET with expiry, pipelined."""
        if not items:
            return
        pipe = self.redis.pipeline(transaction=False)
        for key, value in items.items():
            pipe.set(self.prefix + key, value, ex=self.ttl_s)
        with redis_guard("write the context cache"):
            await pipe.execute()


@dataclass(slots=True)
class MemoryContextCache:
    """A dict, for one-off runs (``ragbot index`` without Redis) and tests."""

    items: dict[str, str] = field(default_factory=dict)

    async def get_many(self, keys: Sequence[str]) -> list[str | None]:
        """Lookups in the dict."""
        return [self.items.get(k) for k in keys]

    async def set_many(self, items: Mapping[str, str]) -> None:
        """Store in the dict."""
        self.items.update(items)


@dataclass(slots=True)
class ContextStats:
    """What one call did: contexts found in the cache, written by the LLM, or missing."""

    cached: int = 0
    generated: int = 0
    failed: int = 0


def context_key(*, model: str, title: str, heading: str, text: str) -> str:
    """The cache key of a paragraph's context: a hash of everything the context depends on."""
    raw = json.dumps([PROMPT_VERSION, model, title, heading, text], ensure_ascii=False)
    return hashlib.sha256(raw.encode("utf-8")).hexdigest()


def context_messages(*, document: str, passage: str) -> list[ChatMessage]:
    """The prompt for one paragraph (Anthropic's contextual retrieval prompt)."""
    return [
        ChatMessage("system", _SYSTEM),
        ChatMessage("user", _USER.format(document=document, passage=passage)),
    ]


class Contextualizer:
    """Writes (or finds in the cache) a context for each paragraph of a page."""

    def __init__(
        self,
        *,
        llm: ChatModel,
        cache: ContextCache,
        model_name: str,
        max_tokens: int = 96,
        document_chars: int = 8000,
        concurrency: int = 4,
        text_field: str = "content",
    ) -> None:
        self.llm = llm
        self.cache = cache
        self.model_name = model_name
        self.max_tokens = max_tokens
        self.document_chars = document_chars
        self.concurrency = max(1, concurrency)
        self.text_field = text_field
        self.last = ContextStats()

    async def contexts(self, page: Page, paragraphs: Sequence[StoredParagraph]) -> dict[str, str]:
        """Doc id -> context for the paragraphs that have one (cached first, then from the LLM)."""
        stats = ContextStats()
        self.last = stats
        texts = {sp.doc_id: str(sp.fields.get(self.text_field) or "") for sp in paragraphs}
        wanted = [sp for sp in paragraphs if texts[sp.doc_id].strip()]
        if not wanted:
            return {}
        keys = {
            sp.doc_id: context_key(
                model=self.model_name,
                title=page.title,
                heading=str(sp.fields.get("heading") or ""),
                text=texts[sp.doc_id],
            )
            for sp in wanted
        }
        try:
            cached = await self.cache.get_many([keys[sp.doc_id] for sp in wanted])
        except DependencyUnavailable as exc:
            logger.warning("context cache unavailable; indexing without contexts", extra={"error": str(exc)})
            stats.failed = len(wanted)
            return {}
        found: dict[str, str] = {}
        todo: list[StoredParagraph] = []
        for sp, hit in zip(wanted, cached, strict=True):
            if hit:
                found[sp.doc_id] = hit
            else:
                todo.append(sp)
        stats.cached = len(found)
        if not todo:
            return found
        document = self._document(page, paragraphs)
        limit = asyncio.Semaphore(self.concurrency)

        async def one(sp: StoredParagraph) -> tuple[str, str | None]:
            async with limit:
                return sp.doc_id, await self._generate(document=document, passage=texts[sp.doc_id])

        fresh: dict[str, str] = {}
        for doc_id, context in await asyncio.gather(*(one(sp) for sp in todo)):
            if context:
                fresh[doc_id] = context
        stats.generated = len(fresh)
        stats.failed = len(todo) - len(fresh)
        if stats.failed:
            logger.warning(
                "some paragraphs indexed without context",
                extra={"page_id": page.page_id, "failed": stats.failed, "paragraphs": len(wanted)},
            )
        try:
            await self.cache.set_many({keys[d]: c for d, c in fresh.items()})
        except DependencyUnavailable as exc:
            logger.warning("could not cache contexts", extra={"error": str(exc)})
        return {**found, **fresh}

    def _document(self, page: Page, paragraphs: Sequence[StoredParagraph]) -> str:
        body = "\n\n".join(str(sp.fields.get(self.text_field) or "") for sp in paragraphs)
        if len(body) > self.document_chars:
            body = body[: self.document_chars] + " ..."
        return f"{page.title}\n\n{body}" if page.title else body

    async def _generate(self, *, document: str, passage: str) -> str | None:
        pieces: list[str] = []
        try:
            async for piece in self.llm.stream(
                messages=context_messages(document=document, passage=passage),
                temperature=0.0,
                max_tokens=self.max_tokens,
            ):
                pieces.append(piece)
        except RagbotError as exc:
            logger.warning("the LLM wrote no context", extra={"error": f"{type(exc).__name__}: {exc}"})
            return None
        context = " ".join("".join(pieces).split())
        return context or None
