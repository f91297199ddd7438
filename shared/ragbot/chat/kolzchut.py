"""The Kol-Zchut chatbot contract: request/response bodies with the field names the MediaWiki extension
KZChatbot uses, and its configuration object, versioned in Redis.

The configuration (``GET /get_config`` / ``POST /set_config``) is read from Redis on every search, so
``set_config`` applies without a restart. Each accepted config gets the next version number; the
previous ones stay in a capped history list. An invalid config is refused with the field named and
leaves the stored one untouched.

Keys: ``p:chat:kolzchut:config`` (current JSON) and ``p:chat:kolzchut:config:versions`` (newest first).

The admin and testing pages (``ragbot_chat.kolzchut_pages``) add the events of ``POST /search/stream``,
the services' pings and the history cleanup; their bodies are here too.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Annotated, Any, Final, Literal

import redis.asyncio as aioredis
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from redis.exceptions import WatchError

from ragbot.errors import ValidationFailed
from ragbot.messaging.redis import redis_guard
from ragbot.prompts import PromptLibrary, render

logger = logging.getLogger(__name__)

TEMPERATURE_MIN: Final = 0.0
TEMPERATURE_MAX: Final = 2.0
TEMPERATURE_STEP: Final = 0.1
VERSIONS_KEPT: Final = 100
REQUIRED_SLOTS: Final = {"user_prompt": ("{question}", "{documents}"), "rephrase_prompt": ("{question}",)}
CONFIG_FIELD_TYPES: Final = {
    "version": "integer",
    "model": "string",
    "num_of_pages": "integer",
    "add_current_page_to_search": "boolean",
    "temperature": "number",
    "system_prompt": "text",
    "user_prompt": "text",
    "banned_fields": "array",
    "rephrase_prompt": "text",
}


PROMPT_MAX_CHARS: Final = 20_000
"""A prompt's longest accepted text: the shipped prompts are under 3,000 characters."""


class KolZchutConfig(BaseModel):
    """The chatbot configuration the Kol-Zchut admin page reads and writes (types are strict, lengths
    bounded: a 422 names the field over its limit)."""

    model_config = ConfigDict(strict=True, extra="forbid")

    version: int = 0
    model: str = Field(min_length=1, max_length=200)
    num_of_pages: int = Field(ge=1)  # the upper bound is the deployment's (ConfigStore.check names it)
    add_current_page_to_search: bool
    temperature: float  # its range is checked by ConfigStore.check, which names the field
    system_prompt: str = Field(min_length=1, max_length=PROMPT_MAX_CHARS)
    user_prompt: str = Field(min_length=1, max_length=PROMPT_MAX_CHARS)
    banned_fields: list[Annotated[str, Field(max_length=200)]] = Field(default_factory=list, max_length=200)
    rephrase_prompt: str = Field(min_length=1, max_length=PROMPT_MAX_CHARS)


class KolZchutConfigIn(KolZchutConfig):
    """``POST /set_config``: the same shape; ``version`` is optional and ignored (the store assigns it)."""

    version: int | None = None  # type: ignore[assignment]


class SearchRequest(BaseModel):
    """``POST /search`` from KZChatbot (and its testing page's extra knobs)."""

    query: str
    asked_from: str | int | None = None
    page_id: int | str | None = None
    rephrase: bool = False
    include_debug_data: bool = False
    send_complete_pages_to_llm: bool = False
    retrieval_size: int | None = Field(default=None, ge=1, le=1000)
    max_documents_from_same_page: int | None = Field(default=None, ge=1, le=1000)


class DocLink(BaseModel):
    """A page the answer is based on."""

    title: str
    url: str | None = None


class SearchResponse(BaseModel):
    """``POST /search``'s answer; the debug fields only with ``include_debug_data``."""

    model_config = ConfigDict(extra="allow")

    gpt_result: str
    docs: list[DocLink]
    conversation_id: str


