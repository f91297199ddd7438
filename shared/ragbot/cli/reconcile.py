"""``ragbot reconcile FILE``: make the index hold exactly the wiki's relevant pages, through ingest.

FILE (``-`` for stdin) is the output of ChatbotRagContent's ``maintenance/GetRelevantPageIds.php``
(``--output=json`` or the default one id per line, with or without ``--with-titles``), any plain id
list, or a MediaWiki API answer; ``--wiki-list-url`` has ingest read a listing instead, following
its continuation. The list goes to ``POST /v1/reconcile``; the command prints what changes, then
follows the job like ``ragbot reindex``. Exit status: 0 done (or a dry run), 1 some pages failed,
2 ingest refused the request, 3 the guard refused to remove that much of the index (see
``--force``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import httpx

from ragbot.cli.reindex import _default_url, _detail, _get_job, follow
from ragbot.errors import DependencyUnavailable
from ragbot.settings import get_client_settings

GUARD_REFUSED = 3
_SHOWN = 20


def register(subparsers: Any) -> None:
    """Add ``reconcile`` to the ``ragbot`` parser."""
    parser = subparsers.add_parser(
        "reconcile",
        help="queue missing or older pages and remove unlisted ones, from the wiki's relevant-page list",
        description="Compare the wiki's relevant pages (FILE: GetRelevantPageIds.php output, an id "
        "list or a MediaWiki API answer; '-' reads stdin) with the index through the ingest "
        "service's POST /v1/reconcile: missing pages and pages with a newer listed revision are "
        "queued, indexed pages the list does not name are removed.",
    )
    add = parser.add_argument
    add("file", nargs="?", type=Path, metavar="FILE", help="the page list ('-': stdin)")
    add("--wiki-list-url", help="read this listing instead (MediaWiki allpages, continuation followed)")
    add("--callback-url", help="content API base queued pages are fetched from (as in pings)")
    add("--dry-run", action="store_true", help="print what would change; change nothing")
    add("--force", action="store_true", help="remove past the guard's share of the index")
    add("--ingest-url", help="ingest service URL (default: http://RAGBOT_INGEST_HOST:RAGBOT_INGEST_PORT)")
    add("--no-wait", action="store_true", help="print the job id and return once it is queued")
    add("--no-progress", action="store_true", help="no progress bar")
    add("--poll", type=float, default=0.5, help="seconds between status polls (default 0.5)")
    add("--timeout", type=float, default=0.0, help="give up waiting after this many seconds (0: never)")
    parser.set_defaults(handler=run_reconcile)


def read_listing(raw: bytes) -> Any:
    """The list as JSON when it parses as JSON, else as text (one id per line)."""
    text = raw.decode("utf-8-sig")
    try:
        return json.loads(text)
    except ValueError:
        return text


def run_reconcile(args: argparse.Namespace) -> int:
    """``ragbot reconcile``: send the list, print the plan, follow the job."""
    if (args.file is None) == (args.wiki_list_url is None):
        sys.stderr.write("ragbot reconcile: give either FILE or --wiki-list-url\n")
        return 2
    body: dict[str, Any] = {"dry_run": bool(args.dry_run), "force": bool(args.force)}
    if args.callback_url:
        body["callback_url"] = args.callback_url
    if args.wiki_list_url:
        body["list_url"] = args.wiki_list_url
    else:
        raw = sys.stdin.buffer.read() if str(args.file) == "-" else args.file.read_bytes()
        body["listing"] = read_listing(raw)
    url = (args.ingest_url or _default_url()).rstrip("/")
    headers = get_client_settings().headers()  # RAGBOT_CLIENT_API_KEY: a key with the ingest scope
    with httpx.Client(
        base_url=url, timeout=httpx.Timeout(600.0, connect=10.0), trust_env=False, headers=headers
    ) as client:
        try:
            response = client.post("/v1/reconcile", json=body)
        except httpx.HTTPError as exc:
            raise DependencyUnavailable(f"ingest at {url}: {exc}", dependency="ingest") from None
        if response.status_code == 409:
            sys.stderr.write(f"ragbot reconcile: refused: {_detail(response)}\n")
            return GUARD_REFUSED
        if response.status_code not in (200, 202):
            sys.stderr.write(
                f"ragbot reconcile: ingest answered {response.status_code}: {_detail(response)}\n"
            )
            return 2
        result = response.json()
        _print_plan(result)
        if result.get("job_id") is None or args.no_wait:
            return 0
        job_id = str(result["job_id"])
        # A path when ingest has no RAGBOT_HTTP_PUBLIC_URL: shown against the URL called.
        sys.stdout.write(f"reconcile job {job_id}: {client.base_url.join(result['status_url'])}\n")
        record = follow(
            lambda: _get_job(client, job_id),
            poll_s=args.poll,
            timeout_s=args.timeout,
            show=not args.no_progress,
        )
    progress = record.get("progress", {})
    sys.stdout.write(
        f"{record['state']}: {progress.get('done', 0)} of {progress.get('total', 0)} changes done, "
        f"{progress.get('failed', 0)} failed\n"
    )
    if record.get("error"):
        sys.stdout.write(f"{record['error']}\n")
    return 0 if record["state"] == "done" else 1


def _print_plan(result: dict[str, Any]) -> None:
    verb = "would" if result["dry_run"] else "will"
    sys.stdout.write(
        f"listed {result['listed']}, indexed {result['indexed']}, unchanged {result['unchanged']}\n"
    )
    for name, what in (("missing", "index (missing)"), ("stale", "re-index (older)"), ("remove", "remove")):
        ids = result[name]
        shown = " ".join(str(i) for i in ids[:_SHOWN]) + (" ..." if len(ids) > _SHOWN else "")
        sys.stdout.write(f"{verb} {what}: {len(ids)}{': ' + shown if ids else ''}\n")
    if result.get("guard"):
        sys.stdout.write(f"the guard would refuse this: {result['guard']}\n")
