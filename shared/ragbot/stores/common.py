"""What both stores share, so their semantics cannot drift: ids, sources, filters, BM25 fields."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any

import numpy as np

from ragbot.definition import DocumentDefinition, is_vector_field
from ragbot.errors import ValidationFailed
from ragbot.ports import Filters, PageWrite, StoredParagraph, Vector
from ragbot.text import analyze

BM25_SUFFIX = "__bm25"
# Field types a filter may name: equality or any-of on exact values.
FILTERABLE_TYPES = frozenset({"keyword", "integer", "long", "boolean"})
INTEGER_TYPES = frozenset({"integer", "long"})
# Elasticsearch caps k and num_candidates at 10000; the embedded store keeps the same limit.
MAX_K = 10_000
# BM25 over these fields unless the caller names fields (title^2 measured no better on HeQ).
DEFAULT_BM25_FIELDS: tuple[str, ...] = ("title", "content")


def doc_id(page_id: int, revision_id: int, paragraph: int) -> str:
    """The id of a paragraph: idempotent writes, and the page is readable from the id."""
    return f"{page_id}-{revision_id}-{paragraph}"


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"cannot store a {type(value).__name__} in a paragraph source")


def prepare_source(paragraph: StoredParagraph, *, now: datetime | None = None) -> dict[str, Any]:
    """The paragraph's stored source: its fields plus ids, JSON-plain, without vectors."""
    source = {
        k: v for k, v in paragraph.fields.items() if not is_vector_field(k) and not k.endswith(BM25_SUFFIX)
    }
    source.update(
        doc_id=paragraph.doc_id,
        page_id=paragraph.page_id,
        revision_id=paragraph.revision_id,
        paragraph=paragraph.paragraph,
    )
    if not source.get("last_update"):
        source["last_update"] = (now or datetime.now(UTC)).isoformat(timespec="milliseconds")
    plain: dict[str, Any] = json.loads(json.dumps(source, default=_json_default, ensure_ascii=False))
    return plain


def _type_ok(ftype: str, value: Any) -> bool:
    if isinstance(value, dict):
        return False
    if ftype == "text":
        return isinstance(value, str)
    if ftype == "keyword":
        return isinstance(value, str | int | float | bool)
    if ftype == "boolean":
        return isinstance(value, bool) or value in ("true", "false")
    if ftype in INTEGER_TYPES:
        if isinstance(value, bool):
            return False
        if isinstance(value, int) or (isinstance(value, float) and value.is_integer()):
            return True
        return isinstance(value, str) and value.strip().lstrip("-").isdigit()
    if ftype == "float":
        if isinstance(value, bool):
            return False
        try:
            return math.isfinite(float(value))
        except (TypeError, ValueError):
            return False
    if ftype == "date":
        return isinstance(value, str) and parse_last_update(value) is not None and not value.isdigit()
    return True


def check_field_types(source: Mapping[str, Any], *, definition: DocumentDefinition) -> None:
    """Refuse values a field's type cannot hold, on every store (Elasticsearch's mapping would)."""
    types = definition.all_fields
    for name, value in source.items():
        ftype = types.get(name)
        if ftype is None or value is None:
            continue
        for item in value if isinstance(value, list) else [value]:
            if item is not None and not _type_ok(ftype, item):
                raise ValidationFailed(
                    f"paragraph {source.get('doc_id')}: field {name!r} ({ftype}) cannot hold {item!r}",
                    field=f"paragraphs.{name}",
                )


def dumps_source(source: Mapping[str, Any]) -> str:
    """JSON text of a prepared source."""
    return json.dumps(source, ensure_ascii=False, separators=(",", ":"))


def strip_internal(source: Mapping[str, Any]) -> dict[str, Any]:
    """A source as results show it: no vector fields, no analyzed BM25 copies."""
    return {k: v for k, v in source.items() if not is_vector_field(k) and not k.endswith(BM25_SUFFIX)}


