"""``ragbot reindex FILE.jsonl``: bulk reindex through the ingest service, with a progress bar.

The file (one content-API page per line, ``-`` for stdin) is streamed to ``POST /v1/reindex``;
``--wiki-list-url`` asks ingest to list the wiki instead. The command then follows the reindex job
(``GET /v1/jobs/{id}``) until every page is done or failed, drawing ``progress`` as a bar. Exit
status: 0 when every page is indexed, 1 when some failed (the job's error says which batches; ``POST
/v1/jobs/{id}/retry`` re-queues them), 2 when ingest refused the request.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import httpx

from ragbot.errors import DependencyUnavailable
from ragbot.settings import get_client_settings

FINAL = frozenset({"done", "skipped", "failed"})
_CHUNK = 1024 * 1024


def register(subparsers: Any) -> None:
    """Add ``reindex`` to the ``ragbot`` parser."""
    parser = subparsers.add_parser(
        "reindex",
        help="bulk reindex a JSONL file of pages (or a wiki listing) through the ingest service",
        description="Send every page of FILE (one content-API JSON object per line; '-' reads stdin) to "
        "the ingest service's POST /v1/reindex, then show the reindex job's progress until it ends. "
        "With --wiki-list-url, ingest lists the wiki and the worker fetches each page.",
    )
    add = parser.add_argument
    add("file", nargs="?", type=Path, metavar="FILE.jsonl", help="pages, one JSON object per line")
    add("--ingest-url", help="ingest service URL (default: http://RAGBOT_INGEST_HOST:RAGBOT_INGEST_PORT)")
    add("--wiki-list-url", help="reindex every page this listing names (MediaWiki allpages or ragbot's)")
    add("--callback-url", help="with --wiki-list-url: the content API base pages are fetched from")
    add("--force", action="store_true", help="re-embed pages whose revision is already indexed")
    add("--no-wait", action="store_true", help="print the job id and return once the pages are queued")
    add("--no-progress", action="store_true", help="no progress bar")
    add("--poll", type=float, default=0.5, help="seconds between status polls (default 0.5)")
    add("--timeout", type=float, default=0.0, help="give up waiting after this many seconds (0: never)")
    parser.set_defaults(handler=run_reindex)


def run_reindex(args: argparse.Namespace) -> int:
    """``ragbot reindex``: queue the reindex, then follow it."""
    url = (args.ingest_url or _default_url()).rstrip("/")
    if (args.file is None) == (args.wiki_list_url is None):
        sys.stderr.write("ragbot reindex: give either FILE.jsonl or --wiki-list-url\n")
        return 2
    if args.wiki_list_url and not args.callback_url:
        sys.stderr.write("ragbot reindex: --wiki-list-url needs --callback-url\n")
        return 2
    headers = get_client_settings().headers()  # RAGBOT_CLIENT_API_KEY: a key with the ingest scope
    timeout = httpx.Timeout(600.0, connect=10.0)
    with httpx.Client(base_url=url, timeout=timeout, trust_env=False, headers=headers) as client:
        response = _submit(client, args)
        if response.status_code != 202:
            sys.stderr.write(f"ragbot reindex: ingest answered {response.status_code}: {_detail(response)}\n")
            return 2
        accepted = response.json()
        job_id = str(accepted["job_id"])
        # A path when ingest has no RAGBOT_HTTP_PUBLIC_URL: shown against the URL called.
        sys.stdout.write(f"reindex job {job_id}: {client.base_url.join(accepted['status_url'])}\n")
        if args.no_wait:
            return 0
        record = follow(
            lambda: _get_job(client, job_id),
            poll_s=args.poll,
            timeout_s=args.timeout,
            show=not args.no_progress,
        )
    progress = record.get("progress", {})
    sys.stdout.write(
        f"{record['state']}: {progress.get('done', 0)} of {progress.get('total', 0)} pages done, "
        f"{progress.get('failed', 0)} failed\n"
    )
    if record.get("error"):
        sys.stdout.write(f"{record['error']}\n")
    return 0 if record["state"] == "done" else 1


def follow(
    get: Callable[[], dict[str, Any]],
    *,
    poll_s: float = 0.5,
    timeout_s: float = 0.0,
    show: bool = True,
    out: IO[str] | None = None,
) -> dict[str, Any]:
    """Poll a reindex job until it ends, drawing its progress; returns the last record."""
    from tqdm import tqdm

    deadline = time.monotonic() + timeout_s if timeout_s > 0 else None
    bar = tqdm(total=0, unit="page", disable=not show, file=out or sys.stderr, dynamic_ncols=True)
    try:
        while True:
            record = get()
            progress = record.get("progress", {})
            bar.total = int(progress.get("total", 0))
            finished = int(progress.get("done", 0)) + int(progress.get("failed", 0))
            bar.update(finished - bar.n)
            bar.set_postfix(failed=int(progress.get("failed", 0)), refresh=True)
            if record.get("state") in FINAL:
                return record
            if deadline is not None and time.monotonic() > deadline:
                raise DependencyUnavailable(
                    f"reindex job {record.get('job_id')} still {record.get('state')} after {timeout_s:g} s",
                    dependency="ingest",
                )
            time.sleep(poll_s)
    finally:
        bar.close()


def _submit(client: httpx.Client, args: argparse.Namespace) -> httpx.Response:
    params = {"force": "true"} if args.force else None
    try:
        if args.wiki_list_url:
            body = {
                "source": "wiki",
                "list_url": args.wiki_list_url,
                "callback_url": args.callback_url,
                "force": bool(args.force),
            }
            return client.post("/v1/reindex", json=body)
        headers = {"Content-Type": "application/x-ndjson"}
        if str(args.file) == "-":
            return client.post("/v1/reindex", content=_read(sys.stdin.buffer), headers=headers, params=params)
        with args.file.open("rb") as handle:
            return client.post("/v1/reindex", content=_read(handle), headers=headers, params=params)
    except httpx.HTTPError as exc:
        raise DependencyUnavailable(f"ingest at {client.base_url}: {exc}", dependency="ingest") from None


def _read(handle: IO[bytes]) -> Iterator[bytes]:
    while block := handle.read(_CHUNK):
        yield block


def _get_job(client: httpx.Client, job_id: str) -> dict[str, Any]:
    try:
        response = client.get(f"/v1/jobs/{job_id}")
    except httpx.HTTPError as exc:
        raise DependencyUnavailable(f"ingest at {client.base_url}: {exc}", dependency="ingest") from None
    if response.status_code != 200:
        raise DependencyUnavailable(
            f"ingest answered {response.status_code} for job {job_id}: {_detail(response)}",
            dependency="ingest",
        )
    record: dict[str, Any] = response.json()
    return record


def _detail(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:500]
    detail = body.get("detail", body) if isinstance(body, dict) else body
    if isinstance(detail, list):
        return "; ".join(str(d.get("msg", d)) if isinstance(d, dict) else str(d) for d in detail)
    return str(detail)


def _default_url() -> str:
    from ragbot.settings import get_ingest_settings

    settings = get_ingest_settings()
    return f"http://{settings.host}:{settings.port}"
