"""What tracing adds to ``POST /v1/retrieve``: ``tracing_overhead_p50_ms`` (target <= 2 ms).

Two real ``python -m ragbot_retriever`` processes over copies of the same embedded sample store, one
with ``OTEL_EXPORTER_OTLP_ENDPOINT`` pointing at an OTLP/HTTP receiver in this process (every span
exported: the FastAPI server span, the store spans), one without; requests alternate between them so
both see the same machine load. The same query repeats, so the query embedding comes from the cache and
the difference is tracing, not the model. The figure is p50(on) - p50(off) in ms; on a loaded machine
the median of the paired differences (each round's on minus its off, taken back to back) is steadier,
and is reported next to it as ``tracing_overhead_paired_median_ms``.

Run: ``uv run python -m bench.operations.tracing [--rounds 600]`` (Redis from
``RAGBOT_TEST_REDIS_URL``, for the rate limiter the app factory builds; limits are off) writes
``bench/results/operations_tracing.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from support.chat_corpus import write_definition  # noqa: E402
from support.chat_stack import sample_store  # noqa: E402
from support.otlp_collector import OtlpCollector  # noqa: E402
from support.processes import ServiceProcess, free_port, local_service, service_env  # noqa: E402

WARM_UP = 50
BODY = {"query": "Who is exempt from income tax?", "mode": "hybrid"}


def _retriever(name: str, *, root: Path, extra: dict[str, str]) -> tuple[ServiceProcess, str]:
    folder = root / name
    folder.mkdir()
    store = folder / "store.sqlite3"
    shutil.copyfile(sample_store(), store)
    port = free_port()
    env = service_env(
        {
            "RAGBOT_REDIS_URL": os.environ.get("RAGBOT_TEST_REDIS_URL", "redis://127.0.0.1:6390/0"),
            "RAGBOT_RATE_LIMIT_ENABLED": "false",
            "RAGBOT_STORE_BACKEND": "embedded",
            "RAGBOT_STORE_EMBEDDED_PATH": str(store),
            "RAGBOT_DOCUMENT_DEFINITION": str(write_definition(folder / "definition.json")),
            "RAGBOT_RETRIEVER_HOST": "127.0.0.1",
            "RAGBOT_RETRIEVER_PORT": str(port),
            "RAGBOT_LOG_LEVEL": "WARNING",
            **extra,
        }
    )
    for variable in ("RAGBOT_RETRIEVER_RERANKER_PATH", "OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER"):
        env.pop(variable, None)
    if "OTEL_EXPORTER_OTLP_ENDPOINT" not in extra:
        env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
        env.pop("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", None)
    proc = local_service(
        name, module="ragbot_retriever", port=port, env=env, log_dir=folder, cwd=folder, health="readyz"
    )
    return proc, f"http://127.0.0.1:{port}"


def measure(rounds: int = 600) -> dict[str, float | int]:
    """p50 of ``/v1/retrieve`` with tracing on and off, side by side, and their difference."""
    root = Path(tempfile.mkdtemp(prefix="ragbot-bench-tracing-"))
    with OtlpCollector() as collector:
        on, on_url = _retriever(
            "traced", root=root, extra={"OTEL_EXPORTER_OTLP_ENDPOINT": collector.endpoint}
        )
        off, off_url = _retriever("untraced", root=root, extra={})
        times: dict[str, list[float]] = {"on": [], "off": []}
        try:
            on.start()
            off.start()
            on.wait_healthy(timeout_s=240)
            off.wait_healthy(timeout_s=240)
            with (
                httpx.Client(base_url=on_url, timeout=60) as traced,
                httpx.Client(base_url=off_url, timeout=60) as untraced,
            ):
                for n in range(rounds + WARM_UP):
                    pair = (
                        (("on", traced), ("off", untraced)) if n % 2 else (("off", untraced), ("on", traced))
                    )
                    for name, client in pair:
                        start = time.perf_counter()
                        response = client.post("/v1/retrieve", json=BODY)
                        elapsed = (time.perf_counter() - start) * 1000
                        if response.status_code != 200 or not response.json()["documents"]:
                            raise RuntimeError(f"{name}: {response.status_code} {response.text[:300]}")
                        if n >= WARM_UP:
                            times[name].append(elapsed)
            # Every traced request's server span arrives (the batch exporter sends within a second).
            wanted = rounds + WARM_UP
            spans = collector.wait_for(
                lambda got: sum(s.kind == "server" for s in got) >= wanted, timeout_s=30
            )
        finally:
            on.stop()
            off.stop()
            shutil.rmtree(root, ignore_errors=True)
    p50_on, p50_off = statistics.median(times["on"]), statistics.median(times["off"])
    paired = statistics.median(a - b for a, b in zip(times["on"], times["off"], strict=True))
    return {
        "retrieve_p50_ms_tracing_on": round(p50_on, 3),
        "retrieve_p50_ms_tracing_off": round(p50_off, 3),
        "tracing_overhead_p50_ms": round(p50_on - p50_off, 3),
        "tracing_overhead_paired_median_ms": round(paired, 3),
        "tracing_rounds": rounds,
        "tracing_server_spans_received": sum(s.kind == "server" for s in spans),
        "tracing_spans_received": len(spans),
    }


def main() -> None:
    """Measure and write ``bench/results/operations_tracing.json``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=600)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "operations_tracing.json")
    args = parser.parse_args()
    figures = measure(args.rounds)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(figures, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    sys.stdout.write(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