def parse_last_update(value: Any) -> datetime | None:
    """A stored ``last_update`` back into an aware datetime."""
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def validate_paragraphs(
    *,
    page_id: int,
    revision_id: int,
    paragraphs: Sequence[StoredParagraph],
    dimensions: Mapping[str, int],
) -> None:
    """Refuse a write that would leave the page inconsistent or a vector the store cannot search."""
    seen: set[str] = set()
    for p in paragraphs:
        if p.page_id != page_id or p.revision_id != revision_id:
            raise ValidationFailed(
                f"paragraph {p.doc_id} belongs to page {p.page_id} revision {p.revision_id}, "
                f"not page {page_id} revision {revision_id}",
                field="paragraphs",
            )
        if p.doc_id != doc_id(p.page_id, p.revision_id, p.paragraph):
            raise ValidationFailed(
                f"paragraph id {p.doc_id!r} is not {doc_id(p.page_id, p.revision_id, p.paragraph)!r} "
                "(page-revision-paragraph)",
                field="paragraphs",
            )
        if p.doc_id in seen:
            raise ValidationFailed(f"paragraph id {p.doc_id} appears twice", field="paragraphs")
        seen.add(p.doc_id)
        for name, vector in p.vectors.items():
            if name not in dimensions:
                raise ValidationFailed(f"unknown vector field {name!r} on {p.doc_id}", field=name)
            check_vector(name=name, vector=vector, dimension=dimensions[name])


def check_vector(*, name: str, vector: Vector, dimension: int) -> None:
    """A vector must have the field's dimension and a non-zero, finite norm (cosine needs one)."""
    arr = np.asarray(vector)
    if arr.ndim != 1 or arr.shape[0] != dimension:
        raise ValidationFailed(f"{name} expects {dimension} dimensions, got shape {arr.shape}", field=name)
    norm = float(np.linalg.norm(arr))
    if not math.isfinite(norm) or norm == 0.0:
        raise ValidationFailed(f"{name}: a vector must be finite and non-zero for cosine", field=name)


def check_window(*, limit: int, offset: int) -> None:
    """A page listing asks for 1..MAX_K pages from offset >= 0 on every store."""
    if not 1 <= limit <= MAX_K:
        raise ValidationFailed(f"limit must be between 1 and {MAX_K}, got {limit}", field="limit")
    if offset < 0:
        raise ValidationFailed(f"offset must be >= 0, got {offset}", field="offset")


def check_k(k: int) -> None:
    """k is 1..MAX_K on every store."""
    if not 1 <= k <= MAX_K:
        raise ValidationFailed(f"k must be between 1 and {MAX_K}, got {k}", field="k")


@dataclass(frozen=True, slots=True)
class Filter:
    """One validated filter: a field, its type, and the values any of which may match."""

    field: str
    type: str
    values: tuple[str | int | bool, ...]


def _coerce(field: str, ftype: str, value: Any) -> str | int | bool:
    where = f"filters.{field}"
    if ftype == "boolean":
        if isinstance(value, bool):
            return value
        raise ValidationFailed(f"filter {field!r} takes true or false, got {value!r}", field=where)
    if ftype in INTEGER_TYPES:
        if isinstance(value, bool):
            raise ValidationFailed(f"filter {field!r} takes integers, got {value!r}", field=where)
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str) and value.strip().lstrip("-").isdigit():
            return int(value)
        raise ValidationFailed(f"filter {field!r} takes integers, got {value!r}", field=where)
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    raise ValidationFailed(f"filter {field!r} takes strings, got {value!r}", field=where)


def validate_filters(filters: Filters | None, *, definition: DocumentDefinition) -> list[Filter]:
    """Check filter fields against the definition; unknown or unfilterable fields are named."""
    if not filters:
        return []
    fields = definition.all_fields
    out: list[Filter] = []
    for name, raw in filters.items():
        ftype = fields.get(name)
        if ftype is None:
            raise ValidationFailed(f"unknown filter field {name!r}", field=f"filters.{name}")
        if ftype not in FILTERABLE_TYPES:
            raise ValidationFailed(
                f"filter field {name!r} has type {ftype}; only {sorted(FILTERABLE_TYPES)} can be filtered",
                field=f"filters.{name}",
            )
        values = raw if isinstance(raw, list | tuple) else [raw]
        out.append(Filter(name, ftype, tuple(dict.fromkeys(_coerce(name, ftype, v) for v in values))))
    return out


