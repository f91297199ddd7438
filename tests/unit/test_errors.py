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
        (errors.BodyTooLarge("over 2 GB", field="body"), False),
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


async def test_redis_guard_translates_redis_and_socket_errors() -> None:
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import WatchError

    from ragbot.messaging.redis import redis_guard

    failed = pytest.raises(errors.DependencyUnavailable, match="Redis failed on read session: down")
    with failed as info, redis_guard("read session"):
        raise RedisConnectionError("down")
    assert info.value.dependency == "redis"
    unreachable = pytest.raises(errors.DependencyUnavailable, match=r"Redis is unreachable \(ping\)")
    with unreachable, redis_guard("ping"):
        raise OSError("no route")
    with pytest.raises(WatchError), redis_guard("watch"):
        raise WatchError("raced")  # the callers that WATCH retry it themselves

    @redis_guard("count")
    async def count() -> int:
        raise RedisConnectionError("gone")

    with pytest.raises(errors.DependencyUnavailable, match="Redis failed on count"):
        await count()
