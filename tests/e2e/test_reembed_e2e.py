"""Blue/green re-embedding through real processes, on both stores: queries and pings run throughout a
``ragbot reembed``; no query fails, no indexed page is missing from its answer, nothing is lost."""

from __future__ import annotations

import pytest
from support import reembed_scenario

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(1500)]


@pytest.mark.parametrize("backend", ["embedded", "elasticsearch"])
def test_queries_and_pings_throughout_a_reembed(
    backend: str, redis_url: str, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> None:
    es_url = request.getfixturevalue("es_url") if backend == "elasticsearch" else ""
    figures = reembed_scenario.run(
        backend=backend,
        redis_url=redis_url,
        es_url=es_url,
        tmp=tmp_path_factory.mktemp(f"reembed-{backend}"),
        pages=10,
        timeout_s=900.0,
        page_chars=1500,  # the generations' switch is the subject, not embedding speed (bench/operations)
    )
    report = f"{figures}"
    assert figures.reembed_exit == 0, report
    assert figures.switched_to.startswith("g"), report  # off the generation made before generations
    assert figures.queries > 10 and figures.pings >= 2, report
    assert figures.failed_queries == 0, report
    assert figures.empty_results == 0, report
    assert figures.lost_pages == [] and figures.deleted_still_there == [], report
    assert figures.old_dropped, report
    assert figures.errors == [], report
