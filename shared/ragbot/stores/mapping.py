"""Elasticsearch index names and the index template, generated from the document definition.

Indices are ``<prefix>_<page_id // 1000>``: one per bucket of 1000 page ids, so rebuilding a slice of
the corpus is cheap. kolzchut-ragbot used ``round(page_id / 1000)``, which puts pages 0-499 in bucket
0 and 500-1499 in bucket 1; floor division gives 0-999 -> 0, 1000-1999 -> 1. Only the physical
placement differs: every read goes to the pattern ``<prefix>_*``, so readers never see buckets.
Indices written by kolzchut-ragbot keep working for reads; a page moved between bucket rules is found and
replaced by page id across the pattern, never by index name.

Caveat: the pattern ``<prefix>_*`` also matches the indices of a longer prefix that starts with
``<prefix>_`` (``ragbot`` would read ``ragbot_test_3``); give each deployment a prefix that is not
``<another prefix>_...``. The template priority grows with the prefix length so that such templates
never conflict.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ragbot.definition import DocumentDefinition
from ragbot.errors import ConfigurationError
from ragbot.settings import StoreSettings
from ragbot.stores.common import BM25_SUFFIX, DEFAULT_BM25_FIELD, default_bm25_fields, text_fields_of

# Fields indexed for search but never stored in _source nor returned.
SOURCE_EXCLUDES = ("*_vectors", f"*{BM25_SUFFIX}")

PAGES_PER_INDEX = 1000
_SCALAR_TYPES = {"keyword", "integer", "long", "float", "boolean"}
# StoreSettings.vector_search -> dense_vector index_options.type. int8_flat keeps the float vectors
# too (the rescore reads them) beside a quarter-size int8 copy that the brute-force pass scans.
_INDEX_TYPES = {"exact": "flat", "quantized": "int8_flat", "approximate": "hnsw"}


def index_name(prefix: str, page_id: int) -> str:
    """The physical index of a page: ``<prefix>_<page_id // 1000>``."""
    return f"{prefix}_{page_id // PAGES_PER_INDEX}"


def index_pattern(prefix: str) -> str:
    """Where every read goes."""
    return f"{prefix}_*"


def template_name(prefix: str) -> str:
    """The composable index template that maps every ``<prefix>_*`` index."""
    return f"{prefix}-paragraphs"


def properties(
    *, definition: DocumentDefinition, dimensions: Mapping[str, int], vector_search: str
) -> dict[str, Any]:
    """Mapping properties: originals, ``__bm25`` copies, keywords, dates, a dense_vector per field."""
    props: dict[str, Any] = {}
    text_fields = set(text_fields_of(definition))
    for name, ftype in definition.all_fields.items():
        if name in text_fields:
            # The original is kept for reading only; BM25 searches the analyzer's tokens in the copy.
            props[name] = {"type": "text", "index": False}
            props[f"{name}{BM25_SUFFIX}"] = {"type": "text", "analyzer": "whitespace"}
        elif ftype == "date":
            props[name] = {"type": "date"}
        elif ftype in _SCALAR_TYPES:
            props[name] = {"type": ftype}
        else:  # pragma: no cover - parse_definition refuses other types
            raise ConfigurationError(f"saved_fields.{name}: type {ftype!r} has no Elasticsearch mapping")
    if default_bm25_fields(text_fields_of(definition)):
        props[DEFAULT_BM25_FIELD] = {"type": "text", "analyzer": "whitespace"}
    index_type = _INDEX_TYPES[vector_search]
    for vector_field in definition.vector_fields:
        dims = dimensions.get(vector_field.name)
        if dims is None:
            raise ConfigurationError(f"no dimension given for vector field {vector_field.name}")
        props[vector_field.name] = {
            "type": "dense_vector",
            "dims": int(dims),
            "index": True,
            "similarity": "cosine",
            "index_options": {"type": index_type},
        }
    return props


def index_template(
    *, settings: StoreSettings, definition: DocumentDefinition, dimensions: Mapping[str, int]
) -> dict[str, Any]:
    """The body of ``PUT _index_template/<prefix>-paragraphs`` (also usable from a one-shot init job)."""
    prefix = settings.es_index_prefix
    return {
        "index_patterns": [index_pattern(prefix)],
        "priority": 100 + len(prefix),
        "template": {
            "settings": {
                "number_of_shards": settings.es_shards,
                "number_of_replicas": settings.es_replicas,
            },
            "mappings": {
                "dynamic": False,
                # Vectors and the analysed BM25 copies are indexed but not kept in _source: no reader
                # needs them back, and every hit would otherwise parse kilobytes of floats.
                "_source": {"excludes": list(SOURCE_EXCLUDES)},
                "properties": properties(
                    definition=definition, dimensions=dimensions, vector_search=settings.vector_search
                ),
            },
        },
        "_meta": {"managed_by": "ragbot", "vector_search": settings.vector_search},
    }
