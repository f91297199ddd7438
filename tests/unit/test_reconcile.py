"""Reconcile's plan: the three list shapes parsed, the comparison with the index, and the guard."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ragbot.errors import ReconcileRefused, ValidationFailed
from ragbot.messaging.reconcile import ReconcileRequest, check_guard, parse_listing, plan_reconcile

# GetRelevantPageIds.php prints json_encode($relevant): ints, or {id, title} with --with-titles.
RELEVANT_JSON = "[12,7,3001]\n"
RELEVANT_WITH_TITLES = (
    '[{"id":12,"title":"זכויות עובדים"},{"id":7,"title":"Main Page"},{"id":3001,"title":"x"}]'
)
RELEVANT_LIST_WITH_TITLES = "12\tזכויות עובדים\n7\tMain Page\n\n3001\tA title with spaces\n"


def test_get_relevant_page_ids_json_with_and_without_titles() -> None:
    assert parse_listing(json.loads(RELEVANT_JSON)) == {7: 0, 12: 0, 3001: 0}
    assert parse_listing(json.loads(RELEVANT_WITH_TITLES)) == {7: 0, 12: 0, 3001: 0}


def test_plain_id_lists_as_text_or_json() -> None:
    assert parse_listing("1\n2\r\n\n# a comment\n  3  \n2\n") == {1: 0, 2: 0, 3: 0}
    assert parse_listing(RELEVANT_LIST_WITH_TITLES) == {7: 0, 12: 0, 3001: 0}
    assert parse_listing(b"\xef\xbb\xbf5\n6\n") == {5: 0, 6: 0}
    assert parse_listing([4, "5"]) == {4: 0, 5: 0}
    assert parse_listing([{"page_id": 4, "revision_id": 9}, {"page_id": 4, "revision_id": 8}]) == {4: 9}
    assert parse_listing({"pages": [{"page_id": 4, "revision_id": 9}], "next": None}) == {4: 9}


def test_mediawiki_api_answers() -> None:
    allpages = {
        "batchcomplete": "",
        "query": {"allpages": [{"pageid": 3, "ns": 0, "title": "A"}, {"pageid": 9, "ns": 0, "title": "B"}]},
    }
    assert parse_listing(allpages) == {3: 0, 9: 0}
    generator = {
        "query": {
            "pages": {
                "3": {"pageid": 3, "title": "A", "lastrevid": 70},
                "-1": {"title": "Gone", "missing": ""},
            }
        }
    }
    assert parse_listing(generator) == {3: 70}
    v2 = {"query": {"pages": [{"pageid": 5, "title": "C", "revisions": [{"revid": 55}]}]}}
    assert parse_listing(v2) == {5: 55}


@pytest.mark.parametrize(
    ("listing", "says"),
    [
        ({"continue": {"apcontinue": "B"}, "query": {"allpages": [{"pageid": 1}]}}, "continue"),
        ({"pages": [{"page_id": 1}], "next": "/list?page=2"}, "next"),
        ([0], "out of range"),
        ([True], "not a page id"),
        ([1.5], "not a page id"),
        ("1\nabc\n", "line 2"),
        ([{"title": "no id"}], "no page id"),
        ([{"pageid": 1, "lastrevid": "x"}], "revision"),
        ([{"pageid": 1, "lastrevid": "²"}], "revision"),
        ([{"pageid": 1, "lastrevid": -3}], "revision"),
        (["9" * 5000], "not a page id"),
        ({"error": {"code": "badtoken"}}, "error"),
        ({"something": 1}, "not a page list"),
        (42, "not a page list"),
    ],
)
def test_bad_lists_are_refused_naming_why(listing: Any, says: str) -> None:
    with pytest.raises(ValidationFailed) as info:
        parse_listing(listing)
    assert says in str(info.value) and info.value.field == "listing"


def test_plan_queues_missing_and_older_pages_and_removes_unlisted_ones() -> None:
    indexed = {p: 10 for p in range(1, 11)}
    listed = {**{p: 0 for p in range(1, 9)}, 11: 0, 3: 11, 4: 10, 5: 9}
    plan = plan_reconcile(listed=listed, indexed=indexed)
    assert plan.missing == [11] and plan.stale == [3] and plan.remove == [9, 10]
    assert plan.queue == [3, 11] and plan.revisions == {3: 11, 11: 0}
    assert (plan.listed, plan.indexed, plan.unchanged) == (9, 10, 7)
    assert plan.remove_share == pytest.approx(0.2)


def test_the_guard_refuses_a_truncated_list_unless_forced() -> None:
    indexed = {p: 1 for p in range(1, 101)}
    fine = plan_reconcile(listed={p: 0 for p in range(1, 81)}, indexed=indexed)
    check_guard(fine, max_remove_share=0.2, force=False)  # exactly 20%: allowed
    truncated = plan_reconcile(listed={p: 0 for p in range(1, 30)}, indexed=indexed)
    with pytest.raises(ReconcileRefused) as info:
        check_guard(truncated, max_remove_share=0.2, force=False)
    assert "71 of 100" in str(info.value) and "truncated" in str(info.value)
    named = ", ".join(str(p) for p in range(30, 80))
    assert f"page ids {named} and 21 more." in str(info.value) and '"force": true' in str(info.value)
    check_guard(truncated, max_remove_share=0.2, force=True)
    empty = plan_reconcile(listed={}, indexed=indexed)
    with pytest.raises(ReconcileRefused):
        check_guard(empty, max_remove_share=0.99, force=False)
    nothing_indexed = plan_reconcile(listed={1: 0}, indexed={})
    check_guard(nothing_indexed, max_remove_share=0.0, force=False)
    assert nothing_indexed.missing == [1] and nothing_indexed.remove == []


def test_a_request_names_exactly_one_source() -> None:
    assert ReconcileRequest.model_validate({"listing": [1]}).listing == [1]
    assert ReconcileRequest.model_validate({"listing": "1\n2"}).listing == "1\n2"
    for body in ({}, {"listing": [1], "list_url": "https://wiki.test/api.php"}):
        with pytest.raises(ValueError, match="exactly one"):
            ReconcileRequest.model_validate(body)
