"""``RAGBOT_STORE_ES_URL`` may name several nodes of one cluster: the client gets every one of them."""

from __future__ import annotations

import pytest

from ragbot.definition import parse_definition
from ragbot.settings import StoreSettings
from ragbot.stores.elasticsearch.store import ElasticsearchStore

DEFINITION = parse_definition(
    {
        "identifier_field": "page_id",
        "saved_fields": {"title": "text", "page_id": "integer", "content": "text"},
        "field_for_llm": "content",
        "models": {"all-MiniLM-L6-v2": "content"},
    }
)


@pytest.mark.parametrize(
    ("url", "hosts"),
    [
        ("http://127.0.0.1:9200", {"127.0.0.1:9200"}),
        ("http://127.0.0.1:9271, http://127.0.0.1:9272,", {"127.0.0.1:9271", "127.0.0.1:9272"}),
    ],
)
async def test_every_listed_node_is_in_the_client_pool(url: str, hosts: set[str]) -> None:
    store = ElasticsearchStore(
        settings=StoreSettings(backend="elasticsearch", es_url=url), definition=DEFINITION, dimensions={}
    )
    client = store._client
    try:
        nodes = {f"{n.config.host}:{n.config.port}" for n in client.transport.node_pool.all()}
        assert nodes == hosts
    finally:
        await client.close()
