"""The retriever's live index generation: opened with its own definition, followed when it switches.

At start the retriever reads the live generation (``Generations.live``) and queries it with the
definition recorded in its meta, not the definition file, unless the two store the same fields
(then the file's languages and weights steer fusion at once): a file edited for a re-embed that has
not switched yet never breaks a query. ``follow`` then polls the pointer; when a re-embed switches
it, the new generation's models and store are loaded and warmed beside the old ones, the
``Resources`` are swapped in one assignment each (a request reads them once), and the old store and
models are closed a little later, once the queries that started on them have ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from ragbot.definition import DocumentDefinition, parse_definition
from ragbot.errors import RagbotError
from ragbot.observability.metrics import retrieval_metrics
from ragbot.ports import Embedder, Generation, Generations, Reranker
from ragbot.retrieval import RetrievalDefaults, RetrievalEngine
from ragbot.retrieval.memory import QuestionMemory, check_loaded
from ragbot.retrieval.translation import LexiconTranslator, keep_translating
from ragbot.settings import StoreSettings
from ragbot.stores.generations import LEGACY, OpenedGeneration, open_generation, stores_what
from ragbot_retriever.deps import Resources

logger = logging.getLogger(__name__)

EmbeddersFor = Callable[[DocumentDefinition], Mapping[str, Embedder]]
CLOSE_AFTER_S = 30.0


@dataclass(slots=True)
class Serving:
    """One generation as the retriever serves it."""

    opened: OpenedGeneration
    embedders: Mapping[str, Embedder]
    engine: RetrievalEngine
    # Building the engine's query translator from the store's words (RAGBOT_RETRIEVER_TRANSLATE_QUERIES_TO).
    translating: asyncio.Task[None] | None = None


def definition_for(generation: Generation, configured: DocumentDefinition) -> DocumentDefinition:
    """The definition to query a generation with: the file's when the generation stores what the file
    says (its languages and weights then steer fusion) or was made before generations, else its own."""
    if generation.definition is None or stores_what(generation, configured):
        return configured
    return parse_definition(dict(generation.definition), origin=f"generation {generation.generation_id}")


async def live_or_legacy(generations: Generations) -> Generation:
    """The live generation; ``LEGACY`` with no meta when the store does not answer yet."""
    try:
        return await generations.live()
    except RagbotError as exc:
        logger.warning("could not read the live generation at start (%s); reading %s", exc, LEGACY)
        return Generation(LEGACY)


async def serve(
    *,
    generation: Generation,
    configured: DocumentDefinition,
    store_settings: StoreSettings,
    embedders_for: EmbeddersFor,
    reranker: Reranker | None,
    defaults: RetrievalDefaults,
    store_timeout_s: float,
    reuse: Serving | None = None,
    translate_to: str | None = None,
    vocabulary: int = 20000,
    translation_poll_s: float = 10.0,
    tuned: Mapping[str, Embedder] | None = None,
    memory: QuestionMemory | None = None,
) -> Serving:
    """Load (or reuse, for the same definition) the models of a generation, open and warm its store."""
    definition = definition_for(generation, configured)
    # Query embedders depend on the model only (a name resolves to one model), not on the fields it
    # embeds: a re-embed that keeps the models keeps them loaded, and switches without a load.
    if reuse is not None and set(reuse.embedders) == set(definition.model_names):
        embedders = reuse.embedders
    else:
        embedders = await asyncio.to_thread(_loaded, embedders_for, definition)
    if memory is not None:
        check_loaded(memory, {name: e.dimension for name, e in embedders.items()})
    dimensions = dict(generation.dimensions) or {
        v.name: embedders[v.model].dimension for v in definition.vector_fields
    }
    opened = open_generation(
        settings=store_settings,
        generation=generation,
        configured=definition,
        configured_dimensions=dimensions,
    )
    try:
        await asyncio.wait_for(opened.store.ensure_ready(), timeout=store_timeout_s)
        await opened.store.warm_up()
    except (TimeoutError, RagbotError) as exc:  # start anyway: /readyz and every request say 503
        logger.warning("store not ready (generation %s): %s", generation.generation_id, exc)
    engine = RetrievalEngine(
        store=opened.store,
        embedders=embedders,
        definition=opened.definition,
        reranker=reranker,
        defaults=defaults,
        tuned=tuned,
        memory=memory,
    )
    retrieval_metrics().definition_differs.set(0 if definition is configured else 1)
    if definition is not configured:
        logger.warning(
            "the definition file differs from live generation %s; queries use that generation's "
            "definition until a re-embed switches",
            generation.generation_id,
        )
    translating = None
    if translate_to:
        translating = asyncio.create_task(
            _translate(engine, language=translate_to, vocabulary=vocabulary, poll_s=translation_poll_s)
        )
    return Serving(opened=opened, embedders=embedders, engine=engine, translating=translating)


async def _translate(engine: RetrievalEngine, *, language: str, vocabulary: int, poll_s: float) -> None:
    """Keep the engine's translator built from its store's words; questions search untranslated until
    the first one is ready (``ragbot.retrieval.translation.keep_translating``)."""

    def install_translator(translator: LexiconTranslator) -> None:
        engine.translator = translator

    await keep_translating(
        install_translator,
        store=engine.store,
        definition=engine.definition,
        embedders=engine.embedders,
        language=language,
        limit=vocabulary,
        poll_s=poll_s,
    )


def _loaded(embedders_for: EmbeddersFor, definition: DocumentDefinition) -> Mapping[str, Embedder]:
    embedders = embedders_for(definition)
    for embedder in embedders.values():
        embedder.warm_up()
    return embedders


def install(resources: Resources, serving: Serving) -> None:
    """Point the resources at a generation (each a single assignment)."""
    resources.engine = serving.engine
    resources.store = serving.opened.store
    resources.embedders = serving.embedders
    resources.definition = serving.opened.definition
    resources.extra["generation"] = serving.opened.generation.generation_id
    resources.extra["translating"] = serving.translating


async def close(serving: Serving, *, keep_models: bool) -> None:
    """Close a generation's store, and its models unless the next one shares them."""
    await stop_translating(serving.translating)
    await serving.opened.store.close()
    if not keep_models:
        for embedder in serving.embedders.values():
            embedder.close()


