"""Where pages come from: the wiki's content API (``wiki``) and uploaded files (``files``, by ``detect``)."""

from ragbot.sources.files import parse_upload
from ragbot.sources.wiki import WikiPageSource, check_callback_url, host_allowed

__all__ = ["WikiPageSource", "check_callback_url", "host_allowed", "parse_upload"]
