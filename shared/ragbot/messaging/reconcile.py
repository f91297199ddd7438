"""Reconcile planned: the wiki's relevant-page list read in any of its shapes, compared with the index.

A reconcile takes the list of every page the wiki wants indexed and the index's own
``{page_id: revision}`` (``SearchStore.page_revisions``), then

- **queues** the listed pages the index lacks, and those whose listed revision is newer than the
  indexed one (a list without revisions only queues the missing pages);
- **removes** the indexed pages the list does not name (deleted, excluded with
  ``__EXCLUDE_FROM_RAG__``, moved out of the RAG namespaces, or a ping lost while ragbot was down).

A **guard** refuses a plan that would remove more than ``max_remove_share`` of the indexed pages
unless forced, so a truncated or empty list never empties the index; its message names the pages it
would remove and how to confirm. A dry run is never refused: it answers the plan and the guard's word.

The list comes in one of these shapes (``parse_listing``):

- ChatbotRagContent's ``maintenance/GetRelevantPageIds.php --output=json``: ``[1, 2, 3]``, or with
  ``--with-titles`` ``[{"id": 1, "title": "..."}, ...]``;
- its default ``--output=list``, or any plain id list as text: one id per line (``id<TAB>title``
  with ``--with-titles``; blank lines and ``#`` comments skipped);
- a JSON array of ids, or of objects with ``page_id`` / ``pageid`` / ``id`` and optionally
  ``revision_id`` / ``lastrevid`` / ``revid``;
- a MediaWiki action API answer: ``list=allpages`` (``query.allpages[].pageid``) or a generator
  (``generator=allpages&prop=info``: ``query.pages`` as an object or, with ``formatversion=2``, a
  list, with ``lastrevid``; ``prop=revisions`` gives ``revisions[0].revid``). An answer that still
  has ``continue`` is one page of a longer listing and is refused: pass ``list_url`` instead, which
  ingest follows to its end.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, Field, JsonValue, model_validator

from ragbot.errors import ReconcileRefused, ValidationFailed
from ragbot.schemas.limits import MAX_PAGE_ID, MAX_REVISION_ID

__all__ = [
    "ReconcilePlan",
    "ReconcileRequest",
    "check_guard",
    "guard_refusal",
    "parse_listing",
    "plan_reconcile",
]

_ID_KEYS = ("page_id", "pageid", "id")
_REVISION_KEYS = ("revision_id", "lastrevid", "revid")
_FIELD = "listing"


class ReconcileRequest(BaseModel):
    """``POST /v1/reconcile``: the wiki's relevant pages, inline (``listing``) or at ``list_url``."""

    listing: JsonValue = Field(
        default=None,
        description="GetRelevantPageIds.php JSON, a JSON array of ids, a MediaWiki API answer, "
        "or text with one id per line",
    )
    list_url: str | None = Field(
        default=None,
        min_length=8,
        max_length=2048,
        description="a listing to read instead (MediaWiki allpages with continuation, or ragbot's)",
    )
    callback_url: str | None = Field(
        default=None,
        min_length=8,
        max_length=2048,
        description="content API base the worker fetches queued pages from, as in pings "
        "(required when pages are to be queued)",
    )
    dry_run: bool = Field(default=False, description="say what would change, change nothing")
    force: bool = Field(default=False, description="remove past the guard's share of the index")

    @model_validator(mode="after")
    def _one_source(self) -> ReconcileRequest:
        if (self.listing is None) == (self.list_url is None):
            raise ValueError("give exactly one of 'listing' and 'list_url'")
        return self


@dataclass(slots=True)
class ReconcilePlan:
    """What a reconcile changes: pages to queue (with the listed revision, 0 if unknown) and to remove."""

    listed: int
    indexed: int
    missing: list[int] = field(default_factory=list)
    stale: list[int] = field(default_factory=list)
    remove: list[int] = field(default_factory=list)
    revisions: dict[int, int] = field(default_factory=dict)

    @property
    def queue(self) -> list[int]:
        """Every page to (re)index, by ascending id."""
        return sorted([*self.missing, *self.stale])

    @property
    def remove_share(self) -> float:
        """The share of the indexed pages the plan removes (0 for an empty index)."""
        return len(self.remove) / self.indexed if self.indexed else 0.0

    @property
    def unchanged(self) -> int:
        """Listed pages already indexed at their listed revision (or any, when none is listed)."""
        return self.listed - len(self.missing) - len(self.stale)


def parse_listing(data: Any) -> dict[int, int]:
    """The listed pages as ``{page_id: revision}`` (0: revision not given), duplicates merged."""
    if isinstance(data, str | bytes):
        text = data.decode("utf-8") if isinstance(data, bytes) else data
        return _merge(_from_text(text))
    if isinstance(data, list):
        return _merge(_from_item(item, where=f"item {n}") for n, item in enumerate(data))
    if isinstance(data, dict):
        if "query" in data or "batchcomplete" in data:
            return _merge(_from_mediawiki(data))
        if isinstance(data.get("pages"), list):
            if data.get("next"):
                raise ValidationFailed(
                    "the listing has a 'next' page: pass its first URL as list_url instead", field=_FIELD
                )
            return _merge(_from_item(item, where=f"pages[{n}]") for n, item in enumerate(data["pages"]))
        if "error" in data:
            raise ValidationFailed(f"the wiki answered an error: {data['error']}", field=_FIELD)
    raise ValidationFailed(
        "not a page list: expected GetRelevantPageIds.php JSON, a JSON array of ids, a MediaWiki "
        "API answer (query.allpages / query.pages) or one id per line",
        field=_FIELD,
    )