async def stop_translating(task: object) -> None:
    """Cancel a translator build still running (its store is about to close)."""
    if isinstance(task, asyncio.Task) and not task.done():
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def follow(
    *,
    resources: Resources,
    current: Serving,
    generations: Generations,
    poll_s: float,
    load: Callable[[Generation, Serving], Awaitable[Serving]],
    close_after_s: float = CLOSE_AFTER_S,
) -> None:
    """Poll the pointer forever; on a switch, serve the new generation and retire the old one."""
    retiring: set[asyncio.Task[None]] = set()
    while True:
        await asyncio.sleep(poll_s)
        try:
            live = await generations.live()
        except RagbotError as exc:
            logger.warning("could not read the live generation: %s", exc)
            continue
        if live.generation_id == current.opened.generation.generation_id:
            continue
        logger.info(
            "live generation switched from %s to %s",
            current.opened.generation.generation_id,
            live.generation_id,
        )
        try:
            new = await load(live, current)
        except RagbotError as exc:  # keep serving the old one; try again at the next poll
            logger.error("could not open generation %s: %s", live.generation_id, exc)
            continue
        install(resources, new)
        old, current = current, new

        async def retire(old: Serving = old, shared: bool = new.embedders is old.embedders) -> None:
            await asyncio.sleep(close_after_s)
            await close(old, keep_models=shared)

        task = asyncio.create_task(retire())
        retiring.add(task)
        task.add_done_callback(retiring.discard)
