"""Split a page into paragraphs that every embedding model can read whole.

Two strategies:

- ``structure`` (default): headings and blank-line paragraphs. Wiki content from the content API is
  markdown-ish plain text: ``### Heading`` lines, or a heading line underlined by ``- ----`` /
  ``-----`` (level 2) or ``=====`` (level 1); a ``---`` after a blank line is a thematic break.
  Consecutive paragraphs under the same heading are packed greedily up to ``max_tokens``, measured
  as the largest count over ``token_counters`` (each model's own tokenizer). A paragraph over the
  budget is cut at lines, then sentences, then words (then characters, for a giant "word"). Tables
  (markdown ``|`` rows or wiki ``{| ... |}``) stay whole when they fit; a larger table is cut
  between rows and each part repeats the header row(s). Pages with ``blocks`` (uploads) are split
  block by block, keeping each block's heading and location ("page 3").
- ``window``: GenericChatBot's sliding window (``window_words`` words, ``window_overlap`` shared
  with the previous window), each window still capped at the token budget.

The heading path ("H2 > H3") is returned beside the text, never inside it.

``link_targets="drop"`` (the default) keeps a markdown link's text and drops its target (``[text](url)``
becomes ``text``): link targets are 45% of the characters of the Kol-Zchut pages, URL-encoded Hebrew
costs about one token per 1.5 characters, and dropping them halves the paragraph count at a 256-token
budget. ``keep`` stores the text as the wiki sent it.

Token counting: a counter returns what its model is fed for a text, special tokens and prefix
included. Each counter's fixed overhead is measured once, as ``2*c("a") - c("a a")``, and summed
pieces are charged it once, so specials are never counted twice. Every piece of text is counted once
(plus one check of each packed paragraph), which keeps a 5 MB page linear in time and memory.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

from ragbot.errors import ConfigurationError
from ragbot.indexing.budget import TokenBudget, TokenCounter
from ragbot.schemas.pages import Page
from ragbot.text.links import link_line

Strategy = Literal["structure", "window"]
LinkTargets = Literal["keep", "drop"]
STRATEGIES: tuple[str, ...] = ("structure", "window")
# The defaults every indexing path shares (``ragbot.indexing.pipeline.SplitOptions``).
DEFAULT_LINK_TARGETS: LinkTargets = "drop"
DEFAULT_PARAGRAPH_TOKENS = 512


_ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?[ \t#]*$")
_SETEXT = re.compile(r"^ {0,3}(?:(=+)|(?:- )?(-{2,}))[ \t]*$")
_THEMATIC_BREAK = re.compile(r"^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$")
_LIST_ITEM = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s")
_MD_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
# A markdown link or image; the target may hold escaped or balanced parentheses and a "title".
_LINK_WITH_TARGET = re.compile(r"!?\[([^\]\n]*)\]\((?:\\.|[^()\\\n]|\([^()\n]*\))*\)")
_TABLE_SEPARATOR = re.compile(r"^\s*\|?\s*:?-{2,}")
_SENTENCE_END = re.compile(r"(?<=[.!?؟。…])\s+")


@dataclass(frozen=True, slots=True)
class ParagraphText:
    """One paragraph of a page: its text, heading path, location (uploads) and number in the page."""

    text: str
    heading: str
    location: str | None
    index: int


def split_page(
    page: Page,
    *,
    token_counters: Sequence[TokenCounter],
    max_tokens: int,
    strategy: Strategy = "structure",
    window_words: int = 200,
    window_overlap: int = 40,
    link_targets: LinkTargets = DEFAULT_LINK_TARGETS,
) -> list[ParagraphText]:
    """Paragraphs of a page, each within ``max_tokens`` for every counter, in reading order."""
    budget = TokenBudget(token_counters, max_tokens)
    if link_targets == "drop":
        page = drop_link_targets(page)
    elif link_targets != "keep":
        raise ConfigurationError(f"link_targets must be 'keep' or 'drop', not {link_targets!r}")
    if strategy == "structure":
        chunks = _split_structure(page, budget)
    elif strategy == "window":
        if window_words < 1 or not 0 <= window_overlap < window_words:
            raise ConfigurationError(
                f"window strategy needs window_words >= 1 and 0 <= window_overlap < window_words "
                f"(got {window_words}, {window_overlap})"
            )
        chunks = _split_windows(page, budget, window_words, window_overlap)
    else:
        raise ConfigurationError(f"unknown paragraph strategy {strategy!r}; use one of {list(STRATEGIES)}")
    return [
        ParagraphText(text=text, heading=heading, location=location, index=i)
        for i, (text, heading, location) in enumerate(chunks)
    ]


def drop_targets(text: str) -> str:
    """Every markdown ``[text](target)`` reduced to ``text``, except a link that is its line's whole
    content (an item of a list of links, ``ragbot.text.links.link_line``): it keeps its brackets with
    an empty target, ``[text]()``, so the chat still knows the line is a link to another page and never
    quotes it as an answer (``ragbot.chat.boilerplate.link_only``); the brackets add no words to BM25
    or the embedding."""

    def one(match: re.Match[str]) -> str:
        start = text.rfind("\n", 0, match.start()) + 1
        end = text.find("\n", match.end())
        rest = text[match.end() : len(text) if end < 0 else end]
        alone = link_line(text[start : match.start()], rest)
        if alone and not match.group(0).startswith("!") and match.group(1).strip():
            return f"[{match.group(1)}]()"
        return match.group(1)

    return _LINK_WITH_TARGET.sub(one, text)


def drop_link_targets(page: Page) -> Page:
    """The page with its link targets dropped (``drop_targets``), in its content and blocks."""
    update: dict[str, object] = {"content": drop_targets(page.content)}
    if page.blocks is not None:
        update["blocks"] = [b.model_copy(update={"text": drop_targets(b.text)}) for b in page.blocks]
    return page.model_copy(update=update)


# --- units and blocks ---------------------------------------------------------------------------


@dataclass(slots=True)
class _Unit:
    """A piece that fits the budget on its own; ``sep`` joins it to the piece before it."""

    text: str
    sizes: tuple[int, ...]
    sep: str


# --- structure ----------------------------------------------------------------------------------


@dataclass(slots=True)
class _Block:
    text: str
    is_table: bool


Chunk = tuple[str, str, str | None]  # text, heading path, location


def _split_structure(page: Page, budget: TokenBudget) -> list[Chunk]:
    out: list[Chunk] = []
    if page.blocks is not None:
        section: list[_Block] = []
        key: tuple[str, str | None] | None = None
        for block in page.blocks:
            block_key = (block.heading.strip(), block.location)
            if key is not None and block_key != key:
                out.extend(_pack_section(section, key[0], key[1], budget))
                section = []
            key = block_key
            if block.is_table:
                if block.text.strip():
                    section.append(_Block(block.text.strip("\n"), True))
            else:
                section.extend(b for _, b in _scan(block.text, headings=False))
        if key is not None:
            out.extend(_pack_section(section, key[0], key[1], budget))
        return out
    current: list[_Block] = []
    heading = ""
    for path, piece in _scan(page.content, headings=True):
        if path != heading:
            out.extend(_pack_section(current, heading, None, budget))
            current, heading = [], path
        current.append(piece)
    out.extend(_pack_section(current, heading, None, budget))
    return out


def _scan(text: str, *, headings: bool) -> Iterator[tuple[str, _Block]]:
    """(heading path, block) for each paragraph or table of markdown-ish text, in order."""
    lines = text.splitlines()
    stack: list[tuple[int, str]] = []
    path = ""
    para: list[str] = []
    n = len(lines)
    i = 0
    while i < n:
        line = lines[i]
        stripped = line.strip()
        if headings:
            level, title, consumed = _heading_at(lines, i)
            if consumed:
                yield from _flush(para, path)
                para = []
                while stack and stack[-1][0] >= level:
                    stack.pop()
                if title:
                    stack.append((level, title))
                path = " > ".join(t for _, t in stack)
                i += consumed
                continue
        if not stripped:
            yield from _flush(para, path)
            para = []
        elif stripped.startswith("{|"):  # a wiki table runs to its "|}" whatever blank lines it holds
            yield from _flush(para, path)
            para = []
            end = i
            while end < n and not lines[end].strip().startswith("|}"):
                end += 1
            yield path, _Block("\n".join(lines[i : end + 1]).strip("\n"), True)
            i = end + 1
            continue
        elif not para and _THEMATIC_BREAK.match(line):
            pass  # "---" between sections: a separator, not text
        else:
            para.append(line)
        i += 1
    yield from _flush(para, path)


def _heading_at(lines: list[str], i: int) -> tuple[int, str, int]:
    """(level, title, lines consumed) when a heading starts at line ``i``; consumed 0 otherwise."""
    line = lines[i]
    atx = _ATX.match(line)
    if atx:
        return len(atx.group(1)), _clean_heading(atx.group(2) or ""), 1
    stripped = line.strip()
    if (
        stripped
        and i + 1 < len(lines)
        and not _LIST_ITEM.match(line)
        and not stripped.startswith(("|", "{|", ">"))
        and not _THEMATIC_BREAK.match(line)
    ):
        underline = _SETEXT.match(lines[i + 1])
        if underline:
            return (1 if underline.group(1) else 2), _clean_heading(stripped), 2
    return 0, "", 0


def _clean_heading(title: str) -> str:
    title = _MD_LINK.sub(r"\1", title)
    return " ".join(title.replace("**", "").replace("__", "").split()).strip("*_ ")


def _flush(lines: list[str], path: str) -> Iterator[tuple[str, _Block]]:
    """A paragraph's lines as text and markdown-table blocks (a table may follow text directly)."""
    run: list[str] = []
    in_table = False
    for line in lines:
        is_row = line.lstrip().startswith("|")
        if run and is_row != in_table:
            yield path, _Block("\n".join(run).strip("\n"), in_table)
            run = []
        in_table = is_row
        run.append(line)
    if run:
        text = "\n".join(run).strip("\n")
        if text.strip():
            yield path, _Block(text, in_table)


