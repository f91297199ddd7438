"""JSON logs with request ids, the worker's metrics server, and multiprocess aggregation."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import textwrap
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry, Counter

from ragbot.observability.logging import (
    JsonFormatter,
    RequestIdFilter,
    clean_request_id,
    get_request_id,
    request_id_scope,
)
from ragbot.observability.metrics import RedisDepthCollector, start_metrics_server


def _format(record: logging.LogRecord) -> dict[str, object]:
    RequestIdFilter("ingest").filter(record)
    parsed: dict[str, object] = json.loads(JsonFormatter().format(record))
    return parsed


def _record(message: str, **extra: object) -> logging.LogRecord:
    record = logging.LogRecord("ragbot.test", logging.INFO, __file__, 1, message, None, None)
    for key, value in extra.items():
        setattr(record, key, value)
    return record


def test_json_lines_carry_the_request_id_and_extra_fields() -> None:
    with request_id_scope("abc-123") as rid:
        assert rid == "abc-123" and get_request_id() == "abc-123"
        line = _format(_record("עמוד נשלף", job_id="j1", status=202))
    assert get_request_id() is None
    assert line["message"] == "עמוד נשלף" and line["level"] == "INFO" and line["logger"] == "ragbot.test"
    assert line["request_id"] == "abc-123" and line["service"] == "ingest"
    assert line["job_id"] == "j1" and line["status"] == 202
    assert str(line["ts"]).endswith("+00:00")


def test_exceptions_are_logged_inside_the_json() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        record = _record("failed")
        record.exc_info = sys.exc_info()
    line = _format(record)
    assert "ValueError: boom" in str(line["exc_info"]) and "request_id" not in line


@pytest.mark.parametrize(
    ("value", "expected"),
    [("req-1.2:3_x", "req-1.2:3_x"), ("", None), (None, None), ("a b", None), ("x" * 129, None), ("é", None)],
)
def test_only_safe_request_ids_are_kept(value: str | None, expected: str | None) -> None:
    assert clean_request_id(value) == expected


def test_unsafe_request_id_gets_a_fresh_one() -> None:
    with request_id_scope("bad id\n") as rid:
        assert len(rid) == 32 and rid != "bad id\n"


def test_metrics_server_serves_metrics_health_and_readiness() -> None:
    registry = CollectorRegistry()
    Counter("ragbot_probe_total", "probe", registry=registry).inc(3)
    ready = {"value": False}
    server = start_metrics_server(host="127.0.0.1", port=0, registry=registry, ready=lambda: ready["value"])
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        assert "ragbot_probe_total 3.0" in httpx.get(f"{base}/metrics").text
        assert httpx.get(f"{base}/healthz").json() == {"status": "ok"}
        assert httpx.get(f"{base}/readyz").status_code == 503
        ready["value"] = True
        assert httpx.get(f"{base}/readyz").json() == {"ready": True}
        assert httpx.get(f"{base}/nope").status_code == 404
    finally:
        server.shutdown()
        server.server_close()


def test_queue_depth_collector_reports_redis_down() -> None:
    collector = RedisDepthCollector(
        redis_url="redis://127.0.0.1:1/0", queue="q", queue_keys=["q"], dead_letter_key="d", timeout_s=0.5
    )
    families = {m.name: m for m in collector.collect()}
    assert set(families) == {"ragbot_redis_up"}
    assert families["ragbot_redis_up"].samples[0].value == 0.0


def test_multiprocess_mode_aggregates_every_process(tmp_path: Path) -> None:
    """Run in a child: multiprocess mode switches prometheus_client's storage for the whole process."""
    script = textwrap.dedent(
        f"""
        import os, multiprocessing
        from pathlib import Path
        from ragbot.observability.metrics import enable_multiprocess, scrape_registry, render, worker_metrics
        d = Path({str(tmp_path / "mp")!r})
        d.mkdir()
        (d / "stale_counter_1.db").write_bytes(b"left over from an earlier run")
        enable_multiprocess(d)
        assert not (d / "stale_counter_1.db").exists()

        def work():
            worker_metrics().paragraphs.labels("m").inc(2)

        ctx = multiprocessing.get_context("fork")
        procs = [ctx.Process(target=work) for _ in range(3)]
        for p in procs: p.start()
        for p in procs: p.join()
        worker_metrics().paragraphs.labels("m").inc(1)
        print(render(scrape_registry())[0].decode())
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode == 0, out.stderr
    assert 'ragbot_paragraphs_indexed_total{model="m"} 7.0' in out.stdout
