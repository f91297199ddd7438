"""Write the OpenAPI documents of the three HTTP services to docs/openapi/ (``make openapi``), or check them.

    uv run python scripts/openapi.py                    # write docs/openapi/{ingest,retriever,chat}.json
    uv run python scripts/openapi.py --service chat     # just one
    uv run python scripts/openapi.py --check            # exit 1 naming each file that differs

Each document is the one the service serves at ``/openapi.json`` (its app built, not started), so
``tests/unit/test_openapi.py`` fails when a route changes and the committed file was not regenerated.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT_DIR = ROOT / "docs" / "openapi"
SERVICES: dict[str, str] = {
    "ingest": "ragbot_ingest.app",
    "retriever": "ragbot_retriever.app",
    "chat": "ragbot_chat.app",
}
COMMAND = "make openapi (or: uv run python scripts/openapi.py)"


def document(service: str) -> dict[str, Any]:
    """The OpenAPI document ``service`` serves."""
    app = importlib.import_module(SERVICES[service]).create_app()
    spec: dict[str, Any] = app.openapi()
    return spec


def render(spec: dict[str, Any]) -> str:
    """The committed form: two-space JSON, Hebrew kept readable, one trailing newline."""
    return json.dumps(spec, indent=2, ensure_ascii=False) + "\n"


def path_of(service: str) -> Path:
    """Where ``service``'s document is committed."""
    return OUT_DIR / f"{service}.json"


def main(argv: list[str] | None = None) -> int:
    """Write (or with --check, compare) the documents; 1 when a checked one differs."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--service", action="append", choices=sorted(SERVICES), help="default: all three")
    parser.add_argument("--check", action="store_true", help="compare, write nothing")
    args = parser.parse_args(argv)
    stale: list[str] = []
    for service in args.service or list(SERVICES):
        text, path = render(document(service)), path_of(service)
        if args.check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(str(path.relative_to(ROOT)))
            continue
        OUT_DIR.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        sys.stdout.write(f"wrote {path.relative_to(ROOT)}\n")
    if stale:
        sys.stderr.write(f"out of date: {', '.join(stale)}; regenerate with {COMMAND}\n")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
