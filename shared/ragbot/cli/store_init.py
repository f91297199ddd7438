"""Prepare the configured store before anything writes: ``python -m ragbot.cli.store_init``.

Elasticsearch: installs the ``<prefix>_*`` index template generated from the document definition
and the models' real dimensions. Embedded: creates the SQLite file and its tables. Dimensions come
from the models (loaded once, then freed) unless every model is given as ``--dimension NAME=SIZE``.
``--print`` writes the Elasticsearch template as JSON to stdout and touches no store.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from collections.abc import Mapping, Sequence

from ragbot.definition import DocumentDefinition, load_definition
from ragbot.errors import RagbotError
from ragbot.settings import ModelSettings, StoreSettings, get_model_settings, get_store_settings
from ragbot.stores import build_store
from ragbot.stores.mapping import index_template

logger = logging.getLogger("ragbot.cli.store_init")


def model_dimensions(
    *, definition: DocumentDefinition, model_settings: ModelSettings, given: Mapping[str, int]
) -> dict[str, int]:
    """Vector-field name -> size: from ``given`` per model, else read from the loaded model."""
    sizes = {m: int(given[m]) for m in definition.model_names if m in given}
    missing = [m for m in definition.model_names if m not in sizes]
    if missing:
        from ragbot.embedders import build_embedders

        embedders = build_embedders(settings=model_settings, definition=definition)
        for name in missing:
            embedder = embedders[name]
            embedder.warm_up()
            sizes[name] = embedder.dimension
            embedder.close()
    return {v.name: sizes[v.model] for v in definition.vector_fields}


async def init_store(
    *, store_settings: StoreSettings, definition: DocumentDefinition, dimensions: Mapping[str, int]
) -> None:
    """Create the template or tables (idempotent), then let go of the store."""
    store = build_store(settings=store_settings, definition=definition, dimensions=dimensions)
    try:
        await store.ensure_ready()
    finally:
        await store.close()


def _parse_dimension(text: str) -> tuple[str, int]:
    name, sep, size = text.rpartition("=")
    if not sep or not name or not size.isdigit() or int(size) < 1:
        raise argparse.ArgumentTypeError(f"expected MODEL=SIZE, got {text!r}")
    return name, int(size)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; exit status 0 on success, 1 with a one-line reason otherwise."""
    parser = argparse.ArgumentParser(
        prog="python -m ragbot.cli.store_init", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--dimension",
        action="append",
        type=_parse_dimension,
        default=[],
        metavar="MODEL=SIZE",
        help="a model's vector size (skips loading it); repeat per model",
    )
    parser.add_argument(
        "--print", action="store_true", help="print the Elasticsearch index template and exit"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    store_settings = get_store_settings()
    model_settings = get_model_settings()
    try:
        definition = load_definition(model_settings.document_definition)
        dimensions = model_dimensions(
            definition=definition, model_settings=model_settings, given=dict(args.dimension)
        )
        if args.print:
            body = index_template(settings=store_settings, definition=definition, dimensions=dimensions)
            sys.stdout.write(json.dumps(body, indent=2, ensure_ascii=False) + "\n")
            return 0
        asyncio.run(init_store(store_settings=store_settings, definition=definition, dimensions=dimensions))
    except RagbotError as exc:
        logger.error("store initialisation failed: %s", exc)
        return 1
    where = (
        f"index template for {store_settings.es_index_prefix}_* at {store_settings.es_url}"
        if store_settings.backend == "elasticsearch"
        else f"embedded store at {store_settings.embedded_path}"
    )
    logger.info("ready: %s (dimensions %s)", where, dimensions)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
