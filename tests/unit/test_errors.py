"""The exception tree's retry policy: only dependency and source hiccups are retried by the worker."""

from __future__ import annotations

import pytest

from ragbot import errors


@pytest.mark.parametrize(
    ("exc", "retried"),
    [
        (errors.DependencyUnavailable("redis down", dependency="redis"), True),
        (errors.StoreUnavailable("es down"), True),
        (errors.LLMError("timeout"), True),
        (errors.SourceError("wiki 502"), True),
        (errors.SourceRefused("not allow-listed"), False),
        (errors.ValidationFailed("bad", field="x"), False),
        (errors.JobNotRetryable("done", field="state"), False),
        (errors.NotFound("gone"), False),
        (errors.EmbeddingError("oom"), False),
        (errors.RerankError("oom"), False),
        (errors.PagesFailed("p1: refused"), False),
        (errors.PartTooLarge("a.bin"), False),
        (ValueError("a bug"), False),
    ],
)
def test_retry_policy_follows_the_tree(exc: Exception, retried: bool) -> None:
    assert errors.is_retryable(exc) is retried


def test_every_error_is_a_ragbot_error() -> None:
    tree = [v for v in vars(errors).values() if isinstance(v, type) and issubclass(v, Exception)]
    assert all(issubclass(cls, errors.RagbotError) for cls in tree)
    assert errors.LLMError("x").dependency == "llm"
    assert errors.UploadsRefused([(0, "empty"), (2, "too big")]).field == "file"
