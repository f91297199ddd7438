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
    # Registries are dropped and collected one after another, so ids are reused: every new one must
    # still get metrics registered in itself (an id()-keyed cache handed out the dead one's).
    for _ in range(50):
        registry = CollectorRegistry()
        worker_metrics(registry).failures.labels("index_page", "invalid_message").inc()
        labels = {"task": "index_page", "reason": "invalid_message"}
        assert registry.get_sample_value("ragbot_task_failures_total", labels) == 1
        del registry
        gc.collect()
