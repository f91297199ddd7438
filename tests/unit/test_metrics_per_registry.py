"""Metrics are made once per registry, and a new registry never gets an old one's metrics."""

from __future__ import annotations

import gc

from prometheus_client import CollectorRegistry

from ragbot.chat.metrics import chat_metrics
from ragbot.observability.metrics import http_metrics, worker_metrics


def test_the_same_registry_gets_the_same_metrics() -> None:
    registry = CollectorRegistry()
    assert worker_metrics(registry) is worker_metrics(registry)
    assert http_metrics(registry) is http_metrics(registry)
    assert chat_metrics(registry) is chat_metrics(registry)


def test_fresh_registries_count_their_own_samples() -> None:
    # Registries are dropped and collected one after another until one reuses a dead one's id(): that
    # one must still get metrics registered in itself (an id()-keyed cache handed out the dead one's).
    # A full collection takes about a second in a suite's heap, so the loop stops at the first reuse.
    seen: set[int] = set()
    reused = False
    for _ in range(50):
        registry = CollectorRegistry()
        reused = id(registry) in seen
        seen.add(id(registry))
        worker_metrics(registry).failures.labels("index_page", "invalid_message").inc()
        labels = {"task": "index_page", "reason": "invalid_message"}
        assert registry.get_sample_value("ragbot_task_failures_total", labels) == 1
        del registry
        gc.collect()
        if reused:
            break
    assert reused, "no registry reused a collected one's id: the case this test exists for never ran"