def _pack_section(
    blocks: list[_Block], heading: str, location: str | None, budget: TokenBudget
) -> list[Chunk]:
    units: list[_Unit] = []
    for block in blocks:
        if not block.text.strip():
            continue
        if block.is_table:
            units.extend(_table_units(block.text, budget))
        else:
            units.extend(_fit(block.text.strip(), "\n\n", budget, 0))
    return [(text, heading, location) for text in _pack(units, budget)]


# --- fitting: cut a text until every piece fits --------------------------------------------------


def _fit(text: str, sep: str, budget: TokenBudget, level: int) -> list[_Unit]:
    """``text`` as one unit when it fits, else cut at the next finer boundary (lines, sentences...)."""
    if len(text) <= budget.max_chars:  # longer text cannot fit: do not pay to count it whole
        sizes = budget.sizes(text)
        if budget.fits(sizes, len(text)):
            return [_Unit(text, sizes, sep)]
    for lvl in range(level, 3):
        parts, part_sep = _cut(text, lvl)
        if len(parts) > 1:
            units: list[_Unit] = []
            for j, part in enumerate(parts):
                units.extend(_fit(part, sep if j == 0 else part_sep, budget, lvl + 1))
            return units
    return _cut_chars(text, sep, budget)


def _cut(text: str, level: int) -> tuple[list[str], str]:
    if level == 0:
        return [p for p in (line.rstrip() for line in text.split("\n")) if p.strip()], "\n"
    if level == 1:
        return [p.strip() for p in _SENTENCE_END.split(text) if p.strip()], " "
    return text.split(), " "


