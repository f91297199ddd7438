"""kolzchut-ragbot's factories: ``engine_factory``, ``es_client_factory`` and the low-level ``Model``."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from ragbot.compat.kolzchut.engine import Engine
from ragbot.definition import DocumentDefinition
from ragbot.ports import Embedder, SearchStore


class Model:
    """kolzchut-ragbot's low-level ``Model``: writes documents that already carry their vectors.

    It writes through the engine ``engine_factory`` holds for the same ``es_client`` (found when it
    is first used, so calling ``es_client_factory`` before ``engine_factory`` shares one engine).
    """

    def __init__(self, es_client: Any = None, engine: Engine | None = None) -> None:
        self.es_client = es_client
        self._engine = engine

    @property
    def engine(self) -> Engine:
        """The engine that writes for this model."""
        if self._engine is None:
            self._engine = _engine_for_client(self.es_client)
        return self._engine

    def create_or_update_documents(
        self, paragraphs_dicts: list[dict[str, Any]], update: bool = False
    ) -> None:
        """Write pre-embedded paragraphs of one page; ``update=True`` replaces the page's old copy."""
        if not paragraphs_dicts:
            return
        engine = self.engine
        page_id = engine._single_page(paragraphs_dicts)
        engine._write([(page_id, paragraphs_dicts)], wanted=set(), delete_existing=update)


_ENGINES: dict[tuple[int, ...], tuple[tuple[Any, ...], Engine]] = {}
_ENGINES_LOCK = threading.Lock()


def engine_factory(
    configs_class: Any = None,
    es_client: Any = None,
    *,
    store: SearchStore | None = None,
    embedders: Mapping[str, Embedder] | None = None,
    definition: DocumentDefinition | None = None,
) -> Engine:
    """The shared ``Engine`` for these arguments, built lazily (nothing loads until first use).

    Unlike kolzchut-ragbot's global singleton, the cache is keyed by the arguments' identities: calling
    again with the same objects returns the same engine (so the models load once), calling with
    different ones builds a new engine instead of silently ignoring them. The cache holds the
    arguments, so their identities stay unique; ``clear_engine_cache()`` empties it. Tests can also
    construct ``Engine(...)`` directly.
    """
    args = (configs_class, es_client, store, embedders, definition)
    key = tuple(id(a) for a in args)
    with _ENGINES_LOCK:
        cached = _ENGINES.get(key)
        if cached is None:
            engine = Engine(configs_class, es_client, store=store, embedders=embedders, definition=definition)
            cached = _ENGINES[key] = (args, engine)
        return cached[1]


def _engine_for_client(es_client: Any) -> Engine:
    with _ENGINES_LOCK:
        for args, engine in _ENGINES.values():
            if args[1] is es_client:
                return engine
    return engine_factory(None, es_client)


def es_client_factory(es_client: Any = None) -> Model:
    """kolzchut-ragbot's low-level writer for ``es_client``; it shares the engine built for that client."""
    return Model(es_client)


def clear_engine_cache() -> None:
    """Close and forget every engine ``engine_factory`` built."""
    with _ENGINES_LOCK:
        engines = [engine for _, engine in _ENGINES.values()]
        _ENGINES.clear()
    for engine in engines:
        engine.close()