def bm25_fields(fields: Sequence[str] | None, *, text_fields: Sequence[str]) -> list[tuple[str, float]]:
    """``["title^2", "content"]`` into ``[("title", 2.0), ("content", 1.0)]``; text fields only."""
    requested = list(fields) if fields else [f for f in DEFAULT_BM25_FIELDS if f.split("^")[0] in text_fields]
    if not requested:
        requested = list(text_fields)
    out: dict[str, float] = {}
    for spec in requested:
        name, _, weight_text = spec.partition("^")
        if name not in text_fields:
            raise ValidationFailed(
                f"BM25 field {name!r} is not a text field (text fields: {list(text_fields)})", field="fields"
            )
        try:
            weight = float(weight_text) if weight_text else 1.0
        except ValueError:
            raise ValidationFailed(f"BM25 field weight in {spec!r} is not a number", field="fields") from None
        # Elasticsearch's combined_fields (BM25F) refuses boosts below 1; keep the rule on every store.
        if not math.isfinite(weight) or weight < 1.0:
            raise ValidationFailed(f"BM25 field weight in {spec!r} must be >= 1", field="fields")
        out[name] = weight
    return list(out.items())


# Elasticsearch only: one indexed field holding the analyzed default BM25 fields (title and content)
# back to back. With every weight 1, BM25 over it is the BM25F of those fields (tf, length and the
# documents having the term all add up the same way), and a plain term query over one field lets
# Lucene skip the documents that cannot make the top k, which combined_fields cannot (docs/benchmarks.md).
DEFAULT_BM25_FIELD = f"ragbot_default{BM25_SUFFIX}"


def default_bm25_fields(text_fields: Sequence[str]) -> list[str] | None:
    """The fields ``DEFAULT_BM25_FIELD`` concatenates: the default BM25 fields when all weigh 1."""
    weighted = bm25_fields(None, text_fields=text_fields)
    return [name for name, _ in weighted] if all(w == 1.0 for _, w in weighted) else None


def analyzed_text(value: Any) -> str:
    """The analyzed copy of a text value both stores index: ``analyze()`` tokens joined by spaces."""
    if value is None:
        return ""
    if isinstance(value, list | tuple):
        return " ".join(" ".join(analyze(str(v))) for v in value if v is not None)
    return " ".join(analyze(str(value)))


def text_fields_of(definition: DocumentDefinition) -> tuple[str, ...]:
    """Every text field BM25 can search: saved text fields, then ragbot's own (heading)."""
    return tuple(name for name, ftype in definition.all_fields.items() if ftype == "text")


def query_tokens(query: str) -> list[str]:
    """Analyzed query tokens, each once (a repeated word does not count twice on either store)."""
    return list(dict.fromkeys(analyze(query)))


def check_knn_query(
    *,
    vector_field: str,
    vector: Vector,
    k: int,
    filters: Filters | None,
    dimensions: Mapping[str, int],
    definition: DocumentDefinition,
) -> list[Filter]:
    """Check a kNN query the same way on every store; returns its validated filters."""
    check_k(k)
    if vector_field not in dimensions:
        raise ValidationFailed(
            f"unknown vector field {vector_field!r} (searchable: {sorted(dimensions)})",
            field="vector_field",
        )
    check_vector(name=vector_field, vector=vector, dimension=dimensions[vector_field])
    return validate_filters(filters, definition=definition)


Prepared = list[tuple[StoredParagraph, dict[str, Any]]]


def prepare_writes(
    writes: Sequence[PageWrite], *, dimensions: Mapping[str, int], definition: DocumentDefinition
) -> tuple[dict[int, Prepared], dict[int, Exception]]:
    """Each page's paragraphs validated, with their sources (``prepare_source``, types checked).

    Returns (page id -> prepared paragraphs, page id -> why it was refused): one bad page is refused
    alone. The same page twice is the caller's bug (ValueError, before anything is looked at).
    """
    if len({w.page_id for w in writes}) != len(writes):
        raise ValueError("replace_pages was given the same page twice")
    ready: dict[int, Prepared] = {}
    refused: dict[int, Exception] = {}
    for w in writes:
        try:
            validate_paragraphs(
                page_id=w.page_id, revision_id=w.revision_id, paragraphs=w.paragraphs, dimensions=dimensions
            )
            prepared = [(p, prepare_source(p)) for p in w.paragraphs]
            for _, source in prepared:
                check_field_types(source, definition=definition)
        except (ValidationFailed, TypeError, ValueError) as exc:
            refused[w.page_id] = exc
            continue
        ready[w.page_id] = prepared
    return ready, refused
