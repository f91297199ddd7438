"""A small corpus of four pages in the in-memory store, searched by a ``RetrievalEngine`` with hashed
embedders (``support.fakes``): the engine's own decisions under test without models or a store."""

from __future__ import annotations

from typing import Any

from ragbot.definition import DocumentDefinition, parse_definition
from ragbot.ports import StoredParagraph
from ragbot.retrieval import RetrievalDefaults, RetrievalEngine
from support.fakes import HashEmbedder, MemoryStore

DIM = 64


def definition() -> DocumentDefinition:
    return parse_definition(
        {
            "identifier_field": "page_id",
            "saved_fields": {"title": "text", "page_id": "integer", "content": "text"},
            "field_for_llm": "content",
            "models": {"alpha": "content", "beta": ["title", "content"]},
        }
    )


def embedder(name: str, **options: Any) -> HashEmbedder:
    """The shared hashed bag of words (seeded per model), DIM buckets."""
    return HashEmbedder(name, dimension=DIM, max_tokens=256, **options)


CORPUS = {
    1: (
        "Unemployment benefits",
        [
            "How to claim unemployment benefits",
            "Who is eligible for benefits",
            "Appeals against benefit decisions",
        ],
    ),
    2: ("Maternity leave", ["Length of maternity leave", "Maternity allowance and benefits"]),
    3: ("Rent assistance", ["Rent assistance for new immigrants", "How to apply for rent help"]),
    4: ("Disability pension", ["Disability pension rates", "Medical committee for disability"]),
}


def build(
    embedders: dict[str, HashEmbedder] | None = None, **store_kwargs: Any
) -> tuple[RetrievalEngine, MemoryStore, dict[str, HashEmbedder]]:
    d = definition()
    embs = embedders or {"alpha": embedder("alpha"), "beta": embedder("beta")}
    paragraphs = []
    for page_id, (title, texts) in CORPUS.items():
        for i, text in enumerate(texts):
            fields: dict[str, Any] = {"title": title, "content": text, "page_id": page_id}
            vectors = {
                v.name: embs[v.model].embed_passages([str(fields[v.field])])[0] for v in d.vector_fields
            }
            paragraphs.append(StoredParagraph(f"{page_id}-1-{i}", page_id, 1, i, fields, vectors))
    store = MemoryStore(paragraphs, **store_kwargs)
    engine = RetrievalEngine(
        store=store,
        embedders=embs,
        definition=d,
        defaults=RetrievalDefaults(store_timeout_s=0.2, embed_timeout_s=0.5),
    )
    return engine, store, embs