class RatingRequest(BaseModel):
    """``POST /rating``: like (true), dislike (false) or withdrawn (null), and free text."""

    conversation_id: str
    like: bool | None = None
    free_text: str | None = Field(default=None, max_length=5000)


def rating_from_query(
    *, thread_id: str | None, conversation_id: str | None, score: float | None, free_text: str | None
) -> RatingRequest:
    """The query-string form of ``/rating`` (``?thread_id=…&score=…``): a score above 0 is a like, 0 or
    below a dislike, none withdraws."""
    target = conversation_id or thread_id
    if not target:
        raise ValidationFailed(
            "rating needs a JSON body or ?thread_id= (or ?conversation_id=) in the query string",
            field="thread_id",
        )
    return RatingRequest(
        conversation_id=target, like=None if score is None else score > 0, free_text=free_text
    )


# -- the testing pages' routes -----------------------------------------------------------------------


class StreamSources(BaseModel):
    """``search/stream`` event ``sources``: the pages found, before any token of the answer."""

    event: Literal["sources"] = "sources"
    conversation_id: str
    docs: list[DocLink]
    rephrased_question: str | None = None
    docs_before_filter: list[dict[str, Any]] | None = None


class StreamToken(BaseModel):
    """``search/stream`` event ``token``: the next piece of the answer."""

    event: Literal["token"] = "token"
    text: str


class StreamDone(BaseModel):
    """``search/stream`` event ``done``: exactly ``POST /search``'s body (its debug fields when asked)."""

    model_config = ConfigDict(extra="allow")

    event: Literal["done"] = "done"
    gpt_result: str
    docs: list[DocLink]
    conversation_id: str


class StreamError(BaseModel):
    """``search/stream`` event ``error``: the turn failed; ``status`` is what ``/search`` would answer."""

    event: Literal["error"] = "error"
    detail: str
    dependency: str | None = None
    status: int
    docs: list[DocLink] = Field(default_factory=list)


SEARCH_STREAM_EVENTS: Final = (StreamSources, StreamToken, StreamDone, StreamError)
"""Every event of ``POST /search/stream``, in the order they may come (``sources``, ``token`` events, then
``done`` or ``error``); the SSE ``event:`` name is each model's ``event`` field."""

PingService = Literal["redis", "llm_manager", "es_docker"]


class PingResult(BaseModel):
    """``GET /ping/<service>``: whether that dependency answers (HTTP 200) or not (503)."""

    service: PingService
    status: Literal["ok", "down"]
    detail: str
    elapsed_ms: float


class HistoryCleaned(BaseModel):
    """``POST /clean_redis_history``: how many conversation keys were deleted."""

    sessions: int
    messages: int


def page_plan(*, num_of_pages: int, base: Sequence[int], max_per_page: int | None) -> list[int]:
    """``paragraphs_per_page`` for a search: ``num_of_pages`` entries from ``base`` (padded with its last
    value), each capped by ``max_documents_from_same_page``."""
    plan = [base[i] if i < len(base) else base[-1] for i in range(num_of_pages)]
    if max_per_page is not None:
        plan = [min(n, max_per_page) for n in plan]
    return plan


