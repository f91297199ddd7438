"""Small in-memory fakes for tests, one per port, re-exported here."""

from support.fakes.embedder import HashEmbedder
from support.fakes.jobs import FakeJobs
from support.fakes.messaging import FakeEvents, FakeSender
from support.fakes.reranker import FakeReranker
from support.fakes.source import FakeSource
from support.fakes.store import MemoryStore
from support.fakes.tasks import FakeRequest, FakeRuntime, FakeTask
from support.fakes.uploads import FakeIds

__all__ = [
    "FakeEvents",
    "FakeIds",
    "FakeJobs",
    "FakeRequest",
    "FakeReranker",
    "FakeRuntime",
    "FakeSender",
    "FakeSource",
    "FakeTask",
    "HashEmbedder",
    "MemoryStore",
]
