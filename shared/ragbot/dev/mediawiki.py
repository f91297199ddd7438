"""The local MediaWiki of ``make run-wiki``: the sample pages as wikitext, written through the Action API.

``markdown_to_wikitext`` turns the markdown-ish sample records (``samples/kolzchut/pages.jsonl``: ATX and
flattened setext headings, ``*`` lists, ``**bold**``, ``[text](url "title")`` links) into wikitext, so the
wiki renders real headings, lists and links and ragbot reads them back from ``action=parse`` HTML.
``WikiWriter`` logs in with a bot password (``action=login``) and creates or edits pages.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

import httpx

_SETEXT_UNDERLINE = re.compile(r"^-?\s*-{3,}$")  # the samples' export left "- ----" under H2 titles
_ATX = re.compile(r"^(#{1,6})\s+(.*?)\s*#*$")
_LINK = re.compile(r'\[([^\]]+)\]\(([^)\s]+)(?:\s+"([^"]*)")?\)')
_BOLD = re.compile(r"\*\*(.+?)\*\*")
_ITEM = re.compile(r"^\s*[*-]\s+")
_WIKI_PATH = re.compile(r"^/(?:[a-z]{2}/)?")


class WikiWriteError(RuntimeError):
    """The wiki refused a login or an edit."""


def _link(match: re.Match[str]) -> str:
    text, url, title = match.group(1), match.group(2), match.group(3)
    if url.startswith(("http://", "https://")):
        return f"[{url} {text}]"
    target = title or unquote(_WIKI_PATH.sub("", url)).replace("_", " ")
    return f"[[{target.split('#')[0]}|{text}]]" if target else text


def _inline(line: str) -> str:
    return _BOLD.sub(r"'''\1'''", _LINK.sub(_link, line))


def markdown_to_wikitext(text: str) -> str:
    """Wikitext for one sample page's markdown-ish content (headings, lists, bold, links, rules)."""
    lines = text.splitlines()
    out: list[str] = []
    for index, line in enumerate(lines):
        stripped = line.strip()
        following = lines[index + 1].strip() if index + 1 < len(lines) else ""
        if stripped and _SETEXT_UNDERLINE.match(following) and not _SETEXT_UNDERLINE.match(stripped):
            out.append(f"== {_inline(stripped)} ==")
        elif _SETEXT_UNDERLINE.match(stripped):
            previous = lines[index - 1].strip() if index else ""
            out.append("" if previous else "----")  # an underline, or a horizontal rule of its own
        elif match := _ATX.match(stripped):
            marks = "=" * max(2, len(match.group(1)))
            out.append(f"{marks} {_inline(match.group(2))} {marks}")
        elif _ITEM.match(line):
            out.append("* " + _inline(_ITEM.sub("", line, count=1)))
        else:
            out.append(_inline(line))
    return "\n".join(out).strip() + "\n"


def sample_wikitext(page: Mapping[str, Any]) -> str:
    """A sample record's page text: its content as wikitext, then its categories as category links."""
    categories = page.get("categories") or []
    if isinstance(categories, str):
        categories = [c for c in categories.splitlines() if c.strip()]
    links = "".join(f"\n[[Category:{c}]]" for c in categories)
    return markdown_to_wikitext(str(page.get("content", ""))) + links