def _cut_chars(text: str, sep: str, budget: TokenBudget) -> list[_Unit]:
    """Last resort for one enormous "word": cut by characters, each cut sized by the last one."""
    units: list[_Unit] = []
    take = min(budget.max_chars, budget.room * 4)
    start = 0
    while start < len(text):
        take = max(1, min(len(text) - start, take))
        while True:
            piece = text[start : start + take]
            piece_sizes = budget.sizes(piece)
            if take == 1 or budget.fits(piece_sizes, len(piece)):
                break
            over = max(max(piece_sizes) / max(1, budget.room), len(piece) / max(1, budget.max_chars))
            take = max(1, min(take - 1, int(take / max(over, 1.0) * 0.95)))
        units.append(_Unit(piece, piece_sizes, sep if start == 0 else ""))
        start += take
    return units


def _table_units(text: str, budget: TokenBudget) -> list[_Unit]:
    """A table whole when it fits; else row groups that each repeat the header."""
    text = text.strip()
    sizes = budget.sizes(text)
    if budget.fits(sizes, len(text)):
        return [_Unit(text, sizes, "\n\n")]
    lines = [line for line in text.split("\n") if line.strip()]
    if lines and lines[0].strip().startswith("{|"):
        body_start = next((k for k, line in enumerate(lines) if line.strip().startswith("|-")), 1)
        header, rows, footer = lines[:body_start], lines[body_start:], "\n|}"
        if rows and rows[-1].strip().startswith("|}"):
            rows = rows[:-1]
    else:
        has_separator = len(lines) > 1 and _TABLE_SEPARATOR.match(lines[1]) is not None
        header, rows, footer = lines[: 2 if has_separator else 1], lines[2 if has_separator else 1 :], ""
    head = "\n".join(header)
    head_sizes = budget.sizes(head + footer)
    room_budget = budget.keeping(head_sizes, len(head) + len(footer) + 1)
    if not rows or room_budget.room <= 0 or room_budget.max_chars <= 0:
        return _fit(text, "\n\n", budget, 0)  # a header that fills the budget: cut like text
    row_units: list[_Unit] = []
    for row in rows:
        row_units.extend(_fit(row, "\n", room_budget, 1))
    out: list[_Unit] = []
    for body in _pack(row_units, room_budget):
        piece = f"{head}\n{body}{footer}"
        out.append(_Unit(piece, budget.sizes(piece), "\n\n"))
    return out


