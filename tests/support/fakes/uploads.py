"""The one test fake of ingest's ``UploadIds``: one stable page id per upload key, in a dict."""

from __future__ import annotations

from dataclasses import dataclass, field

from ragbot_ingest.upload_ids import UPLOAD_PAGE_ID_BASE


@dataclass
class FakeIds:
    """Hands out page ids from ``UPLOAD_PAGE_ID_BASE`` up, the same one again for a known key."""

    ids: dict[str, int] = field(default_factory=dict)

    async def page_id(self, *, key: str) -> int:
        """The key's page id, a new one the first time."""
        return self.ids.setdefault(key, UPLOAD_PAGE_ID_BASE + len(self.ids))
