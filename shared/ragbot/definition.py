"""The document definition file (kolzchut-ragbot's JSON format): load, validate once, derive fields.

Format (unchanged from kolzchut-ragbot, with one backward-compatible extension: a model may embed a list
of fields)::

    {"identifier_field": "page_id",
     "saved_fields": {"title": "text", "page_id": "integer", "content": "text", ...},
     "field_for_llm": "content",
     "models": {"model_name": "content", "other_model": ["title", "content"]}}
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ragbot.errors import ConfigurationError

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
    for model, fields in models_raw.items():
        if not isinstance(model, str) or not model or model != model.strip():
            raise ConfigurationError(f"{origin}: models has an invalid model name {model!r}")
        names = (fields,) if isinstance(fields, str) else fields
        if not isinstance(names, list | tuple) or not names or not all(isinstance(n, str) for n in names):
            raise ConfigurationError(f"{origin}: models.{model} must be a field name or a list of them")
        for field in names:
            if field not in saved:
                raise ConfigurationError(f"{origin}: models.{model} embeds {field!r}, not in saved_fields")
            if saved[field] != "text":
                raise ConfigurationError(
                    f"{origin}: models.{model} embeds {field!r}, which is not a text field"
                )
        models[model] = tuple(dict.fromkeys(names))
    return DocumentDefinition(
        identifier_field=ident, saved_fields=dict(saved), field_for_llm=llm_field, models=models
    )


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
    """The definition as its file would hold it (models always as lists), for storing with an index."""
    return {
        "identifier_field": definition.identifier_field,
        "saved_fields": dict(definition.saved_fields),
        "field_for_llm": definition.field_for_llm,
        "models": {model: list(fields) for model, fields in definition.models.items()},
    }


def fingerprint(
    definition: DocumentDefinition, *, dimensions: Mapping[str, int], split: Mapping[str, Any]
) -> str:
    """sha256 of what decides an index's content: models, fields, dimensions, paragraph options.

    Canonical JSON (sorted keys, no spaces), so the same inputs give the same fingerprint in every
    process; any change to one of them gives another (and so a new index generation).
    """
    canonical = {
        "definition": definition_to_json(definition),
        "dimensions": {name: int(dims) for name, dims in dimensions.items()},
        "split": dict(split),
    }
    text = json.dumps(canonical, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
