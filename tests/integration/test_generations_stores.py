"""Index generations on both stores: a second generation with another definition is built beside
the live one, readers keep the live one until the atomic switch, then the new one; the old is dropped."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from ragbot.definition import parse_definition
from ragbot.errors import ConfigurationError
from ragbot.messaging.reembed import generation_of, split_options
from ragbot.ports import Generation, Generations, PageWrite, StoredParagraph
from ragbot.settings import StoreSettings
from ragbot.stores import doc_id
from ragbot.stores.elasticsearch.generations import ElasticsearchGenerations, live_alias
from ragbot.stores.generations import LEGACY, OpenedGeneration, build_generations, open_generation

pytestmark = pytest.mark.integration

OLD_RAW: dict[str, Any] = {
    "identifier_field": "page_id",
    "saved_fields": {"title": "text", "page_id": "integer", "content": "text"},
    "field_for_llm": "content",
    "models": {"mini": "content"},
}
NEW_RAW: dict[str, Any] = {**OLD_RAW, "models": {"other": ["title", "content"]}}
OLD = parse_definition(OLD_RAW)
NEW = parse_definition(NEW_RAW)
OLD_DIMS = {"content_mini_vectors": 8}
NEW_DIMS = {"title_other_vectors": 12, "content_other_vectors": 12}
SPLIT = split_options(max_tokens=512, link_targets="drop")


@dataclass
class Backend:
    settings: StoreSettings
    generations: Generations


@pytest.fixture(params=["embedded", "elasticsearch"])
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    if request.param == "embedded":
        settings = StoreSettings(backend="embedded", embedded_path=tmp_path / "store.sqlite3")
    else:
        es_url = request.getfixturevalue("es_url")
        settings = StoreSettings(
            backend="elasticsearch", es_url=es_url, es_index_prefix=f"test-gen-{uuid.uuid4().hex[:10]}"
        )
    generations = build_generations(settings)
    try:
        yield Backend(settings, generations)
    finally:
        await generations.close()
        if settings.backend == "elasticsearch":
            _delete_prefix(settings.es_url, settings.es_index_prefix)


def _delete_prefix(url: str, prefix: str) -> None:
    indices = httpx.get(f"{url}/_cat/indices/{prefix}*", params={"format": "json", "h": "index"}, timeout=30)
    names = [row["index"] for row in indices.json()] if indices.status_code == 200 else []
    if names:
        httpx.delete(f"{url}/{','.join(names)}", timeout=60).raise_for_status()
    templates = httpx.get(f"{url}/_index_template/{prefix}*", timeout=30)
    if templates.status_code == 200:
        for template in templates.json().get("index_templates", []):
            httpx.delete(f"{url}/_index_template/{template['name']}", timeout=30)


def paragraphs(page_id: int, revision_id: int, dims: Mapping[str, int], word: str) -> list[StoredParagraph]:
    rng = np.random.default_rng(page_id)
    return [
        StoredParagraph(
            doc_id=doc_id(page_id, revision_id, 0),
            page_id=page_id,
            revision_id=revision_id,
            paragraph=0,
            fields={"page_id": page_id, "title": f"page {page_id}", "content": f"{word} text of {page_id}"},
            vectors={name: rng.standard_normal(d).astype(np.float32) for name, d in dims.items()},
        )
    ]


async def open_live(backend: Backend) -> OpenedGeneration:
    """What a reader does: the live generation's store, with its own definition."""
    live = await backend.generations.live()
    opened = open_generation(
        settings=backend.settings, generation=live, configured=NEW, configured_dimensions=NEW_DIMS
    )
    await opened.store.ensure_ready()
    return opened


async def search(opened: OpenedGeneration) -> list[int]:
    """kNN on the generation's first vector field and BM25: the pages found."""
    field = opened.definition.vector_fields[0].name
    vector = np.ones(opened.dimensions[field], dtype=np.float32)
    hits = await opened.store.knn(vector_field=field, vector=vector, k=10)
    hits += await opened.store.bm25(query="text", k=10)
    return sorted({h.page_id for h in hits})


