"""Start ragbot services as real child processes (the helpers live in ``ragbot.devserver``)."""

from __future__ import annotations

from ragbot.devserver import ServiceProcess, free_port, local_service

__all__ = ["ServiceProcess", "free_port", "local_service"]
