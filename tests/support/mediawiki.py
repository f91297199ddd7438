"""Drives the real test MediaWiki (scripts/services.sh) through its Action API and maintenance scripts."""

from __future__ import annotations

import os
import subprocess
import uuid
from dataclasses import dataclass, field
from typing import Any

import httpx

MW_HOME = "/usr/share/mediawiki"


class WikiError(RuntimeError):
    """The wiki answered an Action API call with an error."""


@dataclass
class WikiSession:
    """A logged-in session on the test wiki; pages it creates carry `prefix` and are deleted by `cleanup`."""

    url: str
    user: str
    password: str
    config_file: str
    prefix: str = field(default_factory=lambda: f"Ragbot test {uuid.uuid4().hex[:8]} ")
    _client: httpx.Client = field(init=False, repr=False)
    _csrf: str = field(default="", init=False, repr=False)
    _created: set[str] = field(default_factory=set, init=False, repr=False)

    def __post_init__(self) -> None:
        self._client = httpx.Client(base_url=self.url.rstrip("/"), timeout=60.0)

    @property
    def api_url(self) -> str:
        return f"{self.url.rstrip('/')}/api.php"

    def close(self) -> None:
        self._client.close()

    # --- the Action API -----------------------------------------------------------------------------

    def get(self, **params: Any) -> dict[str, Any]:
        response = self._client.get("/api.php", params={"format": "json", "formatversion": "2", **params})
        return self._checked(response, params)

    def post(self, **params: Any) -> dict[str, Any]:
        response = self._client.post("/api.php", data={"format": "json", "formatversion": "2", **params})
        return self._checked(response, params)

    def _checked(self, response: httpx.Response, params: dict[str, Any]) -> dict[str, Any]:
        response.raise_for_status()
        body: dict[str, Any] = response.json()
        if "error" in body:
            raise WikiError(f"{params.get('action')}: {body['error']}")
        return body

    def login(self) -> None:
        """Log in with action=clientlogin (main-account login through action=login is deprecated)."""
        token = self.get(action="query", meta="tokens", type="login")["query"]["tokens"]["logintoken"]
        result = self.post(
            action="clientlogin",
            username=self.user,
            password=self.password,
            logintoken=token,
            loginreturnurl=self.url,
        )
        if result["clientlogin"]["status"] != "PASS":
            raise WikiError(f"login as {self.user} failed: {result['clientlogin']}")
        self._csrf = self.get(action="query", meta="tokens")["query"]["tokens"]["csrftoken"]

    def title(self, name: str) -> str:
        """A title unique to this session, so tests never meet each other's pages."""
        return f"{self.prefix}{name}"

    def edit(self, title: str, text: str, summary: str = "ragbot test") -> dict[str, Any]:
        """Create or edit a page; returns the API's edit result (pageid, newrevid, title)."""
        result = self.post(action="edit", title=title, text=text, summary=summary, token=self._csrf, bot="1")
        edit: dict[str, Any] = result["edit"]
        if edit.get("result") != "Success":
            raise WikiError(f"edit {title!r}: {edit}")
        self._created.add(edit["title"])
        return edit

    def move(self, old: str, new: str, *, redirect: bool = True) -> dict[str, Any]:
        params: dict[str, Any] = {"action": "move", "from": old, "to": new, "token": self._csrf}
        if not redirect:
            params["noredirect"] = "1"
        moved: dict[str, Any] = self.post(**params)["move"]
        self._created.add(moved["to"])
        return moved

    def delete(self, title: str) -> dict[str, Any]:
        deleted: dict[str, Any] = self.post(action="delete", title=title, token=self._csrf)["delete"]
        return deleted

    def undelete(self, title: str) -> dict[str, Any]:
        restored: dict[str, Any] = self.post(action="undelete", title=title, token=self._csrf, reason="test")[
            "undelete"
        ]
        return restored

    def page(self, title: str) -> dict[str, Any]:
        """The page's current id and revision (`missing` set when it does not exist)."""
        pages = self.get(action="query", titles=title, prop="revisions", rvprop="ids")["query"]["pages"]
        found: dict[str, Any] = pages[0]
        return found

    # --- maintenance --------------------------------------------------------------------------------

    def run_jobs(self) -> str:
        """Run the job queue to empty (the wiki runs no jobs on requests: $wgJobRunRate = 0)."""
        completed = subprocess.run(
            ["php", f"{MW_HOME}/maintenance/runJobs.php", "--maxtime", "60"],
            env={**os.environ, "MW_CONFIG_FILE": self.config_file},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if completed.returncode != 0:
            raise WikiError(f"runJobs.php exited {completed.returncode}: {completed.stderr[-2000:]}")
        return completed.stdout

    def cleanup(self) -> None:
        """Delete every page this session created that still exists (best effort, never raises)."""
        for title in sorted(self._created):
            try:
                if not self.page(title).get("missing"):
                    self.delete(title)
            except (WikiError, httpx.HTTPError):
                continue
        self._created.clear()
