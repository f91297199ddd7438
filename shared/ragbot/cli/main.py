"""The ``ragbot`` command: one parser, one subcommand per job; each module registers its own.

Subcommands: ``index`` (folders of documents, re-embedding what changed), ``reindex`` (bulk
reindex through the ingest service, with a progress bar), ``reembed`` (a new index generation
for a changed definition, built in the background and switched atomically), ``reconcile`` (the
index made to hold exactly the wiki's relevant pages, through the ingest service), ``eval`` (retrieval
quality on BEIR data), ``eval-answers`` (answer quality per mode on the sample pages),
``train-reranker`` (fine-tune a cross-encoder), ``beir-pairs`` (training
pairs from a BEIR split), ``export-onnx`` (the definition's models as ONNX folders, for hosts without
torch), ``tune-queries`` (e5's query side tuned on the wiki's own questions), ``remember-questions``
(the wiki's answered questions as the retriever's question memory), ``chat`` (talk to the
chat service, streaming), ``auth hash-key`` (a new API key and its hash). Errors ragbot raises on
purpose end the command with status 1 and a one-line reason.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from ragbot.errors import RagbotError

logger = logging.getLogger("ragbot.cli.main")


def build_parser() -> argparse.ArgumentParser:
    """The ``ragbot`` parser with every subcommand."""
    from ragbot.cli import auth as cli_auth
    from ragbot.cli import chat as cli_chat
    from ragbot.cli import eval as cli_eval
    from ragbot.cli import eval_answers as cli_eval_answers
    from ragbot.cli import export_onnx as cli_export_onnx
    from ragbot.cli import index as cli_index
    from ragbot.cli import reconcile as cli_reconcile
    from ragbot.cli import reembed as cli_reembed
    from ragbot.cli import reindex as cli_reindex
    from ragbot.cli import remember_questions as cli_remember_questions
    from ragbot.cli import tune_queries as cli_tune_queries

    parser = argparse.ArgumentParser(prog="ragbot", description="ragbot command-line tools")
    parser.add_argument("--log-level", default="INFO", help="logging level (default INFO)")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    cli_eval.register(subparsers)
    cli_eval_answers.register(subparsers)
    cli_index.register(subparsers)
    cli_reindex.register(subparsers)
    cli_reembed.register(subparsers)
    cli_reconcile.register(subparsers)
    cli_chat.register(subparsers)
    cli_auth.register(subparsers)
    cli_export_onnx.register(subparsers)
    cli_tune_queries.register(subparsers)
    cli_remember_questions.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``ragbot`` console script; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=str(args.log_level).upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    try:
        status: int = args.handler(args)
    except RagbotError as exc:
        logger.error("%s failed: %s", args.command, exc)
        return 1
    except KeyboardInterrupt:
        return 130
    return status


if __name__ == "__main__":
    sys.exit(main())
