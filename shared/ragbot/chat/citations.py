"""From retrieved documents to numbered sources, and from ``[n]`` in an answer back to those sources.

Only numbers we handed to the model count: an answer (or an injected paragraph the model repeats)
citing ``[99]`` when there were three documents cites nothing. Confidence is the reranker's
probability when a reranker ran, else the best dense cosine (the retriever's ``cos + 1`` minus 1);
BM25-only hits have none.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ragbot.chat.schemas import Source
from ragbot.schemas.retrieval import read_kind

_CITATION = re.compile(r"\[\s*(\d{1,4}(?:\s*[,;]\s*\d{1,4})*)\s*\]")


def cited_numbers(answer: str) -> list[int]:
    """Every ``[n]`` / ``[n, m]`` number in the answer, in order of first appearance."""
    seen: dict[int, None] = {}
    for match in _CITATION.finditer(answer):
        for part in re.split(r"[,;]", match.group(1)):
            seen.setdefault(int(part.strip()), None)
    return list(seen)


def split_cited(answer: str, sources: Sequence[Source]) -> tuple[list[Source], list[Source]]:
    """(sources the answer cites, in citation order; sources retrieved but not cited, in rank order)."""
    by_index = {s.index: s for s in sources}
    cited = [by_index[n] for n in cited_numbers(answer) if n in by_index]
    cited_ids = {s.index for s in cited}
    return cited, [s for s in sources if s.index not in cited_ids]


def confidences(debug: Mapping[str, Any]) -> dict[str, float]:
    """Confidence 0..1 per document id from the retriever's debug view (absent when unknown)."""
    out: dict[str, float] = {}
    rerank = debug.get("rerank")
    if isinstance(rerank, Mapping) and rerank.get("scores"):
        scores = {str(row["_id"]): float(row["score"]) for row in rerank["scores"]}
        # A cross-encoder with a sigmoid head already gives probabilities; raw logits get one.
        probabilities = all(0.0 <= v <= 1.0 for v in scores.values())
        return {k: v if probabilities else _sigmoid(v) for k, v in scores.items()}
    branches = debug.get("branches") or {}
    dense = {name for name, b in branches.items() if read_kind(b) == "dense"}
    for row in debug.get("fused") or []:
        raw = row.get("raw_scores") or {}
        cosines = [float(v) - 1.0 for k, v in raw.items() if k in dense]
        if cosines:
            out[str(row["_id"])] = min(1.0, max(0.0, max(cosines)))
    return out


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-max(-60.0, min(60.0, x))))


def to_source(document: Mapping[str, Any], *, index: int, confidence: float | None) -> Source:
    """A retrieved document as a numbered source."""
    paragraph = document.get("paragraph")
    return Source(
        index=index,
        title=str(document.get("title") or ""),
        url=document.get("url") or None,
        page_id=int(document["page_id"]),
        paragraph=_int_or_none(paragraph),
        score=float(document.get("score") or 0.0),
        confidence_pct=None if confidence is None else round(confidence * 100),
        doc_id=str(document.get("_id") or document.get("doc_id") or ""),
    )


def unique_pages(sources: Iterable[Source]) -> list[Source]:
    """The first source of each page, in order (Kol-Zchut lists pages, not paragraphs)."""
    seen: set[int] = set()
    out: list[Source] = []
    for s in sources:
        if s.page_id not in seen:
            seen.add(s.page_id)
            out.append(s)
    return out


def number_by_page(answer: str, sources: Sequence[Source]) -> str:
    """The answer with each ``[n]`` naming its page's place in ``unique_pages(sources)`` (1-based).

    Kol-Zchut's clients show one link per page (``docs``), so a paragraph number such as ``[6]`` would
    point at nothing; ``[2][3]`` or ``[2, 3]`` on one page become a single ``[1]``. Numbers that are not
    a source's stay as written: they cite nothing either way.
    """
    pages = [s.page_id for s in unique_pages(sources)]
    place = {s.index: pages.index(s.page_id) + 1 for s in sources}

    def renumber(match: re.Match[str]) -> str:
        numbers = [int(part.strip()) for part in re.split(r"[,;]", match.group(1))]
        if not all(n in place for n in numbers):
            return match.group(0)
        return "[" + ", ".join(str(n) for n in dict.fromkeys(place[n] for n in numbers)) + "]"

    renumbered = _CITATION.sub(renumber, answer)
    return _REPEATED.sub(r"\1", renumbered)


_REPEATED = re.compile(r"(\[\d{1,4}\])(?:\s*\1)+")


class StreamedNumbers:
    """``number_by_page`` over an answer streamed in pieces: a ``[`` not yet closed is held back."""

    _HOLD = 40  # longest citation kept waiting for its "]"

    def __init__(self, sources: Sequence[Source]) -> None:
        self.sources = list(sources)
        self._held = ""

    def feed(self, piece: str) -> str:
        """What can be shown of the answer so far, renumbered."""
        text = self._held + piece
        cut = text.rfind("[")
        if cut != -1 and "]" not in text[cut:] and len(text) - cut <= self._HOLD:
            self._held, text = text[cut:], text[:cut]
        else:
            self._held = ""
        return number_by_page(text, self.sources)

    def flush(self) -> str:
        """Whatever was held back, at the end of the answer."""
        held, self._held = self._held, ""
        return number_by_page(held, self.sources)


def _int_or_none(value: Any) -> int | None:
    try:
        return None if value is None or isinstance(value, bool) else int(value)
    except (TypeError, ValueError):
        return None