async def test_a_second_generation_is_built_beside_the_live_one_and_switched_to(backend: Backend) -> None:
    gens = backend.generations
    assert await gens.live() == Generation(LEGACY)  # nothing recorded: what was there before generations
    legacy = Generation(
        LEGACY,
        fingerprint=generation_of(OLD, dimensions=OLD_DIMS, split=SPLIT).fingerprint,
        definition=OLD_RAW,
        dimensions=OLD_DIMS,
        split=SPLIT,
    )
    await gens.record(legacy)
    old = await open_live(backend)
    assert old.definition == OLD
    await old.store.replace_pages([PageWrite(p, 1, paragraphs(p, 1, OLD_DIMS, "old")) for p in (1, 2, 1500)])

    target = generation_of(NEW, dimensions=NEW_DIMS, split=SPLIT)
    assert target.generation_id != LEGACY
    await gens.record(target)
    assert await gens.get(generation_id=target.generation_id) == target
    stored = await gens.get(generation_id=target.generation_id)
    assert stored is not None and stored.definition is not None  # field order is part of a definition
    assert parse_definition(dict(stored.definition)).text_fields == NEW.text_fields == ("title", "content")
    built = open_generation(
        settings=backend.settings, generation=target, configured=NEW, configured_dimensions=NEW_DIMS
    )
    await built.store.ensure_ready()
    await built.store.replace_pages([PageWrite(p, 2, paragraphs(p, 2, NEW_DIMS, "new")) for p in (1, 2)])

    # Building: readers still get the old generation, with the old definition.
    reader = await open_live(backend)
    assert reader.generation.generation_id == LEGACY and reader.definition == OLD
    assert await search(reader) == [1, 2, 1500]
    assert {h.source["content"].split()[0] for h in await reader.store.bm25(query="text", k=10)} == {"old"}
    await reader.store.close()

    await built.store.replace_pages([PageWrite(1500, 2, paragraphs(1500, 2, NEW_DIMS, "new"))])
    await gens.switch(to=target.generation_id)
    assert (await gens.live()).generation_id == target.generation_id
    reader = await open_live(backend)
    assert reader.definition == NEW and reader.dimensions == NEW_DIMS
    assert await search(reader) == [1, 2, 1500]
    assert {h.source["content"].split()[0] for h in await reader.store.bm25(query="text", k=10)} == {"new"}
    assert {p.revision_id for p in await reader.store.list_pages()} == {2}

    with pytest.raises(ConfigurationError):  # never the live one
        await gens.drop(generation_id=target.generation_id)
    await old.store.close()
    await gens.drop(generation_id=LEGACY)
    assert await gens.get(generation_id=LEGACY) is None
    assert await search(reader) == [1, 2, 1500]  # the live one is untouched
    if backend.settings.backend == "embedded":
        assert not backend.settings.embedded_path.exists()
    gone = open_generation(
        settings=backend.settings, generation=legacy, configured=OLD, configured_dimensions=OLD_DIMS
    )
    assert await gone.store.count() == 0  # its indices (or file) went
    await gone.store.close()
    if backend.settings.backend == "elasticsearch":
        assert isinstance(gens, ElasticsearchGenerations)
        prefix = backend.settings.es_index_prefix
        async with httpx.AsyncClient(timeout=10) as client:
            aliased = (await client.get(f"{backend.settings.es_url}/_alias/{live_alias(prefix)}")).json()
        assert set(aliased) == {f"{prefix}-{target.generation_id}_0", f"{prefix}-{target.generation_id}_1"}
    await reader.store.close()
    await built.store.close()


async def test_switching_back_and_forth_leaves_one_generation_live(backend: Backend) -> None:
    gens = backend.generations
    first = generation_of(OLD, dimensions=OLD_DIMS, split=SPLIT)
    second = generation_of(NEW, dimensions=NEW_DIMS, split=SPLIT)
    for gen, dims in ((first, OLD_DIMS), (second, NEW_DIMS)):
        await gens.record(gen)
        opened = open_generation(
            settings=backend.settings, generation=gen, configured=NEW, configured_dimensions=NEW_DIMS
        )
        await opened.store.ensure_ready()
        await opened.store.replace_pages([PageWrite(7, 1, paragraphs(7, 1, dims, gen.generation_id))])
        await opened.store.close()
    for to in (first, second, first):
        await gens.switch(to=to.generation_id)
        live = await gens.live()
        assert live == to
        reader = await open_live(backend)
        hits = await reader.store.bm25(query="text", k=5)
        assert [h.source["content"].split()[0] for h in hits] == [to.generation_id]
        await reader.store.close()
