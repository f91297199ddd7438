"""Every hostile input of the catalogue (``support.hostile``) against ingest, the retriever and chat:
the status it must get, a message that says what to fix, no 5xx, and nothing accepted before lost.
Chat's sessions are in the real Redis; the page content cleaning is checked on what was queued."""

from __future__ import annotations

from collections.abc import Iterator
from typing import cast

import pytest
from support.hostile import Apps, BadInput, catalogue, hostile_apps, message_of

from ragbot.schemas.messages import IndexPage

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

CASES = catalogue()


@pytest.fixture(scope="module")
def apps(redis_url: str) -> Iterator[Apps]:
    with hostile_apps(redis_url=redis_url) as running:
        accepted = running.ingest.post("/v1/pages", json={"page_id": 9, "revision_id": 3, "content": "kept"})
        assert accepted.status_code == 202
        running.clients["accepted_job"] = accepted.json()["job_id"]
        yield running


def test_the_catalogue_has_at_least_30_distinct_cases() -> None:
    assert len({c.name for c in CASES}) == len(CASES) >= 30


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_a_hostile_input_gets_its_status_and_a_message_that_says_what_to_fix(
    apps: Apps, case: BadInput
) -> None:
    response = apps.send(case)
    assert response.status_code < 500, (case.name, response.status_code, response.text[:500])
    assert response.status_code == case.expect, (case.name, response.text[:500])
    if case.expect >= 400:
        message = message_of(response)
        assert case.words in message, (case.name, message[:500])


def test_nothing_accepted_before_is_lost(apps: Apps) -> None:
    for case in CASES:
        apps.send(case)
    job_id = str(apps.clients["accepted_job"])
    assert apps.ingest.get(f"/v1/jobs/{job_id}").status_code == 200
    state = apps.ingest.get("/v1/pages/5")
    assert state.status_code == 200 and state.json()["revision_id"] == 1  # the seeded page is still indexed
    assert apps.retriever.post("/v1/retrieve", json={"query": "leave"}).json()["documents"]
    session = apps.chat.get(f"/v1/sessions/{apps.session_id}")
    assert session.status_code == 200 and session.json()["session_id"] == apps.session_id


def test_nul_and_bidi_overrides_are_stripped_from_page_text_before_it_is_queued(apps: Apps) -> None:
    [case] = [c for c in CASES if c.name == "push: NUL and bidi override stripped"]
    response = apps.send(case)
    assert response.status_code == 202
    record = apps.jobs.records[response.json()["job_id"]]
    page = IndexPage.model_validate(record.payload).page
    assert page is not None
    assert page.title == "Leave" and page.content == "Paid leave is 12 days."


def test_a_question_with_nul_and_overrides_is_answered_from_its_clean_text(apps: Apps) -> None:
    [case] = [c for c in CASES if c.name == "message: question with NUL answered clean"]
    response = apps.send(case)
    assert response.status_code == 200, response.text
    session = apps.chat.get(f"/v1/sessions/{apps.session_id}").json()
    questions = [cast(str, t["question"]) for t in session["turns"]]
    assert "What is the leave?" in questions
    assert all("\x00" not in q and "\u202e" not in q for q in questions)
