"""``python -m ragbot_retriever``: serve the retriever (``ragbot.http.server``) on its host and port."""

from __future__ import annotations

from ragbot.http.server import serve
from ragbot.observability.logging import configure_logging
from ragbot.observability.tracing import configure_tracing
from ragbot.settings import (
    get_http_settings,
    get_observability_settings,
    get_retriever_settings,
    get_tracing_settings,
)
from ragbot_retriever.app import SERVICE, create_app


def main() -> None:
    """Configure logging (and tracing when OTEL_* say so), build the app and serve it until interrupted."""
    observability = get_observability_settings()
    configure_logging(service=SERVICE, level=observability.log_level, json_lines=observability.log_json)
    configure_tracing(service=SERVICE, settings=get_tracing_settings())
    settings = get_retriever_settings()
    serve(create_app(), host=settings.host, port=settings.port, settings=get_http_settings())


if __name__ == "__main__":
    main()
