#!/usr/bin/env bash
# The local services now live in shared/ragbot/dev/services (`python -m ragbot.dev.services --help`).
root=$(cd "$(dirname "$0")/.." && pwd)
[[ -x $root/.venv/bin/python ]] && exec "$root/.venv/bin/python" -m ragbot.dev.services "$@"
PYTHONPATH="$root/shared${PYTHONPATH:+:$PYTHONPATH}" exec python3 -m ragbot.dev.services "$@"
