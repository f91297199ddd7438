"""``ragbot auth hash-key``: a new random API key and the SHA-256 that ``RAGBOT_AUTH_KEYS`` stores."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ragbot.http.auth import new_key, sha256_hex


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
