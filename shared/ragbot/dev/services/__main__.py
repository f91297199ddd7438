"""``python -m ragbot.dev.services <command>``."""

from ragbot.dev.services.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
