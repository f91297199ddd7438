"""Faults real deployments see, through real processes: an Elasticsearch data node ``kill -9``-ed under
pings and queries (two-node cluster, one replica), and Redis (AOF on) restarted in the middle of a
conversation and of a bulk reindex. The machinery is ``support.fault_stack`` and
``support.fault_scenarios``; ``bench/security/faults.py`` reports the same runs as figures.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from support.fault_scenarios import es_node_loss, redis_restart
from support.fault_stack import FaultStack, fault_stack

logger = logging.getLogger(__name__)
pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FaultStack]:
    with fault_stack(tmp_path_factory.mktemp("faults")) as running:
        yield running


def test_killing_an_elasticsearch_node_under_pings_and_queries_loses_nothing(stack: FaultStack) -> None:
    seen = es_node_loss(stack)
    logger.info("elasticsearch node loss: %s", seen)
    assert seen.jobs_not_done == 0 and seen.pages_lost == 0, (seen.problems, stack.logs())
    # The surviving node answered queries while the other was down, and nearly every query answered.
    assert seen.primaries_on_killed_node > 0 and seen.answered_while_down > 0, seen
    assert seen.failed_queries <= max(3, seen.queries // 20), seen
    # After recovery both nodes hold a full copy: every paragraph once, none of an older revision.
    assert seen.copies_per_node == {"node-1": seen.expected_paragraphs, "node-2": seen.expected_paragraphs}
    assert seen.expected_paragraphs > seen.pages


def test_restarting_redis_keeps_sessions_jobs_and_queued_work(stack: FaultStack) -> None:
    seen = redis_restart(stack)
    logger.info("redis restart: %s", seen)
    assert seen.sessions_lost == 0, (seen.problems, stack.logs())
    assert seen.turns_after == [2, 1, 0], seen
    assert seen.reindex["state"] == "done", (seen.reindex, stack.logs())
    assert seen.reindex["progress"]["total"] == seen.reindex["progress"]["done"] == 8, seen.reindex
    assert seen.reindex_pages_stale == 0 and seen.old_job_state == "done", seen.problems
