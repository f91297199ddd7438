"""Index generations of either store: their names, where each lives, and the configured pointer.

A generation is named after its fingerprint (``g`` + its first 8 hex digits); ``LEGACY`` is what
was written before generations existed (the configured index prefix or file itself), and stays the
live generation until the first ``ragbot reembed`` switches away from it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ragbot.definition import DocumentDefinition, parse_definition, stored_form
from ragbot.errors import ConfigurationError
from ragbot.ports import Generation, Generations, SearchStore
from ragbot.settings import StoreSettings

LEGACY = "legacy"
_ID_CHARS = frozenset("0123456789abcdef")


def generation_id(fingerprint: str) -> str:
    """The generation a fingerprint names: ``g<first 8 hex digits>``."""
    head = fingerprint[:8].lower()
    if len(head) != 8 or not set(head) <= _ID_CHARS:
        raise ConfigurationError(f"not a sha256 fingerprint: {fingerprint!r}")
    return f"g{head}"


def check_generation_id(value: str) -> str:
    """A generation id from outside (a message, the pointer file), refused unless well formed."""
    if value == LEGACY or (len(value) == 9 and value[0] == "g" and set(value[1:]) <= _ID_CHARS):
        return value
    raise ConfigurationError(f"not a generation id: {value!r}")


def es_prefix(prefix: str, generation: str) -> str:
    """The index prefix of a generation: ``<prefix>-g<fp8>`` (its indices are ``<that>_<bucket>``)."""
    return prefix if check_generation_id(generation) == LEGACY else f"{prefix}-{generation}"


def embedded_file(path: Path, generation: str) -> Path:
    """The SQLite file of a generation, beside the configured one: ``<stem>.g<fp8><suffix>``."""
    if check_generation_id(generation) == LEGACY:
        return path
    return path.with_name(f"{path.stem}.{generation}{path.suffix}")


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


def stores_what(generation: Generation, definition: DocumentDefinition) -> bool:
    """True when ``generation`` stores the fields and models ``definition`` says (languages and weights
    aside), or was made before generations recorded a definition."""
    if generation.definition is None:
        return True
    own = parse_definition(dict(generation.definition), origin=f"generation {generation.generation_id}")
    return stored_form(own) == stored_form(definition)


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
