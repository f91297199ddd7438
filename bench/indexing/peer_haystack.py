"""Haystack's side of ``bench/indexing/peer.py``: its documented indexing pipeline, timed.

``SentenceTransformersDocumentEmbedder`` (the same packaged all-MiniLM-L6-v2 folder, CPU, its default
batch of 32, the title embedded with the text through ``meta_fields_to_embed``) → ``DocumentWriter``
into an ``InMemoryDocumentStore``. The model loads in ``warm_up`` before the clock starts, as ragbot's
does. Haystack is a bench-only dependency: ``bench/indexing/peer.py`` runs this file with
``uv run --with haystack-ai --with sentence-transformers-haystack`` (Haystack 3 keeps the
sentence-transformers components in that integration package), so ``make test`` never installs it.

Run: ``uv run --with haystack-ai --with sentence-transformers-haystack python
bench/indexing/peer_haystack.py DOCS.jsonl MODEL_DIR [PRECISION]``
(DOCS: one ``{"title", "text"}`` per line; PRECISION ``float32``, the documented default, or
``bfloat16``, given to the model through the embedder's documented ``model_kwargs``); prints one JSON
object.
"""

from __future__ import annotations

import json
import logging
import sys
import time

import torch
from haystack import Document, Pipeline  # type: ignore[import-not-found]  # bench-only: uv run --with
from haystack import __version__ as haystack_version
from haystack.components.writers import DocumentWriter  # type: ignore[import-not-found]  # bench-only: uv run --with
from haystack.document_stores.in_memory import InMemoryDocumentStore  # type: ignore[import-not-found]  # bench-only: uv run --with
from haystack.utils import ComponentDevice  # type: ignore[import-not-found]  # bench-only: uv run --with

# Haystack 3 moved the sentence-transformers components to their own integration package.
from haystack_integrations.components.embedders.sentence_transformers import (  # type: ignore[import-not-found]
    SentenceTransformersDocumentEmbedder,
)

logger = logging.getLogger("bench.indexing.peer_haystack")


def main(docs_path: str, model_dir: str, precision: str = "float32") -> dict[str, object]:
    """Index the documents once after a warm-up; seconds, documents and the precision used."""
    with open(docs_path, encoding="utf-8") as lines:
        rows = [json.loads(line) for line in lines if line.strip()]
    docs = [Document(content=r["text"], meta={"title": r["title"]}) for r in rows]
    store = InMemoryDocumentStore()
    embedder = SentenceTransformersDocumentEmbedder(
        model=model_dir,
        device=ComponentDevice.from_str("cpu"),
        meta_fields_to_embed=["title"],
        progress_bar=False,
        # float32 is what the documented pipeline loads; bfloat16 only when asked (the same-precision
        # comparison), through the documented way to pass options to the model
        model_kwargs=None if precision == "float32" else {"dtype": getattr(torch, precision)},
    )
    pipeline = Pipeline()
    pipeline.add_component("embedder", embedder)
    pipeline.add_component("writer", DocumentWriter(document_store=store))
    pipeline.connect("embedder", "writer")
    pipeline.warm_up()
    started = time.perf_counter()
    pipeline.run({"embedder": {"documents": docs}})
    seconds = time.perf_counter() - started
    assert store.count_documents() == len(docs)
    dtype = str(next(embedder.embedding_backend.model.parameters()).dtype).removeprefix("torch.")
    return {
        "seconds": round(seconds, 3),
        "documents": len(docs),
        "texts": len(docs),
        "precision": dtype,
        "version": haystack_version,
        "threads": torch.get_num_threads(),
    }


if __name__ == "__main__":
    sys.stdout.write(json.dumps(main(*sys.argv[1:4])) + "\n")
