"""MediaWiki's rendered HTML becomes heading-aware blocks without link targets or wiki chrome."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ragbot.sources.wiki_html import blocks_from_html

CAPTURED = Path(__file__).resolve().parents[1] / "fixtures" / "kolzchut-content-api" / "bodies.jsonl"


def _bodies() -> dict[int, dict[str, Any]]:
    with CAPTURED.open(encoding="utf-8") as f:
        return {int(b["page_id"]): b for b in (json.loads(line) for line in f if line.strip())}


# What MediaWiki 1.39's action=parse gives (edit links, TOC, references), trimmed from a real render.
PARSE_HTML = """<div class="mw-parser-output"><p>Intro with a <a href="/wiki/Other" title="Other">link</a>
and a reference.<sup id="cite_ref-1" class="reference"><a href="#cite_note-1">[1]</a></sup>
</p><div id="toc" class="toc" role="navigation"><div class="toctitle"><h2 id="mw-toc-heading">Contents</h2>
</div><ul><li class="toclevel-1"><a href="#First"><span class="tocnumber">1</span>
<span class="toctext">First</span></a></li></ul></div>
<h2><span class="mw-headline" id="First">First</span><span class="mw-editsection">
<span class="mw-editsection-bracket">[</span><a href="/index.php?title=P&amp;action=edit&amp;section=1"
title="Edit section: First">edit</a><span class="mw-editsection-bracket">]</span></span></h2>
<ul><li>one <a href="/index.php?title=Missing&amp;action=edit&amp;redlink=1" class="new">missing page</a>
<ul><li>nested</li></ul></li><li>two <a class="external text" href="https://example.org/x">site</a></li>
<li>bare <a class="external autonumber" href="https://example.org/y">[2]</a> link</li></ul>
<h3><span class="mw-headline" id="Deeper">Deeper</span></h3>
<p>Deep text<br>second line</p><!-- a comment -->
<div style="display:none">hidden text</div>
<div class="mw-heading mw-heading2"><h2 id="Second">Second</h2>
<span class="mw-editsection">[edit]</span></div>
<table class="wikitable"><caption>Rates</caption><tr><th>Years</th><th>Days</th></tr>
<tr><td>1<sup class="reference">[3]</sup></td><td>12</td></tr></table>
<h2><span class="mw-headline" id="Notes">Notes</span></h2>
<div class="mw-references-wrap"><ol class="references"><li id="cite_note-1">
<span class="mw-cite-backlink"><a href="#cite_ref-1">↑</a></span> <span class="reference-text">The law.</span>
</li></ol></div><div class="navbox">Navigation box</div></div>"""


def test_parse_html_keeps_heading_paths_and_drops_chrome() -> None:
    blocks = blocks_from_html(PARSE_HTML)
    by_heading = [(b.heading, b.text, b.is_table) for b in blocks]
    assert by_heading == [
        ("", "Intro with a link and a reference.", False),
        ("First", "- one missing page\n  - nested\n- two site\n- bare link", False),
        ("First > Deeper", "Deep text\nsecond line", False),
        ("Second", "Rates", False),
        ("Second", "| Years | Days |\n| --- | --- |\n| 1 | 12 |", True),
        ("Notes", "1. The law.", False),
    ]
    text = "\n".join(b.text for b in blocks)
    for dropped in (
        "edit",
        "Contents",
        "hidden",
        "Navigation",
        "[1]",
        "[2]",
        "↑",
        "http",
        "redlink",
        "comment",
    ):
        assert dropped not in text, dropped


def test_a_line_that_is_one_link_is_written_as_a_link_without_its_target() -> None:
    blocks = blocks_from_html(
        '<p>See <a href="/wiki/A">A</a>.</p><ul><li><a href="/wiki/B" title="B">Rights of B</a></li>'
        '<li> <a class="external text" href="https://x.example/c">C law</a> </li>'
        '<li><a href="/wiki/D">D</a> and <a href="/wiki/E">E</a></li></ul>'
        '<p>Text<br><a href="/wiki/F">F alone</a></p>'
    )
    [block] = blocks
    assert block.text.split("\n\n") == [
        "See A.",
        "- [Rights of B]()\n- [C law]()\n- D and E",
        "Text\n[F alone]()",
    ]


def test_captured_bodies_keep_every_section_heading_and_no_link_target() -> None:
    bodies = _bodies()
    blocks = blocks_from_html(bodies[2]["contentHtml"])
    assert [b.heading for b in blocks] == [
        "",
        "מי זכאי?",
        "גובה ומשך התשלום",
        "איך מממשים את הזכות?",
        "ראו גם",
    ]
    assert blocks[2].text.startswith("1. ב-5 הימים הראשונים")
    assert "- נרשמים באתר שירות התעסוקה." in blocks[3].text
    assert blocks[4].text.splitlines()[0] == "- [פיצויי פיטורים (זכות)]()"  # "see also": links alone
    for body in bodies.values():
        text = "\n".join(b.text for b in blocks_from_html(body["contentHtml"]))
        assert text
        for target in ("/index.php", "http", "redlink", "action=edit", "<?xml"):
            assert target not in text, (body["page_id"], target)


def test_captured_table_is_a_table_block_under_its_heading() -> None:
    blocks = blocks_from_html(_bodies()[7]["contentHtml"])
    tables = [b for b in blocks if b.is_table]
    assert len(tables) == 1
    assert tables[0].heading == "מספר ימי החופשה"
    assert tables[0].text.splitlines()[0] == "| ותק | ימים (שבוע עבודה של 5 ימים) |"
    assert "| שנה 7 | 15 |" in tables[0].text


@pytest.mark.parametrize("html_text", ["", "   ", '<?xml encoding="utf-8" ?>', "<div></div>", "<!-- x -->"])
def test_empty_html_has_no_blocks(html_text: str) -> None:
    assert blocks_from_html(html_text) == []


def test_deep_and_broken_markup_is_read_without_error() -> None:
    nested = "<div>" * 200 + "deep" + "</div>" * 10
    assert [b.text for b in blocks_from_html(nested)] == ["deep"]
    assert blocks_from_html("<div>" * 5000 + "past libxml2's depth cap") == []
    broken = "<p>one<li>two<h2>Head<p>under <b>bold"
    blocks = blocks_from_html(broken)
    assert blocks[-1].heading == "Head"
    assert "under bold" in blocks[-1].text


def test_preformatted_text_keeps_its_lines_and_ordered_lists_their_start() -> None:
    blocks = blocks_from_html("<pre>a  b\n  c</pre><ol start='3'><li>x</li><li>y</li></ol>")
    assert blocks[0].text == "a  b\n  c\n\n3. x\n4. y"


def test_a_content_body_with_html_is_split_by_its_headings() -> None:
    from ragbot.indexing.paragraphs import split_page
    from ragbot.sources.wiki import page_from_content_body

    body = _bodies()[2]
    page = page_from_content_body(body)
    assert page.blocks is not None
    assert "/index.php" not in page.content
    paragraphs = split_page(page, token_counters=[lambda t: len(t.split())], max_tokens=40)
    headings = {p.heading for p in paragraphs}
    assert {"מי זכאי?", "גובה ומשך התשלום", "ראו גם"} <= headings
    assert all("redlink" not in p.text for p in paragraphs)


def test_a_body_without_html_falls_back_to_its_content_and_categories_may_be_one_string() -> None:
    from ragbot.sources.wiki import page_from_content_body

    body = dict(_bodies()[3], categories="ביטוח לאומי\nהורות\n")
    del body["contentHtml"]
    page = page_from_content_body(body)
    assert page.blocks is None
    assert page.content == body["content"]
    assert page.categories == ["ביטוח לאומי", "הורות"]
    empty = page_from_content_body(dict(_bodies()[3], contentHtml="<div></div>"))
    assert empty.blocks is None and empty.content == _bodies()[3]["content"]
