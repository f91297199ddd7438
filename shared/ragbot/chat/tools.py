"""What the chat service's MCP tools (``retrieve``, ``ask``, ``get_page``) return, as typed models."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, Field

from ragbot.chat.citations import confidences
from ragbot.chat.schemas import Mode, Source


class ToolParagraph(BaseModel):
    """One paragraph: the page it belongs to (title, url), its text and how it scored."""

    doc_id: str
    page_id: int
    title: str | None = None
    url: str | None = None
    paragraph: int | None = Field(default=None, description="its number within the page")
    content: str = ""
    score: float = Field(description="the retriever's final score (fused, or reranked); 0 for get_page")
    confidence_pct: int | None = Field(
        default=None, description="0-100: reranker probability, else best dense cosine; None for BM25 only"
    )
    branch_scores: dict[str, float] = Field(
        default_factory=dict, description="the raw score in each search branch (dense model/field, bm25)"
    )


class RetrieveToolResult(BaseModel):
    """``retrieve``: the paragraphs found, grouped by page in rank order, and how long each stage took."""

    query: str
    paragraphs: list[ToolParagraph]
    timings_ms: dict[str, float]


class AskToolResult(BaseModel):
    """``ask``: the answer, whose ``[n]`` marks refer to ``citations[].index``."""

    message_id: str
    question: str
    mode: Mode
    answer: str
    abstained: bool = Field(description="true when strict mode found nothing relevant and did not answer")
    citations: list[Source]
    retrieved_not_cited: list[Source]
    rewritten_question: str | None = None


class PageToolResult(BaseModel):
    """``get_page``: every indexed paragraph of one page, in paragraph order."""

    page_id: int
    title: str | None = None
    url: str | None = None
    paragraphs: list[ToolParagraph]


def tool_paragraph(
    document: Mapping[str, Any], *, branch_scores: Mapping[str, float], confidence: float | None
) -> ToolParagraph:
    """A retrieved document (the retriever's JSON shape) as a tool paragraph."""
    paragraph = document.get("paragraph")
    return ToolParagraph(
        doc_id=str(document.get("_id") or ""),
        page_id=int(document["page_id"]),
        title=str(document["title"]) if document.get("title") is not None else None,
        url=str(document["url"]) if document.get("url") else None,
        paragraph=int(paragraph) if isinstance(paragraph, int) and not isinstance(paragraph, bool) else None,
        content=str(document.get("content") or ""),
        score=float(document.get("score") or 0.0),
        confidence_pct=None if confidence is None else round(confidence * 100),
        branch_scores=dict(branch_scores),
    )


def tool_paragraphs(documents: Sequence[Mapping[str, Any]], debug: Mapping[str, Any]) -> list[ToolParagraph]:
    """Documents with their per-branch raw scores and confidence read from the retriever's debug view."""
    raw: dict[str, dict[str, float]] = {
        str(row.get("_id")): {str(k): float(v) for k, v in (row.get("raw_scores") or {}).items()}
        for row in debug.get("fused") or []
    }
    confidence = confidences(debug)
    return [
        tool_paragraph(
            d,
            branch_scores=raw.get(str(d.get("_id")), {}),
            confidence=confidence.get(str(d.get("_id"))),
        )
        for d in documents
    ]
