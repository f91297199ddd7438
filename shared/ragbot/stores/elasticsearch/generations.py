"""Index generations on Elasticsearch: meta in ``<prefix>-generations``, the pointer an alias.

* A generation's indices are ``<prefix>-g<fp8>_<bucket>`` (``stores.generations.es_prefix``), each
  generation with its own index template; ``LEGACY`` is ``<prefix>_<bucket>``, what ragbot wrote
  before generations existed.
* Its meta (fingerprint, definition, dimensions, paragraph options) is one document of the small
  index ``<prefix>-generations`` (which no ``<prefix>_*`` or ``<prefix>-g*_*`` pattern matches).
* The live generation is the one the alias ``<prefix>-live`` points at; no alias means ``LEGACY``
  (so a deployment that never re-embedded reads what it always read). ``switch`` moves the alias in
  ONE ``_aliases`` request (remove from the old indices, add to the new), which Elasticsearch applies
  atomically: every reader resolves the alias to the old or to the new generation, never to both.
  Each generation gets its bucket-0 index when recorded, so the alias always has an index to name.
  ragbot's readers search the live generation's pattern ``<prefix>-g<fp8>_*`` (the alias only tells
  them which one), so a bucket index created after the switch is searched although the alias does
  not name it; tools outside ragbot that search the alias see the buckets that existed at the switch.
"""

from __future__ import annotations

import re
from typing import Any

from elasticsearch import AsyncElasticsearch

from ragbot.errors import ConfigurationError
from ragbot.ports import Generation
from ragbot.settings import StoreSettings
from ragbot.stores.elasticsearch.store import build_client, es_errors
from ragbot.stores.generation_rules import LEGACY, check_generation_id, es_prefix
from ragbot.stores.mapping import index_name, index_pattern, template_name

_BUCKET = re.compile(r"_\d+$")


def meta_index(prefix: str) -> str:
    """The index holding one meta document per generation."""
    return f"{prefix}-generations"


def live_alias(prefix: str) -> str:
    """The alias naming the live generation's indices."""
    return f"{prefix}-live"


class ElasticsearchGenerations:
    """``Generations`` on Elasticsearch; see the module docstring."""

    def __init__(self, *, settings: StoreSettings, client: AsyncElasticsearch | None = None) -> None:
        self._settings = settings
        self._prefix = settings.es_index_prefix
        self._client_given = client
        self._client_obj = client

    @property
    def _client(self) -> AsyncElasticsearch:
        if self._client_obj is None:
            self._client_obj = build_client(self._settings)
        return self._client_obj

    def _generation_of(self, index: str) -> str:
        """The generation an index belongs to, from its name."""
        head = _BUCKET.sub("", index)
        if head == self._prefix:
            return LEGACY
        if head.startswith(f"{self._prefix}-"):
            return check_generation_id(head[len(self._prefix) + 1 :])
        raise ConfigurationError(f"index {index} under {live_alias(self._prefix)} is not ragbot's")

    async def live(self) -> Generation:
        """The generation the alias names (``LEGACY`` when there is no alias yet)."""
        async with es_errors("reading the live alias"):
            resp = await self._client.options(ignore_status=404).indices.get_alias(
                name=live_alias(self._prefix)
            )
        names = list(resp.body) if resp.meta.status == 200 else []
        found = {self._generation_of(n) for n in names}
        if len(found) > 1:  # never made by switch (one request); refuse rather than mix
            raise ConfigurationError(
                f"alias {live_alias(self._prefix)} names indices of several generations {sorted(found)}"
            )
        generation_id = found.pop() if found else LEGACY
        return await self.get(generation_id=generation_id) or Generation(generation_id)

    async def get(self, *, generation_id: str) -> Generation | None:
        """The generation's meta document, or None."""
        check_generation_id(generation_id)
        async with es_errors(f"reading generation {generation_id}"):
            resp = await self._client.options(ignore_status=404).get(
                index=meta_index(self._prefix), id=generation_id
            )
        if resp.meta.status == 404 or not resp.body.get("found"):
            return None
        doc: dict[str, Any] = resp.body["_source"]
        return Generation(
            generation_id=generation_id,
            fingerprint=doc.get("fingerprint"),
            definition=doc.get("definition"),
            dimensions=dict(doc.get("dimensions") or {}),
            split=dict(doc.get("split") or {}),
        )

    async def record(self, generation: Generation) -> None:
        """Write the meta document and create the generation's bucket-0 index (idempotent)."""
        check_generation_id(generation.generation_id)
        body = {
            "fingerprint": generation.fingerprint,
            "definition": dict(generation.definition) if generation.definition is not None else None,
            "dimensions": dict(generation.dimensions),
            "split": dict(generation.split),
        }
        async with es_errors(f"recording generation {generation.generation_id}"):
            await self._client.options(ignore_status=400).indices.create(
                index=meta_index(self._prefix), mappings={"dynamic": False}
            )
            await self._client.index(
                index=meta_index(self._prefix), id=generation.generation_id, document=body, refresh=True
            )

    async def ensure_index(self, *, generation_id: str) -> None:
        """Create the generation's bucket-0 index from its template (which must be installed)."""
        prefix = es_prefix(self._prefix, generation_id)
        async with es_errors(f"creating the first index of generation {generation_id}"):
            await self._client.options(ignore_status=400).indices.create(index=index_name(prefix, 0))

    async def switch(self, *, to: str) -> None:
        """Move the alias from every index of the live generation to every index of ``to``, in one
        ``_aliases`` request."""
        await self.ensure_index(generation_id=to)
        alias = live_alias(self._prefix)
        async with es_errors(f"switching {alias} to generation {to}"):
            current = await self._client.options(ignore_status=404).indices.get_alias(name=alias)
            actions: list[dict[str, Any]] = [
                {"remove": {"index": name, "alias": alias}}
                for name in (list(current.body) if current.meta.status == 200 else [])
            ]
            actions.append({"add": {"index": index_pattern(es_prefix(self._prefix, to)), "alias": alias}})
            await self._client.indices.update_aliases(actions=actions)

    async def drop(self, *, generation_id: str) -> None:
        """Delete the generation's indices, template and meta; refuses the live one."""
        if (await self.live()).generation_id == generation_id:
            raise ConfigurationError(f"generation {generation_id} is live; switch away before dropping it")
        prefix = es_prefix(self._prefix, generation_id)
        async with es_errors(f"dropping generation {generation_id}"):
            names = list(
                (await self._client.indices.get(index=index_pattern(prefix), allow_no_indices=True)).body
            )
            for start in range(0, len(names), 50):  # wildcard deletes are refused: name them
                await self._client.indices.delete(index=",".join(names[start : start + 50]))
            await self._client.options(ignore_status=404).indices.delete_index_template(
                name=template_name(prefix)
            )
            await self._client.options(ignore_status=404).delete(
                index=meta_index(self._prefix), id=generation_id, refresh=True
            )

    async def drop_all(self) -> None:
        """Delete the meta index and the alias (tests; generations' indices go with their prefix)."""
        async with es_errors("dropping the generation meta"):
            await self._client.options(ignore_status=404).indices.delete(index=meta_index(self._prefix))

    async def close(self) -> None:
        """Close the client if this object created it."""
        if self._client_obj is not None and self._client_given is None:
            await self._client_obj.close()
        self._client_obj = self._client_given
