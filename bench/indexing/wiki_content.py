"""Real ChatbotRagContent bodies into paragraphs (issue 26, item 6): headings kept, link targets gone.

Measured on the bodies the real extension answered (``tests/fixtures/kolzchut-content-api``), through
the path a ping takes (``ragbot.sources.wiki.page_from_content_body``, then ``split_page`` with the
worker's defaults), and, for comparison, through the path before ``contentHtml`` was read (the
tag-stripped ``content`` alone):

- ``headings_kept_share``: of the paragraphs whose text sits under a heading in the HTML, the share
  that carry that heading (the last part of their heading path). The section of each paragraph is
  found independently of ``blocks_from_html``: each heading's following text in the HTML is matched
  against the paragraph. Target 1.0.
- ``link_targets_in_text``: how many link targets (each ``<a href>`` of the HTML whose text is not the
  URL itself, as written and URL-decoded, and any ``redlink=1`` / ``action=edit``) appear in the
  stored paragraph texts. Target 0.

Token counts: a word counter at the worker's default budget of 512 (the bodies are short; the figures
do not depend on the model's tokenizer). Run: ``uv run python -m bench.indexing.wiki_content``; writes
bench/results/wiki_content.json.
"""

from __future__ import annotations

import json
import platform
import re
import sys
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from lxml import html

from ragbot.indexing.paragraphs import DEFAULT_PARAGRAPH_TOKENS, ParagraphText, split_page
from ragbot.schemas.pages import Page
from ragbot.sources.wiki import page_from_content_body

ROOT = Path(__file__).resolve().parents[2]
BODIES = ROOT / "tests" / "fixtures" / "kolzchut-content-api" / "bodies.jsonl"
OUT = ROOT / "bench" / "results" / "wiki_content.json"
_HEADING = re.compile(r"^h[1-6]$")


def _norm(text: str) -> str:
    return " ".join(text.split())


def sections(content_html: str) -> list[tuple[str, list[str]]]:
    """(heading, texts under it) in document order; the text before the first heading has heading ""."""
    root = html.fragment_fromstring(re.sub(r"^\s*<\?xml[^>]*\?>", "", content_html), create_parent="div")
    out: list[tuple[str, list[str]]] = [("", [])]
    for el in root.iter():
        if not isinstance(el.tag, str):
            continue
        if _HEADING.match(el.tag):
            headline = el.find(".//span[@class='mw-headline']")
            out.append((_norm((headline if headline is not None else el).text_content()), []))
        elif el.tag in ("p", "li", "td", "th", "dd", "dt"):
            text = _norm(el.text_content())
            if len(text) >= 8:
                out[-1][1].append(text)
    return out


def expected_heading(paragraph: str, found: list[tuple[str, list[str]]]) -> str | None:
    """The heading of the HTML section the paragraph's text comes from (None: no match)."""
    flat = _norm(paragraph.replace("|", " "))
    for heading, texts in found:
        if any(t[:40] in flat for t in texts):
            return heading
    return None


def link_targets(content_html: str) -> set[str]:
    """Every link target a reader does not see as text."""
    root = html.fragment_fromstring(re.sub(r"^\s*<\?xml[^>]*\?>", "", content_html), create_parent="div")
    targets: set[str] = set()
    for a in root.iter("a"):
        href = a.get("href") or ""
        if href and not href.startswith("#") and _norm(a.text_content()) != href:
            targets.update({href, unquote(href)})
    return targets


def measure(paragraphs_of: Any, bodies: list[dict[str, Any]]) -> dict[str, Any]:
    kept = under_heading = unmatched = targets_found = 0
    paragraphs_total = 0
    for body in bodies:
        found = sections(body["contentHtml"])
        targets = link_targets(body["contentHtml"]) | {"redlink=1", "action=edit"}
        paragraphs: list[ParagraphText] = paragraphs_of(body)
        paragraphs_total += len(paragraphs)
        for p in paragraphs:
            targets_found += sum(p.text.count(t) for t in targets)
            heading = expected_heading(p.text, found)
            if heading is None:
                unmatched += 1
            elif heading:
                under_heading += 1
                kept += p.heading.split(" > ")[-1] == heading
    return {
        "paragraphs": paragraphs_total,
        "paragraphs_under_a_heading": under_heading,
        "paragraphs_unmatched": unmatched,
        "headings_kept_share": round(kept / under_heading, 4) if under_heading else None,
        "link_targets_in_text": targets_found,
    }


def _split(page: Page) -> list[ParagraphText]:
    return split_page(page, token_counters=[lambda t: len(t.split())], max_tokens=DEFAULT_PARAGRAPH_TOKENS)


def main() -> int:
    bodies = [json.loads(line) for line in BODIES.read_text(encoding="utf-8").splitlines() if line.strip()]
    html_path = measure(lambda b: _split(page_from_content_body(b)), bodies)
    content_only = measure(
        lambda b: _split(Page.from_wiki_content({k: v for k, v in b.items() if k != "contentHtml"})), bodies
    )
    result = {
        "source": "tests/fixtures/kolzchut-content-api/bodies.jsonl (real ChatbotRagContent, MediaWiki 1.39)",
        "pages": len(bodies),
        "max_tokens": DEFAULT_PARAGRAPH_TOKENS,
        "token_counter": "words",
        **{k: v for k, v in html_path.items()},
        "content_only": content_only,
        "python": platform.python_version(),
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    sys.stdout.write(json.dumps(result, ensure_ascii=False, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