# --- packing ------------------------------------------------------------------------------------


def _pack(units: list[_Unit], budget: TokenBudget) -> list[str]:
    """Greedy: add units while the summed sizes fit; each packed text is checked once, exactly."""
    out: list[str] = []
    group: list[_Unit] = []
    totals: list[int] = []
    chars = 0
    for unit in units:
        if group:
            new_totals = [a + b for a, b in zip(totals, unit.sizes, strict=True)]
            new_chars = chars + len(unit.sep) + len(unit.text)
            if budget.fits(new_totals, new_chars):
                group.append(unit)
                totals, chars = new_totals, new_chars
                continue
            out.extend(_emit(group, budget))
        group, totals, chars = [unit], list(unit.sizes), len(unit.text)
    if group:
        out.extend(_emit(group, budget))
    return [text.strip() for text in out if text.strip()]


def _join(units: Sequence[_Unit]) -> str:
    return units[0].text + "".join(u.sep + u.text for u in units[1:])


def _emit(group: list[_Unit], budget: TokenBudget) -> list[str]:
    text = _join(group)
    if len(group) == 1 or budget.text_fits(text):
        return [text]
    # The sum under-estimated (a tokenizer merged across a join): rebuild with exact counts.
    out: list[str] = []
    current: list[_Unit] = []
    for unit in group:
        if current and not budget.text_fits(_join([*current, unit])):
            out.append(_join(current))
            current = []
        current.append(unit)
    if current:
        out.append(_join(current))
    return out


# --- sliding window -----------------------------------------------------------------------------


def _split_windows(page: Page, budget: TokenBudget, size: int, overlap: int) -> list[Chunk]:
    sources: list[tuple[str, str, str | None]] = (
        [(b.text, b.heading.strip(), b.location) for b in page.blocks]
        if page.blocks is not None
        else [(page.content, "", None)]
    )
    out: list[Chunk] = []
    step = size - overlap
    for text, heading, location in sources:
        words = text.split()
        for start in range(0, len(words), step):
            window = " ".join(words[start : start + size])
            # A window over the token budget is cut (and the cuts re-packed), never truncated.
            for text in _pack(_fit(window, " ", budget, 1), budget):
                out.append((text, heading, location))
            if start + size >= len(words):
                break
    return out
