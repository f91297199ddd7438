"""Prometheus's ``promtool`` from Debian: tests/unit/test_prometheus_config.py checks deploy/prometheus."""

from __future__ import annotations

from ragbot.dev.services.base import Commands


def promtool() -> Commands:
    """Only the checker is needed: the tests validate the rules and scrape config, no server runs."""
    return Commands("prometheus", {"promtool": "prometheus"})
