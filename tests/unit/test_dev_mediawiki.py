"""`make run-wiki` writes the markdown-ish sample pages into MediaWiki as wikitext (ragbot.dev.mediawiki)."""

from __future__ import annotations

from ragbot.dev.mediawiki import LocalMediaWiki, markdown_to_wikitext, sample_wikitext


def test_headings_lists_bold_and_links_become_wikitext() -> None:
    text = (
        'פתיחה עם [נקודת זיכוי](/he/%D7%A0%D7%A7 "נקודת זיכוי") ו-**הדגשה**\n'
        "\n"
        "תקציר\n"
        "- ----\n"
        "\n"
        "*   פריט עם [קישור חיצוני](https://example.org/x)\n"
        "### כותרת משנה\n"
    )
    assert markdown_to_wikitext(text).splitlines() == [
        "פתיחה עם [[נקודת זיכוי|נקודת זיכוי]] ו-'''הדגשה'''",
        "",
        "== תקציר ==",
        "",
        "",
        "* פריט עם [https://example.org/x קישור חיצוני]",
        "=== כותרת משנה ===",
    ]


def test_a_link_without_title_is_named_by_its_path_and_a_lone_rule_stays_a_rule() -> None:
    assert markdown_to_wikitext("[כאן](/he/%D7%A2%D7%9E%D7%95%D7%93_%D7%90#x)\n\n----\n") == (
        "[[עמוד א|כאן]]\n\n----\n"
    )


def test_categories_as_a_list_or_newline_joined_become_category_links() -> None:
    as_list = sample_wikitext({"content": "גוף", "categories": ["מסים", "זכויות"]})
    as_string = sample_wikitext({"content": "גוף", "categories": "מסים\nזכויות\n"})
    assert as_list == as_string == "גוף\n\n[[Category:מסים]]\n[[Category:זכויות]]"


def test_the_local_wiki_takes_services_sh_knobs() -> None:
    wiki = LocalMediaWiki.from_environ({"MW_ADMIN_USER": "Root", "MW_BOT_APP": "app"}, port=8491)
    assert wiki.api_url == "http://127.0.0.1:8491/api.php"
    assert wiki.bot_user == "Root@app"
    assert wiki.knobs()["MW_PORT"] == "8491"
