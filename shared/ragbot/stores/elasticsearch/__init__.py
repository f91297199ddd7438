"""The Elasticsearch store (official async client, 8.x)."""

from ragbot.stores.elasticsearch.store import ElasticsearchStore

__all__ = ["ElasticsearchStore"]
