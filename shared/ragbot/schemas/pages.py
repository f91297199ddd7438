"""Pages as every source produces them, the wiki's change ping, and a page's index state."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from ragbot.schemas.limits import (
    MAX_CATEGORIES,
    MAX_CONTENT_CHARS,
    MAX_NAMESPACE,
    MAX_PAGE_ID,
    MAX_REVISION_ID,
    MAX_SUMMARY_CHARS,
    MAX_TITLE_CHARS,
    positive_page_id,
)
from ragbot.text.clean import strip_unsafe

PageSourceKind = Literal["wiki", "push", "upload", "file"]


def parse_wiki_timestamp(value: str) -> datetime:
    """MediaWiki's ``YYYYMMDDHHMMSS`` (UTC) or ISO 8601 into an aware datetime."""
    value = value.strip()
    if len(value) == 14 and value.isdigit():
        return datetime.strptime(value, "%Y%m%d%H%M%S").replace(tzinfo=UTC)
    parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


class PageChangedPing(BaseModel):
    """The ping ChatbotRagContent sends on save, delete and move (field names are the wiki's).

    Its delete ping names no page: the job runs after the page row is gone, so it sends
    ``{"page_id": 0, "revision_id": 0, "revision_date": false, "callback_url": ...}`` (``is_delete``).
    """

    model_config = ConfigDict(extra="ignore")
    # revision_id is declared first so that page_id's check can read it.
    revision_id: int = Field(ge=0, le=MAX_REVISION_ID, description="the revision that triggered the ping")
    page_id: int = Field(
        ge=0, le=MAX_PAGE_ID, description="MediaWiki page id; 0 only in the extension's delete ping"
    )
    revision_date: datetime | None = Field(
        description="YYYYMMDDHHMMSS (UTC) or ISO 8601; false in the delete ping"
    )
    callback_url: str = Field(
        min_length=8, max_length=2048, description="content API base; the page id is appended"
    )

    @property
    def is_delete(self) -> bool:
        """True for the extension's delete ping, which names no page."""
        return self.page_id == 0

    @field_validator("page_id")
    @classmethod
    def _zero_only_for_delete(cls, v: int, info: ValidationInfo) -> int:
        if v == 0 and info.data.get("revision_id") != 0:
            raise ValueError(
                "page ids start at 1 (page_id 0 is only the extension's delete ping, revision_id 0)"
            )
        return v

    @model_validator(mode="after")
    def _dated_unless_delete(self) -> PageChangedPing:
        if self.page_id != 0 and self.revision_date is None:
            raise ValueError("revision_date must be YYYYMMDDHHMMSS or ISO 8601")
        return self

    @field_validator("revision_date", mode="before")
    @classmethod
    def _parse_date(cls, v: Any) -> Any:
        if v is False:  # the delete ping's "revision_date": false
            return None
        if isinstance(v, str):
            try:
                return parse_wiki_timestamp(v)
            except ValueError:
                raise ValueError("revision_date must be YYYYMMDDHHMMSS or ISO 8601") from None
        return v

    @field_validator("callback_url")
    @classmethod
    def _http_only(cls, v: str) -> str:
        if not v.startswith(("http://", "https://")):
            raise ValueError("callback_url must be an http(s) URL")
        return v


class Block(BaseModel):
    """A run of text with where it sits: its heading path and, for files, its page or slide."""

    text: str
    heading: str = ""
    location: str | None = Field(default=None, description="e.g. 'page 3' or 'slide 2' for uploads")
    is_table: bool = False

    @field_validator("text", "heading", mode="after")
    @classmethod
    def _strip_unsafe(cls, v: str) -> str:
        return strip_unsafe(v)


class Page(BaseModel):
    """The one internal shape of a page, whatever its source."""

    v: Literal[1] = 1
    page_id: int = Field(le=MAX_PAGE_ID, json_schema_extra={"minimum": 1})
    revision_id: int = Field(ge=0, le=MAX_REVISION_ID)
    revision_date: datetime | None = None
    title: str = Field(default="", max_length=MAX_TITLE_CHARS)
    url: str | None = Field(default=None, max_length=4096)
    content: str = Field(default="", max_length=MAX_CONTENT_CHARS)
    summary: str | None = Field(default=None, max_length=MAX_SUMMARY_CHARS)
    namespace: int | None = Field(default=None, ge=-MAX_NAMESPACE - 1, le=MAX_NAMESPACE)
    categories: list[str] = Field(default_factory=list, max_length=MAX_CATEGORIES)
    source: PageSourceKind = "wiki"
    blocks: list[Block] | None = Field(
        default=None, description="pre-split blocks (uploads); when absent, content is split"
    )
    extra: dict[str, Any] = Field(default_factory=dict, description="other saved fields by name")

    @field_validator("page_id", mode="after")
    @classmethod
    def _positive(cls, v: int) -> int:
        return positive_page_id(v)

    @field_validator("revision_date", mode="before")
    @classmethod
    def _parse_date(cls, v: Any) -> Any:
        return parse_wiki_timestamp(v) if isinstance(v, str) and v else (v or None)

    @field_validator("title", "content", "summary", mode="after")
    @classmethod
    def _strip_unsafe(cls, v: str | None) -> str | None:
        """NUL, other controls and bidi overrides are removed (``ragbot.text.clean``), never stored."""
        return strip_unsafe(v) if v else v

    @field_validator("categories", mode="after")
    @classmethod
    def _strip_unsafe_categories(cls, v: list[str]) -> list[str]:
        return [strip_unsafe(c) for c in v]

    @classmethod
    def from_wiki_content(cls, body: dict[str, Any]) -> Page:
        """Build a page from the content API's body (``GET callback_url + page_id``) from its ``content``.

        ``contentHtml`` is read by ``ragbot.sources.wiki.page_from_content_body``, which the wiki path uses.
        """
        known = {
            "page_id",
            "revision_id",
            "revision_date",
            "title",
            "url",
            "content",
            "summary",
            "namespace",
            "categories",
        }
        categories = body.get("categories") or []
        if isinstance(categories, str):  # older ChatbotRagContent joins them with newlines
            categories = categories.split("\n")
        categories = [c for c in (str(c).strip() for c in categories) if c]
        return cls(
            page_id=int(body["page_id"]),
            revision_id=int(body.get("revision_id") or 0),
            revision_date=body.get("revision_date") or None,
            title=str(body.get("title") or ""),
            url=body.get("url"),
            content=str(body.get("content") or ""),
            summary=body.get("summary"),
            namespace=body.get("namespace"),
            categories=[str(c) for c in categories],
            source="wiki",
            extra={k: v for k, v in body.items() if k not in known and k != "contentHtml"},
        )


class PageState(BaseModel):
    """What the index holds for a page."""

    page_id: int
    revision_id: int
    paragraphs: int
    paragraphs_per_model: dict[str, int] = Field(default_factory=dict)
    last_update: datetime | None = None
    title: str | None = None
