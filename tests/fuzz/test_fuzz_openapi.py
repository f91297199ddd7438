"""Schemathesis against the OpenAPI of ingest, the retriever and chat running as real processes, for a
fixed time budget each (``support.fuzz``): no response of 500 or more, every returned status documented
for its operation, every response body conforming to its documented schema."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from support.fuzz import SERVICES, FuzzStack, budget_s, fuzz_stack, run_schemathesis

pytestmark = [pytest.mark.fuzz, pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def stack(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[FuzzStack]:
    with fuzz_stack(redis_url=redis_url, root=tmp_path_factory.mktemp("fuzz")) as running:
        yield running


@pytest.mark.parametrize("service", SERVICES)
def test_schemathesis_finds_nothing(
    service: str, stack: FuzzStack, tmp_path_factory: pytest.TempPathFactory
) -> None:
    result = run_schemathesis(
        service=service, base_url=stack.urls[service], report_dir=tmp_path_factory.mktemp(f"st-{service}")
    )
    summary = f"{result.cases} cases, {result.requests} requests, statuses {sorted(result.statuses.items())}"
    print(f"fuzz {service}: {summary} in {result.seconds:.0f} s")
    assert stack.processes[service].alive(), f"{service} died under fuzzing\n{stack.logs(service)}"
    assert result.cases > 0 and result.requests > 0, f"nothing was fuzzed:\n{result.output}"
    assert result.server_errors == 0, f"{summary}\n{result.output}\n{stack.logs(service)}"
    assert result.failures == [] and result.returncode == 0, f"{summary}\n{result.output}"
    # The budget is what bounds the run (Schemathesis stops at --max-time), plus start and shutdown.
    assert result.seconds < budget_s() + 60, summary
