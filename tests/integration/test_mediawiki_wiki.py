"""The real test MediaWiki answers, and its helper creates, edits, moves, deletes and restores pages."""

from __future__ import annotations

from support.mediawiki import WikiSession


def test_the_wiki_is_a_hebrew_mediawiki_1_39(wiki: WikiSession) -> None:
    general = wiki.get(action="query", meta="siteinfo")["query"]["general"]
    assert general["generator"].startswith("MediaWiki 1.39"), general["generator"]
    assert general["lang"] == "he"


def test_pages_go_through_their_whole_life(wiki: WikiSession) -> None:
    title = wiki.title("חיים")
    created = wiki.edit(title, "== זכויות ==\nגרסה ראשונה.")
    edited = wiki.edit(title, "== זכויות ==\nגרסה שנייה.")
    assert edited["pageid"] == created["pageid"]
    assert edited["newrevid"] > created["newrevid"]

    moved_to = wiki.title("חיים הועבר")
    wiki.move(title, moved_to, redirect=False)
    assert wiki.page(title).get("missing") is True
    before_delete = wiki.page(moved_to)
    assert before_delete["pageid"] == created["pageid"]

    wiki.delete(moved_to)
    assert wiki.page(moved_to).get("missing") is True
    wiki.undelete(moved_to)
    restored = wiki.page(moved_to)
    assert restored["revisions"][0]["revid"] == before_delete["revisions"][0]["revid"]
    wiki.run_jobs()

    log = wiki.get(action="query", list="logevents", letitle=moved_to, lelimit="10")["query"]["logevents"]
    actions = {(event["type"], event["action"]) for event in log}
    assert actions >= {("delete", "delete"), ("delete", "restore")}, actions
