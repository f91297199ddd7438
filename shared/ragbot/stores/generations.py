"""Index generations of either store: the configured store's pointer, the live generation, and a
generation's store opened with its own definition.

A generation is named after its fingerprint (``g`` + its first 8 hex digits); ``LEGACY`` is what
was written before generations existed (the configured index prefix or file itself), and stays the
live generation until the first ``ragbot reembed`` switches away from it. The naming rules live in
``ragbot.stores.generation_rules``, which the store adapters import; this module picks the adapter.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ragbot.definition import DocumentDefinition, parse_definition
from ragbot.ports import Generation, Generations, SearchStore
from ragbot.settings import StoreSettings
from ragbot.stores.generation_rules import (
    LEGACY,
    check_generation_id,
    embedded_file,
    es_prefix,
    generation_id,
    stores_what,
)

__all__ = [
    "LEGACY",
    "OpenedGeneration",
    "build_generations",
    "check_generation_id",
    "embedded_file",
    "es_prefix",
    "generation_id",
    "open_generation",
    "read_live",
    "settings_for",
    "stores_what",
]


def settings_for(settings: StoreSettings, generation: str) -> StoreSettings:
    """The store settings that make ``build_store`` open one generation."""
    return settings.model_copy(
        update={
            "es_index_prefix": es_prefix(settings.es_index_prefix, generation),
            "embedded_path": embedded_file(settings.embedded_path, generation),
        }
    )


def build_generations(settings: StoreSettings) -> Generations:
    """The configured store's generations (nothing is opened or connected yet)."""
    if settings.backend == "elasticsearch":
        from ragbot.stores.elasticsearch.generations import ElasticsearchGenerations

        return ElasticsearchGenerations(settings=settings)
    from ragbot.stores.embedded.generations import EmbeddedGenerations

    return EmbeddedGenerations(path=settings.embedded_path)


async def read_live(settings: StoreSettings) -> Generation:
    """The generation readers query now (``LEGACY`` before any re-embed), its pointer closed after."""
    generations = build_generations(settings)
    try:
        return await generations.live()
    finally:
        await generations.close()


@dataclass(frozen=True, slots=True)
class OpenedGeneration:
    """A generation's store with the definition and dimensions its paragraphs were embedded with."""

    generation: Generation
    store: SearchStore
    definition: DocumentDefinition
    dimensions: Mapping[str, int]


def open_generation(
    *,
    settings: StoreSettings,
    generation: Generation,
    configured: DocumentDefinition,
    configured_dimensions: Mapping[str, int],
) -> OpenedGeneration:
    """The store of ``generation`` (not connected yet), read with the generation's own definition.

    A generation without recorded meta (made before generations existed) is read with the
    configured definition, as it always was.
    """
    from ragbot.stores import build_store

    if generation.definition is None:
        definition, dimensions = configured, dict(configured_dimensions)
    else:
        definition = parse_definition(
            dict(generation.definition), origin=f"generation {generation.generation_id}"
        )
        dimensions = dict(generation.dimensions)
    store = build_store(
        settings=settings_for(settings, generation.generation_id),
        definition=definition,
        dimensions=dimensions,
    )
    return OpenedGeneration(generation=generation, store=store, definition=definition, dimensions=dimensions)
