"""Contextual retrieval against a real local OpenAI-compatible server replaying a fixed answer.

The server (``support.chat_fakes.FakeOpenAI``) speaks the real streaming wire format; the adapter is
the production ``OpenAICompatChatModel``. The cache here is in memory (the Redis cache is exercised
in tests/integration/test_indexing_pipeline.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import numpy as np
import pytest
from support.chat_fakes import FakeOpenAI
from support.fakes import HashEmbedder

from ragbot.definition import parse_definition
from ragbot.indexing.contextual import Contextualizer, MemoryContextCache, context_key
from ragbot.indexing.embed import embed_prepared, prepare_paragraphs
from ragbot.llms.openai_compat import OpenAICompatChatModel
from ragbot.ports import StoredParagraph
from ragbot.schemas.pages import Page

ANSWER = ("This passage is from the page on sick pay ", "and explains when payment starts.")
CONTEXT = "".join(ANSWER)
DEFINITION = parse_definition(
    {
        "identifier_field": "page_id",
        "saved_fields": {"title": "text", "page_id": "integer", "content": "text"},
        "field_for_llm": "content",
        "models": {"hash-embedder": ["content", "title"]},
    }
)


def sick_pay(revision_id: int = 1, third: str = "The employer pays from the fourth day on.") -> Page:
    content = (
        "## Eligibility\n\nEvery employee accrues sick days.\n\n"
        "## Payment\n\nPayment starts on the second day.\n\n" + third
    )
    return Page(page_id=5, revision_id=revision_id, title="Sick pay", content=content)


@pytest.fixture
async def server() -> AsyncIterator[FakeOpenAI]:
    with FakeOpenAI(pieces=ANSWER) as fake:
        yield fake


def contextualizer(server: FakeOpenAI, cache: MemoryContextCache) -> Contextualizer:
    llm = OpenAICompatChatModel(model="ctx-model", base_url=f"{server.url}/v1")
    llm.warm_up()
    return Contextualizer(llm=llm, cache=cache, model_name="openai:ctx-model", max_tokens=64, concurrency=2)


def paragraphs(page: Page, embedder: HashEmbedder) -> list[StoredParagraph]:
    return prepare_paragraphs(
        page, definition=DEFINITION, embedders={"hash-embedder": embedder}, max_tokens=12
    )


async def test_contexts_are_written_once_and_then_come_from_the_cache(server: FakeOpenAI) -> None:
    cache = MemoryContextCache()
    ctx = contextualizer(server, cache)
    embedder = HashEmbedder(max_tokens=12)
    prepared = paragraphs(sick_pay(), embedder)
    assert len(prepared) == 3
    contexts = await ctx.contexts(sick_pay(), prepared)
    assert contexts == {p.doc_id: CONTEXT for p in prepared}
    assert (ctx.last.generated, ctx.last.cached, ctx.last.failed) == (3, 0, 0)
    assert len(server.requests) == 3 and len(cache.items) == 3
    _, path, body, _ = server.requests[0]
    assert path == "/v1/chat/completions" and body["max_tokens"] == 64 and body["temperature"] == 0.0
    prompt = body["messages"][-1]["content"]
    assert "<document>\nSick pay" in prompt and "Payment starts on the second day." in prompt

    # A new revision that changes one paragraph pays for that paragraph only.
    edited = sick_pay(revision_id=2, third="The employer pays from the third day on.")
    again = await ctx.contexts(edited, paragraphs(edited, embedder))
    assert len(again) == 3 and (ctx.last.generated, ctx.last.cached) == (1, 2)
    assert len(server.requests) == 4


async def test_an_llm_failure_indexes_without_context_and_caches_nothing(server: FakeOpenAI) -> None:
    server.status = 500
    cache = MemoryContextCache()
    ctx = contextualizer(server, cache)
    prepared = paragraphs(sick_pay(), HashEmbedder(max_tokens=12))
    assert await ctx.contexts(sick_pay(), prepared) == {}
    assert ctx.last.failed == 3 and cache.items == {}


async def test_the_context_is_embedded_but_never_stored(server: FakeOpenAI) -> None:
    embedder = HashEmbedder(max_tokens=12)
    plain = paragraphs(sick_pay(), embedder)
    embed_prepared([plain], definition=DEFINITION, embedders={"hash-embedder": embedder})
    with_context = paragraphs(sick_pay(), embedder)
    contexts = await contextualizer(server, MemoryContextCache()).contexts(sick_pay(), with_context)
    embedder.texts.clear()
    embed_prepared(
        [with_context], definition=DEFINITION, embedders={"hash-embedder": embedder}, contexts=contexts
    )
    assert all(t.startswith(CONTEXT + "\n\n") for t in embedder.texts[:3])
    assert embedder.texts[3:] == ["Sick pay"]  # titles get no context
    for a, b in zip(plain, with_context, strict=True):
        assert a.fields["content"] == b.fields["content"] and CONTEXT not in str(b.fields)
        field = "content_hash-embedder_vectors"
        assert not np.allclose(a.vectors[field], b.vectors[field])
        assert np.allclose(a.vectors["title_hash-embedder_vectors"], b.vectors["title_hash-embedder_vectors"])


def test_the_cache_key_depends_on_what_the_context_depends_on() -> None:
    base = {"model": "m", "title": "t", "heading": "h", "text": "x"}
    keys = {context_key(**base)} | {context_key(**{**base, k: "other"}) for k in base}
    assert len(keys) == 5
