"""What the wiki benches share: the sample pages as wikitext, a word only one page holds, and an edit,
a move and a delete of one page timed until the retriever serves what the MediaWiki now reads
(``bench/indexing/wiki.py`` by polling, ``bench/indexing/wiki_ping.py`` by Kol-Zchut's pings)."""

from __future__ import annotations

import os
import platform
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from support.mediawiki import WikiSession  # noqa: E402
from support.wiki_stack import WikiStack  # noqa: E402

from ragbot.dev.mediawiki import sample_wikitext  # noqa: E402
from ragbot.dev.servers import load_pages  # noqa: E402

SAMPLES = ROOT / "samples" / "kolzchut" / "pages.jsonl"
DEFINITION = {
    "identifier_field": "page_id",
    "saved_fields": {"title": "text", "page_id": "integer", "url": "keyword", "content": "text"},
    "field_for_llm": "content",
    "models": {"multilingual-e5-small": "content"},
}
FOLLOW_TIMEOUT_S = 120.0
PROBE_EVERY_S = 0.05
PAGE_TEXT_CHARS = 1500  # the head of a sample page: a storm of 100 stays a few minutes on two cores


def word() -> str:
    """A word no other page holds, so a lexical search for it finds exactly the page that has it."""
    return "mark" + uuid.uuid4().hex[:12]


def percentile(values: list[float], share: float) -> float | None:
    """The nearest-rank percentile, rounded to 10 ms; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, max(0, round(share * len(ordered)) - 1))], 2)


def spread(name: str, values: list[float]) -> dict[str, Any]:
    return {f"{name}_p50_s": percentile(values, 0.5), f"{name}_p95_s": percentile(values, 0.95)}


def cpu_name() -> str:
    """The CPU's model name (Linux), else what platform says."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def page_texts() -> list[str]:
    """The sample pages' heads as wikitext (cut at a line end)."""
    texts = []
    for page in load_pages(SAMPLES):
        text = sample_wikitext(page)
        texts.append(
            text[: text.rfind("\n", 0, PAGE_TEXT_CHARS) + 1] if len(text) > PAGE_TEXT_CHARS else text
        )
    return texts


def timed(stack: WikiStack, check: Callable[[], object], *, what: str) -> float:
    """Seconds until ``check`` holds, probed every PROBE_EVERY_S (the clock starts before the call)."""
    start = time.monotonic()
    stack.wait_for(check, timeout_s=FOLLOW_TIMEOUT_S, what=what, every_s=PROBE_EVERY_S)
    return time.monotonic() - start


def follow_one(stack: WikiStack, wiki: WikiSession, *, n: int, body: str) -> tuple[float, float, float]:
    """Create a page (untimed), then time its edit, its move and its delete: (edit, move, delete) s."""
    first, second = word(), word()
    title = wiki.title(f"זמן {n}")
    wiki.edit(title, f"{first}\n{body}")
    stack.wait_for(lambda: stack.holding(first), timeout_s=FOLLOW_TIMEOUT_S, what=f"page {title} created")
    wiki.edit(title, f"{second}\n{body}")
    edit = timed(stack, lambda: stack.holding(second), what=f"the edit of {title}")
    moved_to = wiki.move(title, wiki.title(f"זמן הועבר {n}"))["to"]
    move = timed(
        stack,
        lambda: any(d["title"] == moved_to for d in stack.holding(second)),
        what=f"{title} under its new title",
    )
    wiki.delete(moved_to)
    delete = timed(stack, lambda: stack.holding(second) == [], what=f"{moved_to} gone")
    print(f"page {n}: edit {edit:.2f} s, move {move:.2f} s, delete {delete:.2f} s", flush=True)
    return edit, move, delete


def latencies(stack: WikiStack, wiki: WikiSession, *, pages: int) -> dict[str, Any]:
    """``pages`` pages followed one at a time, so each latency is measured alone."""
    texts = page_texts()
    edits: list[float] = []
    moves: list[float] = []
    deletes: list[float] = []
    for n in range(pages):
        edit, move, delete = follow_one(stack, wiki, n=n, body=texts[n % len(texts)])
        edits.append(edit)
        moves.append(move)
        deletes.append(delete)
    return {
        "pages": pages,
        **spread("edit_to_retrievable", edits),
        **spread("move_to_renamed", moves),
        **spread("delete_to_gone", deletes),
        "edit_to_retrievable_max_s": round(max(edits), 2),
        "move_to_renamed_max_s": round(max(moves), 2),
        "delete_to_gone_max_s": round(max(deletes), 2),
    }


def load_average() -> list[float]:
    """The 1, 5 and 15 minute load averages (the machine is shared: figures are read beside them)."""
    return [round(v, 2) for v in os.getloadavg()]


def redis_url() -> str:
    return os.environ.get("RAGBOT_TEST_REDIS_URL", "redis://127.0.0.1:6390/0")
