"""The one indexing pipeline: its default split options, stages, hooks and refusals."""

from __future__ import annotations

import numpy as np
import pytest
from support.fakes import HashEmbedder, MemoryStore

from ragbot.definition import parse_definition
from ragbot.errors import ValidationFailed
from ragbot.indexing.paragraphs import split_page
from ragbot.indexing.pipeline import (
    NO_VECTORS,
    IndexingHooks,
    IndexingPipeline,
    SplitOptions,
    write_page,
)
from ragbot.ports import PageWrite, StoredParagraph
from ragbot.schemas.pages import Page
from ragbot.settings import WorkerSettings

MODEL = "hash-embedder"
DEFINITION = parse_definition(
    {
        "identifier_field": "page_id",
        "saved_fields": {"title": "text", "page_id": "integer", "content": "text"},
        "field_for_llm": "content",
        "models": {MODEL: ["content", "title"]},
    }
)
LINKED = "See [the rules](https://wiki.example/rules) here.\n\nA second paragraph."


def page(page_id: int, content: str = LINKED) -> Page:
    return Page(page_id=page_id, revision_id=1, title=f"Page {page_id}", content=content)


class Recorder(IndexingHooks):
    """Records what each hook was told."""

    def __init__(self) -> None:
        self.pages: list[tuple[int, int]] = []
        self.seconds: list[float] = []

    def embedded(self, seconds: float) -> None:
        self.seconds.append(seconds)

    async def written(self, page: Page, paragraphs: int) -> None:
        self.pages.append((page.page_id, paragraphs))


def test_one_link_targets_default_for_every_path() -> None:
    """The worker's setting, the pipeline's options and the splitter agree: links lose their targets."""
    assert WorkerSettings().link_targets == SplitOptions().link_targets == "drop"
    [first, _] = split_page(page(1), token_counters=[lambda t: len(t.split())], max_tokens=5)
    assert first.text == "See the rules here."


async def test_index_splits_embeds_writes_and_calls_the_hooks_per_page() -> None:
    store, embedder, hooks = MemoryStore(require_vectors=True), HashEmbedder(MODEL, max_tokens=6), Recorder()
    pipeline = IndexingPipeline(definition=DEFINITION, embedders={MODEL: embedder}, batch_max_paragraphs=2)
    counts = await pipeline.index([page(1), page(2), page(3)], store=store, hooks=hooks)
    assert counts == [2, 2, 2]
    assert hooks.pages == [(1, 2), (2, 2), (3, 2)]
    assert store.batches == [[1], [2], [3]]  # groups of at most 2 paragraphs
    assert len(hooks.seconds) == 3
    assert [p.doc_id for p in store.pages[2]] == ["2-1-0", "2-1-1"]
    assert "https://" not in str(store.pages[1][0].fields["content"])


async def test_a_refused_page_is_reported_and_the_others_are_written() -> None:
    store = MemoryStore()
    store.refuse[2] = ValidationFailed("no", field="x")
    pipeline = IndexingPipeline(definition=DEFINITION, embedders={MODEL: HashEmbedder(MODEL)})
    failed: dict[int, Exception] = {}
    await pipeline.index([page(1), page(2)], store=store, failed=failed)
    assert list(failed) == [2] and sorted(store.pages) == [1]
    with pytest.raises(ValidationFailed):
        await pipeline.index([page(2)], store=store)


async def test_write_paragraphs_embeds_only_what_is_selected() -> None:
    store, embedder = MemoryStore(), HashEmbedder(MODEL)
    pipeline = IndexingPipeline(definition=DEFINITION, embedders={MODEL: embedder})
    given = np.ones(32, dtype=np.float32)
    paragraph = StoredParagraph(
        "5-1-0", 5, 1, 0, {"title": "T", "content": "some words"}, {"title_hash-embedder_vectors": given}
    )
    await pipeline.write_paragraphs(
        [PageWrite(5, 1, [paragraph])], store=store, select=lambda sp: {"content_hash-embedder_vectors"}
    )
    [stored] = store.pages[5]
    assert embedder.passage_calls == [["some words"]]
    assert np.array_equal(stored.vectors["title_hash-embedder_vectors"], given)
    assert "content_hash-embedder_vectors" in stored.vectors


async def test_no_vectors_and_write_page_write_the_callers_vectors_as_they_are() -> None:
    store, embedder = MemoryStore(), HashEmbedder(MODEL)
    vector = {"content_hash-embedder_vectors": np.ones(32, dtype=np.float32)}
    paragraph = StoredParagraph("6-1-0", 6, 1, 0, {"content": "x"}, dict(vector))
    pipeline = IndexingPipeline(definition=DEFINITION, embedders={MODEL: embedder})
    await pipeline.write_paragraphs([PageWrite(6, 1, [paragraph])], store=store, select=NO_VECTORS)
    await write_page(store, 7, 1, [StoredParagraph("7-1-0", 7, 1, 0, {"content": "y"}, dict(vector))])
    assert embedder.passage_calls == []
    assert sorted(store.pages) == [6, 7]
    store.refuse[8] = ValidationFailed("bad", field="v")
    with pytest.raises(ValidationFailed):
        await write_page(store, 8, 1, [])
