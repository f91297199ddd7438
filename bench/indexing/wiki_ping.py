"""The wiki bench's ping part (issue 26): a bench-only MediaWiki running Kol-Zchut's real
ChatbotRagContent, followed by its pings alone; ``bench/indexing/wiki.py`` runs it.

The ping path (``ping_*`` keys) runs when local checkouts of Kol-Zchut's ChatbotRagContent and the two
extensions it needs are given (``--chatbotragcontent DIR --articletype DIR --articlecontentarea DIR``):
``bench/indexing/kolzchut_wiki.py`` loads them into a bench-only wiki of its own (its own port, run dir
and ``RAGBOT_SERVICES_OWNER``) whose ``$wgChatbotRagContentPingURL`` is the bench's ingest, with a job
runner beside it. Ingest, the worker (no beat: nothing polls) and the retriever then follow that wiki by
its pings alone (``tests/support/wiki_stack.py`` ``ping_stack``). ``SEED_PAGES`` pages are indexed first
(so that one delete stays under reconcile's guard share), then ``--ping-pages`` pages are each created,
edited, moved and deleted one at a time, timed as above:

- ``ping_edit_to_retrievable_p50_s`` / ``_p95_s``: edit → job → ping → fetch from the content route →
  retrievable; target p95 ≤ 5 s;
- ``ping_move_to_renamed_p50_s`` / ``_p95_s``: the extension pings the moved page's id;
- ``ping_delete_to_gone_p50_s`` / ``_p95_s``: the extension's delete ping names no page (``page_id: 0``);
  ingest reconciles against the wiki's page list ``--delete-window`` seconds after it; target ≤ that
  window + 5 s.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from support.mediawiki import WikiSession  # noqa: E402
from support.wiki_stack import WikiStack, ping_stack  # noqa: E402

from bench.indexing.kolzchut_wiki import (  # noqa: E402
    JOB_RUNNER_DESCRIPTION,
    ExtensionDirs,
    extension_wiki,
    page_list_url,
)
from bench.indexing.wiki_follow import (  # noqa: E402
    DEFINITION,
    FOLLOW_TIMEOUT_S,
    cpu_name,
    latencies,
    load_average,
    page_texts,
    redis_url,
    spread,
    timed,
    word,
)
from ragbot.dev.servers import free_port  # noqa: E402

PING_TARGET_S = 5.0
# Indexed before the timed pages: a delete then removes 1 of at least 8 pages, under reconcile's guard
# (RAGBOT_INGEST_RECONCILE_MAX_REMOVE_SHARE, 0.2), as one delete among a real wiki's pages would.
SEED_PAGES = 6


def seed(stack: WikiStack, wiki: WikiSession, *, count: int) -> None:
    """Create ``count`` pages and wait until each is retrievable (untimed)."""
    texts = page_texts()
    for n in range(count):
        marker = word()
        wiki.edit(wiki.title(f"בסיס {n}"), f"{marker}\n{texts[n % len(texts)]}")
        stack.wait_for(partial(stack.holding, marker), timeout_s=FOLLOW_TIMEOUT_S, what=f"seed page {n}")


def restore_and_move_out(stack: WikiStack, wiki: WikiSession, *, n: int, body: str) -> tuple[float, float]:
    """A page deleted (untimed until gone), then restored and timed until retrievable again (the
    extension pings the restored page with its old revision), then moved out of the indexed namespace
    and timed until gone (the extension pings its id; the content route answers 404 "irrelevant title")."""
    marker = word()
    title = wiki.title(f"שחזור {n}")
    wiki.edit(title, f"{marker}\n{body}")
    stack.wait_for(partial(stack.holding, marker), timeout_s=FOLLOW_TIMEOUT_S, what=f"page {title} created")
    wiki.delete(title)
    stack.wait_for(lambda: stack.holding(marker) == [], timeout_s=FOLLOW_TIMEOUT_S, what=f"{title} gone")
    wiki.undelete(title)
    restore = timed(stack, partial(stack.holding, marker), what=f"{title} restored")
    wiki.move(title, f"שיחה:{title}", redirect=False)
    move_out = timed(stack, lambda: stack.holding(marker) == [], what=f"{title} moved out of namespace 0")
    print(f"restore {n}: restored {restore:.2f} s, moved out {move_out:.2f} s", flush=True)
    return restore, move_out


def errors_logged(folder: Path) -> int:
    """ERROR (or worse) lines in the services' JSON logs and failed jobs in the wiki's job runner logs."""
    count = 0
    for path in [*folder.glob("*.log"), *folder.glob("wiki/run/mediawiki-*/jobs-*.log")]:
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            if '"level": "ERROR"' in line or '"level": "CRITICAL"' in line or " error=" in line:
                count += 1
    return count


@contextmanager
def work_folder(keep: Path | None) -> Iterator[str]:
    """``keep`` (created, left in place for the logs) or a temporary folder removed afterwards."""
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        yield str(keep)
        return
    with tempfile.TemporaryDirectory(prefix="ragbot-bench-wiki-ping-") as tmp:
        yield tmp


def measure_ping(
    *,
    dirs: ExtensionDirs,
    pages: int,
    delete_window_s: float,
    restores_count: int = 3,
    keep: Path | None = None,
) -> dict[str, Any]:
    """The ping part: a bench-only wiki running the real ChatbotRagContent, followed by its pings alone."""
    started = time.monotonic()
    load_before = load_average()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with (
        work_folder(keep) as tmp,
        ping_stack(
            redis_url=redis_url(),
            list_url=page_list_url(url),
            tmp=Path(tmp),
            definition=DEFINITION,
            delete_window_s=delete_window_s,
            extra_env={"RAGBOT_RATE_LIMIT_ENABLED": "false"},
        ) as stack,
        extension_wiki(
            dirs=dirs,
            folder=Path(tmp) / "wiki",
            port=port,
            ping_url=str(stack.ingest.base_url.join("/v1/pages/changed")),
            namespaces=[0],
        ) as extension,
    ):
        wiki = WikiSession(
            url=extension.url,
            user=os.environ.get("MW_ADMIN_USER", "Admin"),
            password=os.environ.get("MW_ADMIN_PASSWORD", "ragbot-test-admin-password"),
            config_file=str(extension.config_file),
            prefix=f"Ragbot bench {uuid.uuid4().hex[:8]} ",
        )
        wiki.login()
        try:
            seed(stack, wiki, count=SEED_PAGES)
            figures = latencies(stack, wiki, pages=pages)
            texts = page_texts()
            restores: list[float] = []
            moves_out: list[float] = []
            for n in range(restores_count):
                restore, move_out = restore_and_move_out(stack, wiki, n=n, body=texts[n % len(texts)])
                restores.append(restore)
                moves_out.append(move_out)
            figures |= {
                **spread("restore_to_retrievable", restores),
                **spread("move_out_to_gone", moves_out),
                "restores": restores_count,
            }
            stack.assert_alive()
            dead = stack.dead_letters()
        finally:
            wiki.close()
        errors = errors_logged(Path(tmp))
    return {
        "ping_path": "ChatbotRagContent's ragUpdate job pings POST /v1/pages/changed; "
        "its delete ping (page_id 0) reconciles against the wiki's allpages list after the window",
        "ping_wiki": "a bench-only MediaWiki 1.39 (Debian), SQLite, PHP built-in server, no polling",
        "ping_job_runner": JOB_RUNNER_DESCRIPTION,
        "ping_extensions": extension.extensions,
        "ping_compat": extension.compat,
        "ping_target_s": PING_TARGET_S,
        "ping_delete_window_s": delete_window_s,
        "ping_delete_target_s": delete_window_s + 5.0,
        "ping_seed_pages": SEED_PAGES,
        **{f"ping_{key}": value for key, value in figures.items()},
        "ping_dead_letters": len(dead),
        "ping_errors_logged": errors,
        "ping_wall_s": round(time.monotonic() - started, 1),
        "ping_measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "ping_load_average_before": load_before,
        "ping_load_average_after": load_average(),
        "cpu": cpu_name(),
        "cpus": os.cpu_count(),
    }