@dataclass
class WikiWriter:
    """A bot-password session on one wiki's api.php that creates and edits pages."""

    api_url: str
    user: str
    password: str
    timeout_s: float = 60.0
    _client: httpx.Client = field(init=False, repr=False)
    _csrf: str = field(default="", init=False, repr=False)

    def __post_init__(self) -> None:
        self._client = httpx.Client(timeout=self.timeout_s, headers={"User-Agent": "ragbot-run-wiki/0.1"})

    def close(self) -> None:
        self._client.close()

    def _call(self, *, post: bool, **params: Any) -> dict[str, Any]:
        query = {"format": "json", "formatversion": "2", **params}
        try:
            if post:
                response = self._client.post(self.api_url, data=query)
            else:
                response = self._client.get(self.api_url, params=query)
            response.raise_for_status()
            body: dict[str, Any] = response.json()
        except (httpx.HTTPError, ValueError) as exc:
            raise WikiWriteError(f"{self.api_url} {params.get('action')}: {exc!r}") from exc
        if "error" in body:
            raise WikiWriteError(f"{self.api_url} {params.get('action')}: {body['error']}")
        return body

    def login(self) -> None:
        """Log in (``Name@app`` with its bot password) and fetch the edit token."""
        tokens = self._call(post=False, action="query", meta="tokens", type="login")
        login = self._call(
            post=True,
            action="login",
            lgname=self.user,
            lgpassword=self.password,
            lgtoken=tokens["query"]["tokens"]["logintoken"],
        )["login"]
        if login.get("result") != "Success":
            raise WikiWriteError(f"login to {self.api_url} as {self.user} failed: {login}")
        self._csrf = self._call(post=False, action="query", meta="tokens")["query"]["tokens"]["csrftoken"]

    def edit(self, *, title: str, text: str, summary: str = "ragbot sample page") -> dict[str, Any]:
        """Create or edit a page; the API's answer (``pageid``, ``newrevid``, ``title``)."""
        edit: dict[str, Any] = self._call(
            post=True, action="edit", title=title, text=text, summary=summary, bot="1", token=self._csrf
        )["edit"]
        if edit.get("result") != "Success":
            raise WikiWriteError(f"edit {title!r}: {edit}")
        if edit.get("nochange"):  # the same text again: no new revision, so read the current one
            info = self._call(post=False, action="query", pageids=edit["pageid"], prop="info")
            edit["newrevid"] = info["query"]["pages"][0]["lastrevid"]
        return edit


@dataclass(frozen=True)
class LocalMediaWiki:
    """The wiki ``scripts/services.sh`` serves on loopback, and the accounts its install creates."""

    port: int = 8480
    admin_user: str = "Admin"
    admin_password: str = "ragbot-test-admin-password"
    bot_app: str = "ragbot"
    bot_password: str = "ragbottestbotpassword0123456789ab"

    @classmethod
    def from_environ(cls, environ: Mapping[str, str], *, port: int) -> LocalMediaWiki:
        """The accounts from services.sh's own knobs (``MW_ADMIN_USER`` ...), else its defaults."""
        defaults = cls()
        return cls(
            port=port,
            admin_user=environ.get("MW_ADMIN_USER", defaults.admin_user),
            admin_password=environ.get("MW_ADMIN_PASSWORD", defaults.admin_password),
            bot_app=environ.get("MW_BOT_APP", defaults.bot_app),
            bot_password=environ.get("MW_BOT_PASSWORD", defaults.bot_password),
        )

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def api_url(self) -> str:
        return f"{self.base_url}/api.php"

    @property
    def bot_user(self) -> str:
        return f"{self.admin_user}@{self.bot_app}"

    def answers(self) -> bool:
        """Whether a MediaWiki already answers on this port (services.sh then reuses it)."""
        try:
            siteinfo = httpx.get(
                self.api_url, params={"action": "query", "meta": "siteinfo", "format": "json"}
            )
            return "MediaWiki" in str(siteinfo.json().get("query", {}).get("general", {}).get("generator"))
        except (httpx.HTTPError, ValueError):
            return False

    def knobs(self) -> dict[str, str]:
        """scripts/services.sh's environment for this wiki."""
        return {
            "MW_PORT": str(self.port),
            "MW_ADMIN_USER": self.admin_user,
            "MW_ADMIN_PASSWORD": self.admin_password,
            "MW_BOT_APP": self.bot_app,
            "MW_BOT_PASSWORD": self.bot_password,
        }

    def writer(self) -> WikiWriter:
        """A logged-in bot session on this wiki."""
        writer = WikiWriter(api_url=self.api_url, user=self.bot_user, password=self.bot_password)
        writer.login()
        return writer
