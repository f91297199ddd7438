"""A page's vectors do not depend on the pages it is embedded with (real MiniLM and e5, on the CPU).

Every indexing path hands the pipeline many pages at once (``ragbot eval``, ``ragbot index``, reindex,
the drop-in's ``update_pages`` and the worker's collected pings), so a paragraph shares the model's
batches with other pages' paragraphs of other lengths: padded, sorted and cut differently than when
its page is embedded alone. The vectors must stay the same (cosine at least 0.9999) for every vector
field of the default definition, in English and in Hebrew, for short and long pages.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np
import pytest
from support.fakes.store import MemoryStore

from ragbot.definition import DocumentDefinition, load_definition
from ragbot.embedders import build_embedders
from ragbot.evaluation import load_beir
from ragbot.evaluation.data import beir_page
from ragbot.indexing.pipeline import IndexingPipeline
from ragbot.ports import Embedder, StoredParagraph
from ragbot.schemas.pages import Page
from ragbot.settings import ModelSettings

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
MIN_COSINE = 0.9999


@pytest.fixture(scope="module")
def definition() -> DocumentDefinition:
    return load_definition(ROOT / "config/definition.json")


@pytest.fixture(scope="module")
def embedders(definition: DocumentDefinition) -> Iterator[Mapping[str, Embedder]]:
    built = build_embedders(settings=ModelSettings(models_location=None, device="cpu"), definition=definition)
    for embedder in built.values():
        embedder.warm_up()
    yield built
    for embedder in built.values():
        embedder.close()


def _corpus() -> list[Page]:
    """SciFact abstracts (short, English) and Kol-Zchut pages (long, Hebrew), page ids from 1."""
    dataset = load_beir(ROOT / "samples/scifact-mini")
    english = [beir_page(doc, n) for n, doc in enumerate(list(dataset.corpus.values())[:60], start=1)]
    rows = [json.loads(line) for line in (ROOT / "samples/kolzchut/pages.jsonl").read_text().splitlines()]
    hebrew = [
        Page.model_validate({**row, "page_id": 1000 + n, "source": "wiki"}) for n, row in enumerate(rows)
    ]
    return english + hebrew


async def _vectors(pipeline: IndexingPipeline, pages: list[Page]) -> dict[tuple[str, str], np.ndarray]:
    store = MemoryStore()
    await pipeline.index(pages, store=store)
    held: list[StoredParagraph] = store.paragraphs
    return {(p.doc_id, name): np.asarray(v) for p in held for name, v in p.vectors.items()}


async def test_a_page_gets_the_same_vectors_alone_and_in_a_batch(
    definition: DocumentDefinition, embedders: Mapping[str, Embedder]
) -> None:
    pipeline = IndexingPipeline(definition=definition, embedders=embedders)
    pages = _corpus()
    batched = await _vectors(pipeline, pages)
    fields = {name for _, name in batched}
    assert fields == {v.name for v in definition.vector_fields}, "every vector field is embedded"
    alone: dict[tuple[str, str], np.ndarray] = {}
    chosen = [pages[0], pages[7], pages[59], pages[60], pages[-1]]  # short, English and long, Hebrew
    for page in chosen:
        alone.update(await _vectors(pipeline, [page]))
    assert len(alone) > 20 and {name for _, name in alone} == fields
    worst = min(float(vector @ batched[key]) for key, vector in alone.items())
    assert worst >= MIN_COSINE, f"a vector changed with its batch: cosine {worst:.6f}"
    assert any(len(pipeline.prepare(page)) > 3 for page in chosen), "a long page is among them"
