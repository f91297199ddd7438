"""The site's furniture on both Kol-Zchut page sets: the crawled pages' generated block and disclaimer and
the content API's "see also" links are never a source or a quote; content many pages share still is."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from support.chat_fakes import ScriptedLLM, StaticRetriever, document

from ragbot.chat.boilerplate import furniture_line, is_boilerplate, link_only, strip_furniture
from ragbot.chat.events import ChatRequest
from ragbot.chat.pipeline import ChatPipeline
from ragbot.chat.quote import clean_line, sentences_of
from ragbot.indexing.paragraphs import ParagraphText, split_page
from ragbot.prompts import PromptDocument, PromptLibrary
from ragbot.schemas.pages import Page
from ragbot.schemas.retrieval import RetrieveResponse
from ragbot.settings import ChatSettings

SAMPLES = Path(__file__).resolve().parents[2] / "samples" / "kolzchut"
DISCLAIMER = "המידע באתר הוא מידע כללי ואינו מידע מחייב"
SHARED_CONTENT = "נקודות זיכוי מקטינות את גובה מס ההכנסה"


def _paragraphs(name: str) -> list[tuple[int, ParagraphText]]:
    out: list[tuple[int, ParagraphText]] = []
    for line in (SAMPLES / name).read_text(encoding="utf-8").splitlines():
        record: dict[str, Any] = json.loads(line)
        page = Page.from_wiki_content(record)
        for p in split_page(page, token_counters=[lambda t: 2 * len(t.split()) + 2], max_tokens=512):
            out.append((int(record["page_id"]), p))
    return out


def test_the_crawled_pages_lose_their_generated_block_and_disclaimer_and_keep_shared_content() -> None:
    paragraphs = _paragraphs("rights_pages.jsonl")
    flagged = [(page, p) for page, p in paragraphs if is_boilerplate(p.text)]
    # the generated "Key Points" and "Related Topics" paragraphs of all 39 pages, and the one footer
    assert Counter(p.heading for _, p in flagged) == {"Key Points": 39, "Related Topics": 39, "": 1}
    [(page, footer)] = [(page, p) for page, p in flagged if p.heading == ""]
    assert page == 100035 and DISCLAIMER in footer.text
    # a page's list of links (laws, government bodies, aid organisations) stays a source, each item
    # still written as a link once indexing drops the targets ("[title]()"), and none is ever quoted
    laws = [p for _, p in paragraphs if p.heading.endswith("חקיקה ונהלים")]
    lists = [p for p in laws if any(link_only(line) for line in p.text.splitlines())]
    assert len(lists) >= 20 and not any(is_boilerplate(p.text) for p in lists)
    for p in lists:
        links = {clean_line(line) for line in p.text.splitlines() if link_only(line)}
        assert not links & {s.text for s in sentences_of([PromptDocument(1, "", p.text)])}
    # real content that 16 pages share through a template stays, as does every other paragraph
    generated = ("Key Points", "Related Topics")
    shared = [p for _, p in paragraphs if SHARED_CONTENT in p.text and p.heading not in generated]
    assert len({p.text for p in shared}) >= 1 and len(shared) >= 16
    assert not any(is_boilerplate(p.text) for p in shared)
    assert len(paragraphs) - len(flagged) >= 500


def test_the_content_api_bodies_keep_their_paragraphs_but_never_quote_see_also_links() -> None:
    paragraphs = [(page, p) for page, p in _paragraphs("content_api_pages.jsonl") if page != 1]
    assert paragraphs and not any(is_boilerplate(p.text) for _, p in paragraphs)
    for page, p in paragraphs:
        quoted = [s.text for s in sentences_of([PromptDocument(1, "", p.text)])]
        assert quoted, page
        assert not any("ראו גם" in s or "/index.php" in s for s in quoted), (page, quoted)
    [(_, unemployment)] = [(page, p) for page, p in paragraphs if page == 2]
    kept = strip_furniture(unemployment.text)
    assert "מי שצבר 12 חודשי עבודה" in kept and "ראו גם" not in kept
    assert "פיצויי פיטורים (זכות)" not in kept  # a link listed under the "ראו גם" heading


def test_a_furniture_line_is_a_notice_a_stamp_or_a_pointer_not_a_sentence_that_links() -> None:
    assert furniture_line("The information on this site is general and not binding.")
    assert furniture_line("Last Updated: 2025-01-01")
    assert furniture_line("ראו גם דמי לידה (זכות) (/index.php/דמי_לידה_(זכות)).")
    assert not furniture_line("מגישים תביעה לדמי אבטלה באתר ביטוח לאומי (https://www.btl.gov.il).")
    assert not furniture_line("Workers aged 16 to 18 get a tax credit point.")


def test_a_line_that_is_one_link_and_nothing_else_is_a_pointer_never_quoted() -> None:
    # the content API's shape: an item of a list of links, and a sentence that holds a link
    assert link_only("משרד העבודה – פיצויי פיטורים (https://www.gov.il/he/departments/topics/severance_pay)")
    assert link_only('*   [ביטוח בריאות לעובדים זרים](/he/%D7%91%D7%99 "ביטוח בריאות לעובדים זרים")')
    assert link_only("- [דמי לידה (זכות)](/he/דמי_לידה_(זכות))")
    assert not link_only("נרשמים באתר שירות התעסוקה (https://www.taasuka.gov.il).")
    assert not link_only(
        "דמי לידה משולמים לעובדות (/index.php?title=x) בתקופת חופשת לידה (/index.php?title=y)."
    )
    assert not link_only("* הורים ל[ילד נכה](/he/x) זכאים לגמלה")
    long_title = " ".join(["מילה"] * 13)
    assert not link_only(f"{long_title} (https://example.org/x)")  # a sentence, not a link's title
    assert furniture_line("למידע נוסף ראו הענקת אבטלה לבני נוער.")
    assert furniture_line("For more information, see the National Insurance page.")
    paragraph = (
        "דמי אבטלה משולמים למי שפוטר ונרשם בשירות התעסוקה.\n"
        "חוק הביטוח הלאומי - פרק ז' (https://www.nevo.co.il/law_html/law00/72495.htm)\n"
        "תקנות הביטוח הלאומי (ביטוח אבטלה) (https://www.nevo.co.il/law_html/law01/p214m2_001.htm)"
    )
    quoted = [s.text for s in sentences_of([PromptDocument(1, "", paragraph)])]
    assert quoted == ["דמי אבטלה משולמים למי שפוטר ונרשם בשירות התעסוקה."]


def test_a_link_item_stays_a_link_after_indexing_drops_its_target_and_is_never_quoted() -> None:
    page = Page.from_wiki_content(
        {
            "page_id": 1,
            "title": "דמי אבטלה",
            "content": (
                "דמי אבטלה משולמים למי שפוטר ונרשם בשירות התעסוקה.\n"
                "*   [חוק הביטוח הלאומי](https://he.wikisource.org/wiki/x#y) - פרק ז'\n"
                "*   [שעות עבודה ושכר לעובדים זרים בענף הבנייה](/x), רשות האוכלוסין וההגירה\n"
                '*   [ביטוח בריאות לעובדים זרים](/he/%D7%91 "ביטוח בריאות לעובדים זרים")\n'
                "*   מי שפוטר זכאי ל[דמי אבטלה](/he/x) אחרי 12 חודשי עבודה."
            ),
        }
    )
    [paragraph] = split_page(page, token_counters=[lambda t: len(t.split())], max_tokens=512)
    lines = paragraph.text.splitlines()
    assert lines[1:4] == [
        "*   [חוק הביטוח הלאומי]() - פרק ז'",
        "*   [שעות עבודה ושכר לעובדים זרים בענף הבנייה](), רשות האוכלוסין וההגירה",
        "*   [ביטוח בריאות לעובדים זרים]()",
    ]
    assert [link_only(line) for line in lines] == [False, True, True, True, False]
    quoted = [s.text for s in sentences_of([PromptDocument(1, "", paragraph.text)])]
    assert quoted == [
        "דמי אבטלה משולמים למי שפוטר ונרשם בשירות התעסוקה.",
        "מי שפוטר זכאי לדמי אבטלה אחרי 12 חודשי עבודה.",
    ]


def test_a_link_after_a_pointer_lead_in_is_a_pointer_but_a_sentence_after_it_is_content() -> None:
    # The crawl flattens the "what now? / for more details / notes" table: the "for more details" cell
    # runs into its link with no space, and sometimes into a sentence of the next cell.
    lines = [
        "לפרטים נוספים[הגשת תביעה לגמלת ילד נכה](/he/x)",
        "לפרטים נוספים: [ערר על החלטת ועדה רפואית לילד נכה](/he/y)",
        "For more information see [Unemployment benefits](/en/z)",
        "לפרטים נוספיםבתוך 45 ימים מהיום שהתקבלה התביעה תישלח לכם ההחלטה.",
        "הגמלה תועבר ב-28 בכל חודש ל[חשבון הבנק](/he/b) של ההורה.",
    ]
    page = Page.from_wiki_content({"page_id": 1, "title": "גמלת ילד נכה", "content": "\n".join(lines)})
    [paragraph] = split_page(page, token_counters=[lambda t: len(t.split())], max_tokens=512)
    assert [link_only(line) for line in paragraph.text.splitlines()] == [True, True, True, False, False]
    quoted = [s.text for s in sentences_of([PromptDocument(1, "", paragraph.text)])]
    assert quoted == [
        "לפרטים נוספיםבתוך 45 ימים מהיום שהתקבלה התביעה תישלח לכם ההחלטה.",
        "הגמלה תועבר ב-28 בכל חודש לחשבון הבנק של ההורה.",
    ]


def test_the_crawled_pages_pointer_cells_are_never_quoted() -> None:
    [page] = [
        Page.from_wiki_content(row)
        for row in map(json.loads, (SAMPLES / "rights_pages.jsonl").read_text(encoding="utf-8").splitlines())
        if row["page_id"] == 100001
    ]
    paragraphs = split_page(page, token_counters=[lambda t: len(t.split())], max_tokens=512)
    quoted = [s.text for p in paragraphs for s in sentences_of([PromptDocument(1, page.title, p.text)])]
    assert not [q for q in quoted if q.startswith("לפרטים נוספים") and "[" not in q and len(q.split()) < 12]
    assert any(q.startswith("לפרטים נוספיםבתוך 45 ימים") for q in quoted)


def test_a_boilerplate_paragraph_takes_no_place_among_the_sources() -> None:
    footer = document(1, 0, "האתר פונה לנשים וגברים כאחד.\n" + DISCLAIMER + ".")
    body = document(2, 0, "עיוורים פטורים ממס הכנסה על הכנסה מיגיעה אישית עד תקרה.")
    pipeline = ChatPipeline(
        llm=ScriptedLLM(),
        retriever=StaticRetriever([footer, body]),
        prompts=PromptLibrary(),
        settings=ChatSettings(_env_file=None),
    )
    response = RetrieveResponse.model_validate({"documents": [footer, body], "debug": {}, "timings_ms": {}})
    request = ChatRequest(question="האם עיוור פטור ממס?", mode="quote", language="he")
    selection = pipeline.select_sources(request, response)
    assert [s.page_id for s in selection.sources] == [2] and selection.sources[0].index == 1
    assert selection.before_filter[0]["dropped"] == "boilerplate"
