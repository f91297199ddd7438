"""Paragraphs and lines that are the site's furniture, not its content: never quoted, never a source.

Read from the two Kol-Zchut page sets (``samples/kolzchut/rights_pages.jsonl``, the crawl's markdown-ish
text, and ``content_api_pages.jsonl``, the real extension's stripped HTML; counts in docs/benchmarks.md):

- every crawled page ends in a generated "Key Points" / "Related Topics" block ("This document covers
  topics related to: <title>", a list of fragments, "Last Updated: <date>"): 39 of 39 pages, a
  paragraph of its own after splitting, and the fragments are copies of the page's own sentences;
- the site's notices (the legal disclaimer "המידע באתר הוא מידע כללי ואינו מידע מחייב…", who runs the
  site, the grammatical-gender note, the sponsor line) appear as a footer paragraph;
- "see also" and "for more information see" lines (``ראו גם X (url)``, ``למידע נוסף ראו X``), the links
  listed under a "ראו גם" heading, and any line that is one link and nothing else (an item of the pages'
  lists of related rights, laws and links: markdown's ``[text](url)``, or the content API's bare
  ``text (url)`` with a short text that is no sentence) point elsewhere and answer nothing: a link's
  title names a topic, it does not say anything about it;
- whereas text that many pages share through templates is real content: "נקודות זיכוי מקטינות את גובה
  מס ההכנסה…" opens 16 of the 39 pages, "רשות המסים" heads the contact list of 19; neither is flagged,
  because neither is a notice, a stamp or a pointer.

``furniture_line`` judges one line or sentence; ``is_boilerplate`` a whole paragraph: one with a stamp
line (the generated block), or whose words are mostly in furniture lines. The chat pipeline drops such
paragraphs before numbering sources, and the quote mode never quotes a furniture line of a paragraph
that is otherwise content.
"""

from __future__ import annotations

import re

from ragbot.text.links import LIST_ITEM_MARK, MARKDOWN_LINK, POINTER_MORE, POINTER_SEE, link_line

__all__ = [
    "LIST_ITEM_MARK",
    "MARKDOWN_LINK",
    "PAREN_TARGET",
    "furniture_line",
    "furniture_mask",
    "is_boilerplate",
    "link_only",
    "strip_furniture",
]

# The site speaking about itself: its disclaimer, operator, terms, language note, sponsors.
_NOTICE = re.compile(
    r"המידע באתר|השימוש במידע|באחריות המשתמש|תנאי השימוש|האתר פונה|מופעל ע\"י|מופעל על ידי|"
    r"אין בסיוע|בסיוע משרד|נטילת אחריות|"
    r"information (?:on|in) (?:this|the) (?:site|website)|terms of use|this (?:site|website) is operated|"
    r"not (?:a substitute for|legal advice)",
    re.IGNORECASE,
)
# A pointer elsewhere: "see also", "related pages", "for more information see" at the start of a line.
_SEE_ALSO = re.compile(
    r"^\s*(?:[-*+•]\s*)?(?:ראו גם|ראה גם|ראי גם|קישורים חיצוניים|see also|related (?:topics|pages|articles)"
    rf"|external links|ל?מידע נוסף,? ב|{POINTER_MORE},? {POINTER_SEE})\b",
    re.IGNORECASE,
)
# A link's target as the content API writes it after the link's text: "text (url)".
PAREN_TARGET = re.compile(
    r"\s*\((?:https?://|/|mailto:|tel:|www\.)[^()\s]*(?:\([^()\s]*\)[^()\s]*)*\)", re.IGNORECASE
)
_SENTENCE_MARK = re.compile(r"[.!?]")
# The most words a link's text has; a longer "text (url)" is a sentence that ends in a link.
LINK_TEXT_MAX_WORDS = 12
# The generated block's lines: they only ever appear in it.
_STAMP = re.compile(
    r"^\s*(?:[-*+•]\s*)?(?:last updated:|עודכן לאחרונה|this document covers topics related to"
    r"|no related topics identified)",
    re.IGNORECASE,
)
# A "see also" heading alone on its line: the lines after it, up to a blank line, are its links.
_SEE_ALSO_HEADING = re.compile(
    r"^\s*(?:#{1,6}\s*)?(?:ראו גם|ראה גם|ראי גם|קישורים חיצוניים|קישורים שימושיים"
    r"|see also|external links|useful links)\s*:?\s*$",
    re.IGNORECASE,
)
BOILERPLATE_SHARE = 0.5


def link_only(line: str) -> bool:
    """Whether a line is one link to another page and nothing else (an item of a list of links):
    a markdown link, alone or with a short attribution (``ragbot.text.links.link_line``; indexing
    writes it ``[text]()`` when it drops the target), or a short text with no sentence mark followed
    by its content-API target."""
    link = MARKDOWN_LINK.search(line)
    if link is not None and link_line(line[: link.start()], line[link.end() :]):
        return True
    text = LIST_ITEM_MARK.sub("", line.strip())
    target = PAREN_TARGET.search(text)
    if target is None or target.end() != len(text):
        return False
    title = text[: target.start()]
    return not _SENTENCE_MARK.search(title) and 0 < len(title.split()) <= LINK_TEXT_MAX_WORDS


def furniture_line(line: str, *, links: bool = True) -> bool:
    """Whether one line (or sentence) is a notice, a stamp, a "see also" pointer or (with ``links``)
    a bare link."""
    text = line.strip()
    return bool(text) and bool(
        _STAMP.match(text) or _SEE_ALSO.match(text) or _NOTICE.search(text) or (links and link_only(text))
    )


def furniture_mask(lines: list[str], *, links: bool = True) -> list[bool]:
    """Per line, whether it is furniture: ``furniture_line`` (bare links only with ``links``), or a
    line under a "see also" heading."""
    out: list[bool] = []
    under_see_also = False
    for line in lines:
        if not line.strip():
            under_see_also = False
            out.append(False)
            continue
        if _SEE_ALSO_HEADING.match(line):
            under_see_also = True
        out.append(under_see_also or furniture_line(line, links=links))
    return out


def strip_furniture(text: str) -> str:
    """The paragraph without its furniture lines (what the quote mode may quote)."""
    lines = text.splitlines()
    return "\n".join(
        line for line, furniture in zip(lines, furniture_mask(lines), strict=True) if not furniture
    )


def is_boilerplate(text: str) -> bool:
    """Whether a paragraph is furniture: it holds a stamp line, or most of its words are in furniture
    lines (``BOILERPLATE_SHARE``). A bare link does not count here: a page's list of laws, bodies or
    related rights stays a source (its titles name the pages near the question, which an abstention
    lists as related), though none of its items is ever quoted."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return False
    if any(_STAMP.match(line) for line in lines):
        return True
    words = sum(len(line.split()) for line in lines)
    mask = furniture_mask(lines, links=False)
    furniture = sum(len(line.split()) for line, flagged in zip(lines, mask, strict=True) if flagged)
    return furniture >= BOILERPLATE_SHARE * words