def plan_reconcile(*, listed: Mapping[int, int], indexed: Mapping[int, int]) -> ReconcilePlan:
    """Compare the list with the index: missing and older pages to queue, unlisted ones to remove."""
    plan = ReconcilePlan(listed=len(listed), indexed=len(indexed))
    for page_id in sorted(listed):
        revision = listed[page_id]
        have = indexed.get(page_id)
        if have is None:
            plan.missing.append(page_id)
        elif revision > have:
            plan.stale.append(page_id)
        else:
            continue
        plan.revisions[page_id] = revision
    plan.remove = sorted(set(indexed) - set(listed))
    return plan


_NAMED = 50  # pages named in the guard's message; the rest are counted


def guard_refusal(plan: ReconcilePlan, *, max_remove_share: float) -> str | None:
    """Why the guard refuses the plan, naming the pages it would remove and how to confirm; None if not."""
    if plan.remove_share <= max_remove_share:
        return None
    named = ", ".join(str(p) for p in plan.remove[:_NAMED])
    more = f" and {len(plan.remove) - _NAMED} more" if len(plan.remove) > _NAMED else ""
    return (
        f"reconcile would remove {len(plan.remove)} of {plan.indexed} indexed pages "
        f"({plan.remove_share:.0%}, over the {max_remove_share:.0%} allowed by "
        f"RAGBOT_INGEST_RECONCILE_MAX_REMOVE_SHARE): page ids {named}{more}. Is the list truncated? "
        "If it is complete "
        "and these pages are gone from the wiki, confirm with POST /v1/reconcile and the same list "
        'plus "force": true (a dry run shows the same plan and changes nothing)'
    )


def check_guard(plan: ReconcilePlan, *, max_remove_share: float, force: bool) -> None:
    """Refuse a plan that removes more than ``max_remove_share`` of the index, unless forced."""
    refusal = None if force else guard_refusal(plan, max_remove_share=max_remove_share)
    if refusal is not None:
        raise ReconcileRefused(refusal, field="force")


def _merge(pairs: Iterable[tuple[int, int]]) -> dict[int, int]:
    merged: dict[int, int] = {}
    for page_id, revision in pairs:
        merged[page_id] = max(revision, merged.get(page_id, 0))
    return merged


def _page_id(value: Any, *, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValidationFailed(f"{where}: {value!r} is not a page id", field=_FIELD)
    try:
        page_id = int(value)
    except ValueError:
        raise ValidationFailed(f"{where}: {value!r} is not a page id", field=_FIELD) from None
    if not 1 <= page_id <= MAX_PAGE_ID:
        raise ValidationFailed(f"{where}: page id {page_id} is out of range", field=_FIELD)
    return page_id


def _revision(item: Mapping[str, Any], *, where: str) -> int:
    value: Any = next((item[k] for k in _REVISION_KEYS if item.get(k) is not None), None)
    revisions = item.get("revisions")
    if value is None and isinstance(revisions, list) and revisions and isinstance(revisions[0], dict):
        value = revisions[0].get("revid")
    if value is None:
        return 0
    refused = ValidationFailed(f"{where}: revision {value!r} is not a revision id", field=_FIELD)
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise refused
    try:
        revision = int(value)
    except ValueError:
        raise refused from None
    if not 0 <= revision <= MAX_REVISION_ID:
        raise refused
    return revision


def _from_item(item: Any, *, where: str) -> tuple[int, int]:
    if not isinstance(item, dict):
        return _page_id(item, where=where), 0
    key = next((k for k in _ID_KEYS if k in item), None)
    if key is None:
        raise ValidationFailed(f"{where}: no page id ({', '.join(_ID_KEYS)})", field=_FIELD)
    return _page_id(item[key], where=where), _revision(item, where=where)


def _from_text(text: str) -> Iterable[tuple[int, int]]:
    text = text.removeprefix("\ufeff")
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        # "id" or "id<TAB>title" (GetRelevantPageIds.php --with-titles); a title may hold spaces.
        yield _page_id(stripped.split(None, 1)[0], where=f"line {number}"), 0


def _from_mediawiki(body: Mapping[str, Any]) -> Iterable[tuple[int, int]]:
    if body.get("continue"):
        raise ValidationFailed(
            "the MediaWiki answer has 'continue': it is one page of a longer listing; pass the "
            "listing's URL as list_url (followed to its end) or the whole list",
            field=_FIELD,
        )
    query = body.get("query") or {}
    if not isinstance(query, dict):
        raise ValidationFailed("'query' is not an object", field=_FIELD)
    items: Any = query.get("allpages")
    if items is None:
        items = query.get("pages") or []
        if isinstance(items, dict):
            items = list(items.values())
    if not isinstance(items, list):
        raise ValidationFailed("the listed pages are not a list", field=_FIELD)
    for n, item in enumerate(items):
        if isinstance(item, dict) and ("missing" in item or "invalid" in item):
            continue
        yield _from_item(item, where=f"query item {n}")
