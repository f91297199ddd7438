"""The shared test fakes keep to their ports, so a test over a fake says something about production."""

from __future__ import annotations

import numpy as np
import pytest
from support.fakes import FakeJobs, FakeReranker, FakeSource, HashEmbedder, MemoryStore

from ragbot.errors import EmbeddingError, NotFound, StoreUnavailable
from ragbot.messaging.jobs import JobStore
from ragbot.ports import Embedder, PageSource, PageWrite, Reranker, SearchStore, StoredParagraph
from ragbot.schemas.jobs import JobState
from ragbot_ingest.service import JobRepository


def test_each_fake_implements_its_port() -> None:
    assert isinstance(HashEmbedder(), Embedder)
    assert isinstance(MemoryStore(), SearchStore)
    assert isinstance(FakeReranker({}), Reranker)
    assert isinstance(FakeSource(), PageSource)
    repository: JobRepository = FakeJobs()  # checked by mypy, as JobStore is
    assert isinstance(repository, FakeJobs)
    methods = {name for name in dir(FakeJobs) if not name.startswith("_")} - {"seed"}
    assert methods <= set(dir(JobStore))  # no method production does not have


def test_the_embedder_is_deterministic_normalised_and_per_model() -> None:
    one, two = HashEmbedder("one", dimension=16), HashEmbedder("two", dimension=16)
    a = one.embed_passages(["rent help", "rent help", ""])
    np.testing.assert_array_equal(a[0], a[1])
    np.testing.assert_allclose(np.linalg.norm(a, axis=1), 1.0, rtol=1e-6)
    assert not np.array_equal(one.embed_queries(["rent help"])[0], two.embed_queries(["rent help"])[0])
    assert one.calls == [3, 1] and one.passage_calls == [["rent help", "rent help", ""]]
    assert one.count_tokens("rent help") == 4
    with pytest.raises(EmbeddingError):
        HashEmbedder(broken=True).embed_queries(["q"])
    with pytest.raises(EmbeddingError):
        HashEmbedder(fail_on="POISON").embed_passages(["fine", "POISON pill"])
    with pytest.raises(AssertionError):
        HashEmbedder(passages_only=True).embed_queries(["q"])


async def test_the_store_replaces_pages_and_reports_refused_ones() -> None:
    vector = HashEmbedder(dimension=4).embed_passages(["x"])[0]

    def para(page_id: int, revision_id: int, n: int) -> StoredParagraph:
        fields = {"content": f"text {n}", "page_id": page_id}
        return StoredParagraph(f"{page_id}-{revision_id}-{n}", page_id, revision_id, n, fields, {"v": vector})

    store = MemoryStore(require_vectors=True)
    store.refuse[2] = StoreUnavailable("busy")
    failed = await store.replace_pages(
        [PageWrite(1, 1, [para(1, 1, 0), para(1, 1, 1)]), PageWrite(2, 1, [para(2, 1, 0)])]
    )
    assert list(failed) == [2] and store.batches == [[1, 2]] and store.writes == [1]
    await store.replace_page(page_id=1, revision_id=2, paragraphs=[para(1, 2, 0)])
    state = await store.page_state(page_id=1)
    assert state is not None and (state.revision_id, state.paragraphs) == (2, 1)
    assert [h.doc_id for h in await store.knn(vector_field="v", vector=vector, k=5)] == ["1-2-0"]
    assert [h.doc_id for h in await store.bm25(query="text", k=5)] == ["1-2-0"]
    assert await store.delete_page(page_id=1) == 1 and await store.count() == 0
    store.down = True
    assert not await store.ping()
    with pytest.raises(StoreUnavailable):
        await store.bm25(query="text", k=1)


async def test_the_job_records_follow_the_job_store_rules() -> None:
    jobs = FakeJobs()
    with pytest.raises(NotFound):
        await jobs.update(job_id="nope", state=JobState.done)
    assert jobs.updates == [{"job_id": "nope", "state": JobState.done}]
    record = jobs.seed(job_id="j", error="old")
    await jobs.update(job_id="j", state=JobState.running, progress={"done": 1})
    updated = await jobs.get(job_id="j")
    assert updated is not None and updated.error == "old" and updated.progress == {"done": 1}
    await jobs.dead_letter(job_id="j", error="E: x", attempts=3)
    failed = await jobs.get(job_id="j")
    assert failed is not None and (failed.state, failed.attempts) == (JobState.failed, 3)
    assert record.state is JobState.queued and jobs.gets == ["j", "j"]
