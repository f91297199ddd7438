"""Which index generations a command writes, each with its own definition, models and store.

Normally one: the live generation, embedded with the definition it was built with (recorded in its
meta), whatever the definition file says now. While a re-embed runs (``ReembedStates``), pings,
deletes and reindex batches also go to the generation being built, with its definition; a
re-embed's own batches name their target and go there only, and are skipped once their build was
aborted (``batch_contexts``). The re-embed mark is read before the
pointer on every command (the switch moves the pointer first, then clears the mark), so no command
ever writes only to a generation that stopped being live.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Mapping

from ragbot.definition import DocumentDefinition
from ragbot.messaging.reembed import ReembedStates
from ragbot.ports import Embedder, Generation, Generations
from ragbot.settings import StoreSettings
from ragbot.stores.generations import LEGACY, open_generation
from ragbot_embedder.service import IndexingContext

logger = logging.getLogger(__name__)

EmbeddersFor = Callable[[DocumentDefinition], Mapping[str, Embedder]]


async def adopt_live(*, generations: Generations, configured: Generation) -> Generation:
    """The live generation; one made before generations existed is recorded as the configured one's
    (what has been writing it), so that a later re-embed knows how to keep it fresh."""
    live = await generations.live()
    if live.generation_id == LEGACY and live.definition is None:
        live = dataclasses.replace(configured, generation_id=LEGACY)
        await generations.record(live)
        logger.info("recorded the index made before generations as generation %s", LEGACY)
    elif live.fingerprint != configured.fingerprint:
        logger.warning(
            "the definition file differs from the live generation's; writing %s with its own "
            "definition until `ragbot reembed` builds and switches to %s",
            live.generation_id,
            configured.generation_id,
            extra={"live": live.fingerprint, "configured": configured.fingerprint},
        )
    return live


class WorkerGenerations:
    """A worker process's view of the generations: one ``IndexingContext`` per generation it writes."""

    def __init__(
        self,
        *,
        template: IndexingContext,
        configured: Generation,
        generations: Generations,
        states: ReembedStates,
        store_settings: StoreSettings,
        embedders_for: EmbeddersFor,
    ) -> None:
        self.template = template
        self.configured = configured
        self.generations = generations
        self.states = states
        self._store_settings = store_settings
        self._embedders_for = embedders_for
        # Models by the names a definition uses: a name resolves to one model, whatever fields it embeds.
        self._models: dict[tuple[str, ...], Mapping[str, Embedder]] = {
            tuple(sorted(template.definition.model_names)): template.embedders
        }
        self._meta: dict[str, Generation] = {}
        self._contexts: dict[str, IndexingContext] = {}

    async def contexts(self, *, generation: str | None) -> list[IndexingContext]:
        """The contexts to run a command in: the named generation's, or the live one's (first) and,
        while a re-embed builds, the target's. Empty when the named generation is gone."""
        if generation is not None:
            meta = await self._generation(generation)
            return [] if meta is None else [await self._context(meta)]
        state = await self.states.get()
        live = await self.generations.live()
        wanted = [live]
        if state is not None and state.target != live.generation_id:
            target = await self._generation(state.target)
            if target is not None:
                wanted.append(target)
        await self._forget(keep={g.generation_id for g in wanted})
        return [await self._context(g) for g in wanted]

    async def batch_contexts(self, *, generation: str) -> list[IndexingContext]:
        """The context of a re-embed batch's target while it is being built (or live, once switched);
        empty when its build was aborted, so that its queued batches are skipped."""
        state = await self.states.get()
        if state is not None and state.target == generation:
            return await self.contexts(generation=generation)
        live = await self.generations.live()
        if live.generation_id == generation:
            return await self.contexts(generation=generation)
        return []

    async def drop_contexts(self, *, generation: str) -> list[IndexingContext]:
        """The context to drop a generation in; empty while a re-embed builds it again (an aborted
        build's delayed drop must not delete the next build of the same definition)."""
        state = await self.states.get()
        if state is not None and state.target == generation:
            return []
        return await self.contexts(generation=generation)

    async def _generation(self, generation_id: str) -> Generation | None:
        """A generation's meta (cached: a generation's meta never changes)."""
        if generation_id not in self._meta:
            found = await self.generations.get(generation_id=generation_id)
            if found is None:
                return None
            self._meta[generation_id] = found
        return self._meta[generation_id]

    async def _context(self, generation: Generation) -> IndexingContext:
        cached = self._contexts.get(generation.generation_id)
        if cached is not None:
            return cached
        opened = open_generation(
            settings=self._store_settings,
            generation=generation,
            configured=self.template.definition,
            configured_dimensions=self.configured.dimensions,
        )
        key = tuple(sorted(opened.definition.model_names))
        if key not in self._models:
            logger.info("loading the models of generation %s", generation.generation_id)
            self._models[key] = await asyncio.to_thread(self._load, opened.definition)
        split = generation.split
        ctx = dataclasses.replace(
            self.template,
            definition=opened.definition,
            embedders=self._models[key],
            store=opened.store,
            store_ready=False,
            max_tokens=int(split.get("max_tokens", self.template.max_tokens)),
            link_targets=split.get("link_targets", self.template.link_targets),
        )
        self._contexts[generation.generation_id] = ctx
        return ctx

    def _load(self, definition: DocumentDefinition) -> Mapping[str, Embedder]:
        embedders = self._embedders_for(definition)
        for embedder in embedders.values():
            embedder.warm_up()
        return embedders

    async def _forget(self, *, keep: set[str]) -> None:
        """Close the stores of generations no longer written (switched away from, or dropped)."""
        for generation_id in [g for g in self._contexts if g not in keep]:
            ctx = self._contexts.pop(generation_id)
            self._meta.pop(generation_id, None)
            await ctx.store.close()

    async def drop(self, *, generation_id: str) -> None:
        """Delete a generation (never the live one) and forget it here."""
        await self._forget(keep=set(self._contexts) - {generation_id})
        await self.generations.drop(generation_id=generation_id)

    async def close(self) -> None:
        """Close every generation's store and the pointer's connections."""
        await self._forget(keep=set())
        await self.generations.close()
