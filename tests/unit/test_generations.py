"""Index generations: the fingerprint, generation names and where each lives, the pointer file."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from ragbot.definition import definition_to_json, fingerprint, parse_definition, stored_form
from ragbot.errors import ConfigurationError
from ragbot.messaging.reembed import generation_of, missing_pages, split_options
from ragbot.ports import Generation
from ragbot.schemas.pages import PageState
from ragbot.settings import StoreSettings
from ragbot.stores.embedded.generations import EmbeddedGenerations, pointer_file, read_pointer
from ragbot.stores.generations import (
    LEGACY,
    check_generation_id,
    embedded_file,
    es_prefix,
    generation_id,
    settings_for,
)
from ragbot_retriever.generations import definition_for

RAW: dict[str, Any] = {
    "identifier_field": "page_id",
    "saved_fields": {"title": "text", "page_id": "integer", "content": "text"},
    "field_for_llm": "content",
    "models": {"mini": "content"},
}
DIMS = {"content_mini_vectors": 8}
SPLIT = split_options(max_tokens=512, link_targets="drop")


def fp(raw: dict[str, Any] = RAW, dims: dict[str, int] = DIMS, split: dict[str, Any] = SPLIT) -> str:
    return fingerprint(parse_definition(raw), dimensions=dims, split=split)


def test_the_fingerprint_is_stable_whatever_the_key_order() -> None:
    reordered = {k: RAW[k] for k in reversed(list(RAW))}
    reordered["saved_fields"] = dict(reversed(list(RAW["saved_fields"].items())))
    assert fp(reordered) == fp() == fp({**RAW, "models": {"mini": ["content"]}})
    assert len(fp()) == 64


@pytest.mark.parametrize(
    "changed",
    [
        {"raw": {**RAW, "models": {"other": "content"}}, "dims": {"content_other_vectors": 8}},
        {"raw": {**RAW, "models": {"mini": ["title", "content"]}}, "dims": {**DIMS, "title_mini_vectors": 8}},
        {"raw": {**RAW, "saved_fields": {**RAW["saved_fields"], "url": "keyword"}}},
        {"raw": {**RAW, "field_for_llm": "title"}},
        {"dims": {"content_mini_vectors": 16}},
        {"split": split_options(max_tokens=256, link_targets="drop")},
        {"split": split_options(max_tokens=512, link_targets="keep")},
    ],
)
def test_the_fingerprint_changes_with_each_input(changed: dict[str, Any]) -> None:
    assert fp(**changed) != fp()


def test_languages_and_weights_change_neither_the_fingerprint_nor_the_stored_form() -> None:
    steered = {**RAW, "models": {"mini": {"fields": "content", "languages": ["en"], "weights": 0.5}}}
    assert fp(steered) == fp()
    assert stored_form(parse_definition(steered)) == stored_form(parse_definition(RAW))


def test_the_retriever_queries_a_generation_with_the_files_fusion_settings_when_it_stores_the_same() -> None:
    configured = parse_definition(
        {**RAW, "models": {"mini": {"fields": "content", "languages": ["en"], "weights": 0.5}}}
    )
    same = Generation("g1", definition=definition_to_json(parse_definition(RAW)))
    assert definition_for(same, configured) is configured
    other = Generation(
        "g2", definition=definition_to_json(parse_definition({**RAW, "models": {"mini": "title"}}))
    )
    own = definition_for(other, configured)
    assert own.models == {"mini": ("title",)} and own.field_weights == {}
    assert definition_for(Generation(LEGACY), configured) is configured


async def test_the_retriever_reports_a_definition_that_differs_from_the_live_generation(
    tmp_path: Path,
) -> None:
    from prometheus_client import REGISTRY
    from support.fakes import HashEmbedder

    from ragbot.retrieval import RetrievalDefaults
    from ragbot_retriever.generations import serve

    settings = StoreSettings(backend="embedded", embedded_path=tmp_path / "store.sqlite3")

    async def served(stored: dict[str, Any], configured: dict[str, Any]) -> float | None:
        definition = parse_definition(stored)
        dims = {v.name: 8 for v in definition.vector_fields}
        generation = Generation("legacy", definition=definition_to_json(definition), dimensions=dims)
        serving = await serve(
            generation=generation,
            configured=parse_definition(configured),
            store_settings=settings,
            embedders_for=lambda d: {m: HashEmbedder(m, dimension=8) for m in d.model_names},
            reranker=None,
            defaults=RetrievalDefaults(),
            store_timeout_s=10,
        )
        await serving.opened.store.close()
        return REGISTRY.get_sample_value("ragbot_definition_differs")

    assert await served(RAW, {**RAW, "models": {"mini": ["title", "content"]}}) == 1.0
    assert await served(RAW, {**RAW, "models": {"mini": {"fields": "content", "weights": 0.5}}}) == 0.0


def test_generation_names_and_places() -> None:
    gen = generation_of(parse_definition(RAW), dimensions=DIMS, split=SPLIT)
    assert gen.generation_id == generation_id(fp()) == f"g{fp()[:8]}"
    assert gen.definition == definition_to_json(parse_definition(RAW))
    assert parse_definition(dict(gen.definition or {})) == parse_definition(RAW)
    assert es_prefix("ragbot", gen.generation_id) == f"ragbot-{gen.generation_id}"
    assert es_prefix("ragbot", LEGACY) == "ragbot"
    assert embedded_file(Path("var/ragbot.sqlite3"), gen.generation_id) == Path(
        f"var/ragbot.{gen.generation_id}.sqlite3"
    )
    assert embedded_file(Path("var/ragbot.sqlite3"), LEGACY) == Path("var/ragbot.sqlite3")
    moved = settings_for(StoreSettings(es_index_prefix="kz", embedded_path=Path("a/b.db")), gen.generation_id)
    assert moved.es_index_prefix == f"kz-{gen.generation_id}"
    assert moved.embedded_path == Path(f"a/b.{gen.generation_id}.db")


@pytest.mark.parametrize("bad", ["", "g123", "G0123abcd", "g0123abcz", "../etc", "legacy2", "g0123abcd0"])
def test_malformed_generation_ids_are_refused(bad: str) -> None:
    with pytest.raises(ConfigurationError):
        check_generation_id(bad)
    with pytest.raises(ConfigurationError):
        generation_id("xyz")


def test_missing_pages_compares_revisions() -> None:
    def state(page_id: int, revision_id: int) -> PageState:
        return PageState(page_id=page_id, revision_id=revision_id, paragraphs=1)

    source = [state(1, 5), state(2, 5), state(3, 5)]
    target = [state(1, 5), state(2, 4), state(4, 9)]
    assert missing_pages(source, target) == [2, 3]
    assert missing_pages(source, [*source, state(3, 6)]) == []


async def test_the_pointer_file_switches_atomically(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite3"
    gens = EmbeddedGenerations(path=path)
    assert read_pointer(path) == LEGACY
    assert (await gens.live()).generation_id == LEGACY
    gen = generation_of(parse_definition(RAW), dimensions=DIMS, split=SPLIT)
    with pytest.raises(ConfigurationError):  # no file yet: refusing beats pointing at nothing
        await gens.switch(to=gen.generation_id)
    await gens.record(gen)
    await gens.switch(to=gen.generation_id)
    assert json.loads(pointer_file(path).read_text()) == {"generation": gen.generation_id}
    assert [p.name for p in os.scandir(tmp_path) if p.name.endswith(".tmp")] == []
    assert await gens.live() == gen
    with pytest.raises(ConfigurationError):
        await gens.drop(generation_id=gen.generation_id)
    pointer_file(path).write_text('{"generation": "../../x"}')
    with pytest.raises(ConfigurationError):
        read_pointer(path)


def test_reembed_needs_a_callback_url(capsys: pytest.CaptureFixture[str]) -> None:
    from ragbot.cli.main import main

    assert main(["reembed"]) == 2
    assert "--callback-url" in capsys.readouterr().err
