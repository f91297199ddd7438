"""Search stores behind the ``SearchStore`` port: the embedded SQLite store and Elasticsearch.

``build_store`` is the one place that picks the adapter from settings. Both stores pass the same
contract suite (``tests/integration/test_store_contract.py``): doc ids ``page-revision-paragraph``,
kNN scores ``cos + 1`` (0..2), BM25 over ``ragbot.text.analyze`` tokens, results without vectors.
"""

from __future__ import annotations

from collections.abc import Mapping

from ragbot.definition import DocumentDefinition
from ragbot.ports import SearchStore
from ragbot.settings import StoreSettings
from ragbot.stores.common import DEFAULT_BM25_FIELDS, MAX_K, doc_id, strip_internal

__all__ = ["DEFAULT_BM25_FIELDS", "MAX_K", "build_store", "doc_id", "strip_internal"]


def build_store(
    *, settings: StoreSettings, definition: DocumentDefinition, dimensions: Mapping[str, int]
) -> SearchStore:
    """The configured store, not yet opened or connected (call ``ensure_ready``)."""
    if settings.backend == "elasticsearch":
        from ragbot.stores.elasticsearch import ElasticsearchStore

        return ElasticsearchStore(settings=settings, definition=definition, dimensions=dimensions)
    from ragbot.stores.embedded import EmbeddedStore

    return EmbeddedStore(path=settings.embedded_path, definition=definition, dimensions=dimensions)
