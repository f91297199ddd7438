"""``ragbot auth hash-key``: a new random API key and the SHA-256 that ``RAGBOT_AUTH_KEYS`` stores;
``ragbot auth end-sessions``: end the web UI's signed-in sessions of a key (or all) in Redis, at once."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ragbot.http.auth import new_key, sha256_hex
from ragbot.http.auth.revocation import end_all_sessions, end_key_sessions
from ragbot.messaging.redis import build_sync_redis
from ragbot.settings import get_redis_settings


def register(subparsers: Any) -> None:
    """Add ``auth`` (with ``hash-key``) to the ``ragbot`` parser."""
    parser = subparsers.add_parser("auth", help="API keys for the HTTP services")
    commands = parser.add_subparsers(dest="auth_command", required=True, metavar="SUBCOMMAND")
    hash_key = commands.add_parser(
        "hash-key",
        help="print a new random key and its SHA-256 (or hash a key read from stdin with --stdin)",
        description="Prints the key (give it to the caller, once) and a RAGBOT_AUTH_KEYS entry with its "
        "hash (give that to the services). With --stdin, hashes the key on standard input instead.",
    )
    hash_key.add_argument("--name", default="my-key", help="the key's name in the entry (default my-key)")
    hash_key.add_argument(
        "--scope",
        action="append",
        choices=["ingest", "admin", "chat", "retrieve", "metrics"],
        help="a scope of the key (repeat; default chat)",
    )
    hash_key.add_argument("--stdin", action="store_true", help="hash the key read from stdin")
    hash_key.set_defaults(handler=run_hash_key)
    end = commands.add_parser(
        "end-sessions",
        help="end the web UI sessions signed in with a key (--name) or every one (--all), at once",
        description="Deletes the sessions from Redis (RAGBOT_REDIS_URL, RAGBOT_REDIS_KEY_PREFIX): their "
        "cookies open nothing from the next request on. Do it when a key is removed or leaked.",
    )
    who = end.add_mutually_exclusive_group(required=True)
    who.add_argument("--name", help="the key's name (as in RAGBOT_AUTH_KEYS)")
    who.add_argument("--all", action="store_true", help="every signed-in session")
    end.set_defaults(handler=run_end_sessions)


def run_hash_key(args: argparse.Namespace) -> int:
    """Print ``key: ...`` (unless it came from stdin) and the settings entry."""
    if args.stdin:
        key, digest = "", sha256_hex(sys.stdin.readline().strip())
    else:
        key, digest = new_key()
    entry = {"name": args.name, "scopes": args.scope or ["chat"], "sha256": digest}
    if key:
        sys.stdout.write(f"key: {key}\n")
    sys.stdout.write(f"entry: {json.dumps(entry)}\n")
    return 0


def run_end_sessions(args: argparse.Namespace) -> int:
    """End the sessions and say how many were live."""
    settings = get_redis_settings()
    client = build_sync_redis(url=settings.url, timeout_s=settings.socket_timeout_s)
    try:
        if args.all:
            ended = end_all_sessions(client, prefix=settings.key_prefix)
        else:
            ended = end_key_sessions(client, prefix=settings.key_prefix, name=args.name)
    finally:
        client.close()
    whose = "every key" if args.all else f"the key {args.name!r}"
    sys.stdout.write(f"ended {ended} signed-in session(s) of {whose}\n")
    return 0
