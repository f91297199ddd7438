"""``ragbot chat``: talk to the chat service from a terminal, answers streamed as they are written.

The session id is remembered per service URL in a small state file (``~/.ragbot/chat_sessions.json``
unless ``--state-file``), so the next ``ragbot chat`` continues the same conversation while its session
lives in Redis; ``--new`` starts another. Type ``exit`` (or press Ctrl-D) to quit.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, TextIO

import httpx

from ragbot.errors import DependencyUnavailable, NotFound, ValidationFailed
from ragbot.settings import get_client_settings

DEFAULT_STATE_FILE = Path.home() / ".ragbot" / "chat_sessions.json"
EXIT_WORDS = frozenset({"exit", "quit", ":q"})


def register(subparsers: Any) -> None:
    """Add ``chat`` to the ``ragbot`` parser."""
    parser = subparsers.add_parser(
        "chat",
        help="chat with the chat service in the terminal (streaming; `exit` quits)",
        description="Ask questions to the chat service; answers stream as they are generated, followed by "
        "their cited sources. The conversation continues across runs until its session expires.",
    )
    parser.add_argument("--url", help="chat service URL (default: http://RAGBOT_CHAT_HOST:RAGBOT_CHAT_PORT)")
    parser.add_argument(
        "--mode", choices=["strict", "grounded", "open", "quote"], help="answer mode (default: the service's)"
    )
    parser.add_argument(
        "--language", choices=["auto", "he", "en"], help="session language (default: the service's)"
    )
    parser.add_argument("--session", help="continue this session id")
    parser.add_argument("--new", action="store_true", help="start a new session instead of continuing")
    parser.add_argument(
        "--state-file", type=Path, default=DEFAULT_STATE_FILE, help="where session ids are kept"
    )
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for an answer")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """The subcommand: open or continue a session, then read questions from stdin until ``exit``."""
    url = args.url or _default_url()
    headers = get_client_settings().headers()  # RAGBOT_CLIENT_API_KEY: a key with the chat scope
    timeout = httpx.Timeout(args.timeout, connect=10.0)
    with httpx.Client(base_url=url, timeout=timeout, headers=headers) as client:
        session_id = open_session(
            client=client,
            url=url,
            state_file=args.state_file,
            session=args.session,
            new=args.new,
            mode=args.mode,
            language=args.language,
            out=sys.stdout,
        )
        return chat_loop(
            client=client, session_id=session_id, mode=args.mode, lines=_stdin_lines(), out=sys.stdout
        )


def _default_url() -> str:
    from ragbot.settings import get_chat_settings

    settings = get_chat_settings()
    return f"http://{settings.host}:{settings.port}"


def _stdin_lines() -> Iterator[str]:
    interactive = sys.stdin.isatty()
    while True:
        try:
            line = input("you> ") if interactive else sys.stdin.readline()
        except EOFError:
            return
        if not interactive and line == "":
            return
        yield line


def _load_state(path: Path) -> dict[str, str]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def _save_state(path: Path, state: dict[str, str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(state, indent=2), encoding="utf-8")


def _check(response: httpx.Response) -> httpx.Response:
    if response.status_code == 404:
        raise NotFound(_detail(response))
    if response.status_code in (400, 422):
        raise ValidationFailed(_detail(response))
    if response.status_code >= 400:
        raise DependencyUnavailable(f"HTTP {response.status_code}: {_detail(response)}", dependency="chat")
    return response


def _detail(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:300]
    detail = body.get("detail", body) if isinstance(body, dict) else body
    if isinstance(detail, list) and detail and isinstance(detail[0], dict):
        return str(detail[0].get("msg", detail[0]))
    return str(detail)


def open_session(
    *,
    client: httpx.Client,
    url: str,
    state_file: Path,
    session: str | None,
    new: bool,
    mode: str | None,
    language: str | None,
    out: TextIO,
) -> str:
    """The session to talk in: the one asked for, the remembered one while it lives, else a new one."""
    state = _load_state(state_file)
    candidate = session or (None if new else state.get(url))
    if candidate:
        try:
            response = client.get(f"/v1/sessions/{candidate}")
        except httpx.HTTPError as exc:
            raise DependencyUnavailable(
                f"the chat service at {url} is unreachable: {exc}", dependency="chat"
            ) from None
        if response.status_code == 200:
            turns = len(response.json().get("turns", []))
            out.write(f"continuing session {candidate} ({turns} earlier turns)\n")
            return candidate
        if session:
            _check(response)
        out.write(f"session {candidate} has expired; starting a new one\n")
    body = {k: v for k, v in {"mode": mode, "language": language}.items() if v}
    try:
        created = _check(client.post("/v1/sessions", json=body)).json()
    except httpx.HTTPError as exc:
        raise DependencyUnavailable(
            f"the chat service at {url} is unreachable: {exc}", dependency="chat"
        ) from None
    state[url] = created["session_id"]
    _save_state(state_file, state)
    out.write(f"new session {created['session_id']} (mode {created['mode']})\n")
    return str(created["session_id"])


def iter_sse(lines: Iterable[str]) -> Iterator[tuple[str, Any]]:
    """(event, data) pairs from SSE lines; comments (pings) are skipped."""
    event, data = "message", list[str]()
    for line in lines:
        if line == "":
            if data:
                raw = "\n".join(data)
                try:
                    yield event, json.loads(raw)
                except ValueError:
                    yield event, raw
            event, data = "message", []
        elif line.startswith(":"):
            continue
        else:
            key, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if key == "event":
                event = value
            elif key == "data":
                data.append(value)


def ask(*, client: httpx.Client, session_id: str, question: str, mode: str | None, out: TextIO) -> bool:
    """Stream one answer to ``out``; True when it completed."""
    body: dict[str, Any] = {"question": question}
    if mode:
        body["mode"] = mode
    completed = False
    with client.stream("POST", f"/v1/sessions/{session_id}/messages", json=body) as response:
        if response.status_code != 200:
            response.read()
            _check(response)
        out.write("bot> ")
        for event, data in iter_sse(response.iter_lines()):
            if event == "token":
                out.write(str(data.get("text", "")))
                out.flush()
            elif event == "done":
                completed = True
                out.write("\n")
                _print_sources(data, out)
            elif event == "error":
                out.write(f"\nerror: {data.get('message')}\n")
    out.flush()
    return completed


def _print_sources(done: dict[str, Any], out: TextIO) -> None:
    cited = done.get("citations") or []
    rest = done.get("retrieved_not_cited") or []
    if cited:
        out.write("Sources:\n")
        for s in cited:
            confidence = f" ({s['confidence_pct']}%)" if s.get("confidence_pct") is not None else ""
            out.write(f"  [{s['index']}] {s['title']}{confidence} {s.get('url') or ''}\n")
    if rest:
        out.write("Also retrieved: " + "; ".join(f"[{s['index']}] {s['title']}" for s in rest) + "\n")


def chat_loop(
    *, client: httpx.Client, session_id: str, mode: str | None, lines: Iterable[str], out: TextIO
) -> int:
    """Ask every line until ``exit``; returns the exit status (0)."""
    for raw in lines:
        question = raw.strip()
        if not question:
            continue
        if question.lower() in EXIT_WORDS:
            break
        try:
            ask(client=client, session_id=session_id, question=question, mode=mode, out=out)
        except ValidationFailed as exc:
            out.write(f"error: {exc}\n")
        except httpx.HTTPError as exc:
            out.write(f"error: the chat service did not answer: {exc}\n")
    out.write("bye\n")
    out.flush()
    return 0
