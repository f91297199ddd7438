"""Lines of a wiki page that are a link elsewhere and nothing more: the items of its lists of links.

Kol-Zchut's pages end in lists of related rights, laws, forms and outside guides, one link per item,
sometimes with a short attribution after it: ``[Health insurance for foreign workers](url)``,
``[The National Insurance Law](url) - chapter 7``, ``[Working hours in construction](url), the
Population Authority``, ``[Form 101](url) (PDF)``; or a pointer's lead-in before it, ``for more details:
[Filing a claim](url)``. Such a line names a topic; it says nothing about it.
Indexing keeps the brackets of such a link when it drops link targets (``[text]()``), the wiki's HTML
reader writes it the same way, and the chat never quotes it (``ragbot.chat.boilerplate.link_only``):
all three read the line with ``link_line``.
"""

from __future__ import annotations

import re

__all__ = [
    "ATTRIBUTION_MAX_WORDS",
    "LIST_ITEM_MARK",
    "MARKDOWN_LINK",
    "POINTER_MORE",
    "POINTER_SEE",
    "attribution",
    "link_line",
]

# A markdown link or image (its text is group 1); the target may hold escaped or balanced parentheses.
MARKDOWN_LINK = re.compile(r"!?\[([^\]]*)\]\((?:\\.|[^()\\\n]|\([^()\n]*\))*\)")
# A list item's mark: a bullet or a number.
_ITEM = r"(?:[-*+•]|\d{1,3}[.)])\s+"
LIST_ITEM_MARK = re.compile(rf"^\s*{_ITEM}")
# What may follow a link on its line: nothing, or a short attribution that opens with a comma, a dash
# or a parenthesis and holds no sentence mark and no second link.
_ATTRIBUTION = re.compile(r"\s*(?:[,–—-]|\()[^.!?;\[\]\n]*\.?\s*")
ATTRIBUTION_MAX_WORDS = 6
# The words of a pointer elsewhere: "for more details / information" and "see" (the chat's "see also"
# lines, ragbot.chat.boilerplate, are built on them too).
POINTER_MORE = r"(?:לפרטים נוספים|ל?מידע נוסף|for (?:more|further) (?:information|details))"
POINTER_SEE = r"(?:ראו|ראה|ראי|see)"
# What may stand before a link on its line: a list item's mark, or a pointer's lead-in (the crawl's
# flattened "what now? / for more details" table runs the cell's label into its link with no space:
# "לפרטים נוספים[Filing a claim](url)").
_LEAD = re.compile(rf"\s*(?:{_ITEM})?(?:{POINTER_MORE}\s*[,:]?\s*)?(?:{POINTER_SEE}\s*:?\s*)?", re.IGNORECASE)


def attribution(tail: str) -> bool:
    """Whether the text after a link is nothing, or a short attribution (", the Population Authority",
    " - chapter 7'", " (PDF)")."""
    if not tail.strip():
        return True
    return _ATTRIBUTION.fullmatch(tail) is not None and len(tail.split()) <= ATTRIBUTION_MAX_WORDS + 1


def link_line(lead: str, tail: str) -> bool:
    """Whether a link with ``lead`` before it and ``tail`` after it on its line is the whole line: only
    indentation, a list item's mark or a pointer's lead-in ("for more details", "see") before it, and
    nothing or an attribution after it."""
    return _LEAD.fullmatch(lead) is not None and attribution(tail)