class ConfigStore:
    """The current Kol-Zchut config and its history in Redis; defaults until the first ``set``."""

    def __init__(
        self,
        *,
        client: aioredis.Redis,
        prefix: str,
        defaults: KolZchutConfig,
        available_models: Sequence[str],
        models_without_temperature: Sequence[str] = (),
        max_num_of_pages: int = 10,
    ) -> None:
        self.client = client
        self.key = f"{prefix}:chat:kolzchut:config"
        self.versions_key = f"{self.key}:versions"
        self.defaults = defaults
        self.available_models = list(dict.fromkeys(available_models))
        self.models_without_temperature = set(models_without_temperature)
        self.max_num_of_pages = max_num_of_pages

    async def get(self) -> KolZchutConfig:
        """The stored config, or the defaults (version 0) when none was ever set."""
        with redis_guard("read the Kol-Zchut config"):
            raw = await self.client.get(self.key)
        if raw is None:
            return self.defaults
        try:
            return KolZchutConfig.model_validate_json(raw)
        except ValidationError as exc:
            logger.error("stored Kol-Zchut config is invalid; using defaults", extra={"error": str(exc)})
            return self.defaults

    def check(self, config: KolZchutConfig) -> None:
        """Refuse what types alone do not catch: unknown model, temperature or page count out of range."""
        if config.model not in self.available_models:
            raise ValidationFailed(
                f"unknown model {config.model!r}; available models: {self.available_models}", field="model"
            )
        if not TEMPERATURE_MIN <= config.temperature <= TEMPERATURE_MAX:
            raise ValidationFailed(
                f"temperature must be between {TEMPERATURE_MIN} and {TEMPERATURE_MAX}", field="temperature"
            )
        if config.num_of_pages > self.max_num_of_pages:
            raise ValidationFailed(
                f"num_of_pages must be between 1 and {self.max_num_of_pages}", field="num_of_pages"
            )
        for name, slots in REQUIRED_SLOTS.items():
            text = getattr(config, name)
            missing = [s for s in slots if s not in text]
            if missing:
                raise ValidationFailed(f"{name} must contain {' and '.join(missing)}", field=name)

    async def set(self, candidate: KolZchutConfigIn) -> KolZchutConfig:
        """Validate, give it the next version, store it and keep the previous ones."""
        fields = candidate.model_dump(exclude={"version"})
        probe = KolZchutConfig(version=0, **fields)
        self.check(probe)
        with redis_guard("store the Kol-Zchut config"):
            async with self.client.pipeline(transaction=True) as pipe:
                while True:
                    try:
                        await pipe.watch(self.key)
                        raw = await pipe.get(self.key)
                        current = self._parse(raw)
                        stored = KolZchutConfig(version=current.version + 1, **fields)
                        body = stored.model_dump_json()
                        pipe.multi()  # type: ignore[no-untyped-call]
                        pipe.set(self.key, body)
                        pipe.lpush(self.versions_key, body)
                        pipe.ltrim(self.versions_key, 0, VERSIONS_KEPT - 1)
                        await pipe.execute()
                        return stored
                    except WatchError:
                        continue

    def _parse(self, raw: Any) -> KolZchutConfig:
        if raw is None:
            return self.defaults
        try:
            return KolZchutConfig.model_validate_json(raw)
        except ValidationError:
            return self.defaults

    def metadata(self) -> dict[str, Any]:
        """``/get_config_metadata``: the models offered, the allowed values and every field's type."""
        return {
            "available_models": {
                name: {"supports_temperature": name not in self.models_without_temperature}
                for name in self.available_models
            },
            "temperature_options": {
                "min": TEMPERATURE_MIN,
                "max": TEMPERATURE_MAX,
                "step": TEMPERATURE_STEP,
                "default": self.defaults.temperature,
            },
            "num_of_pages_options": list(range(1, self.max_num_of_pages + 1)),
            "config_field_types": dict(CONFIG_FIELD_TYPES),
        }


def default_config(
    *,
    prompts: PromptLibrary,
    model: str,
    num_of_pages: int,
    temperature: float,
    mode_name: str,
) -> KolZchutConfig:
    """The config before anyone sets one: Hebrew prompt files, the configured model and defaults.

    The ``quote`` mode calls no LLM, so its config carries the strict mode's instructions (what an
    LLM mode chosen later would read)."""
    instructions = prompts.get("strict" if mode_name == "quote" else mode_name, "he")
    return KolZchutConfig(
        version=0,
        model=model,
        num_of_pages=num_of_pages,
        add_current_page_to_search=False,
        temperature=temperature,
        system_prompt=render(prompts.get("system", "he"), mode_instructions=instructions),
        user_prompt=prompts.get("user", "he"),
        banned_fields=[],
        rephrase_prompt=prompts.get("rephrase", "he"),
    )
