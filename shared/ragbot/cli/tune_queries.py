"""The ``ragbot tune-queries`` subcommand: e5's query side tuned on the wiki's question files, to a file.

``ragbot.cli.main`` owns the parser; ``register`` adds the subcommand. The retriever reads the file
it writes when ``RAGBOT_RETRIEVER_QUERY_TUNING_PATH`` names it (``ragbot.retrieval.tuned``).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any


def register(subparsers: Any) -> None:
    """Add tune-queries to the ``ragbot`` parser."""
    from ragbot.evaluation.answers import DEFAULT_PAGES

    tq = subparsers.add_parser(
        "tune-queries",
        help="tune multilingual-e5-small's query side on the wiki's own questions",
        description="Index the pages as make run does, then fit multilingual-e5-small's bias terms on "
        "every answerable question of the files (question -> the paragraphs of its gold pages) and write "
        "them to --out, for RAGBOT_RETRIEVER_QUERY_TUNING_PATH. Latin-script questions then search e5's "
        "vectors with them. Tune on questions you will not measure on (docs/benchmarks.md).",
    )
    tq.add_argument(
        "--questions", type=Path, nargs="+", required=True, help="question files (eval-answers' shape)"
    )
    tq.add_argument(
        "--pages", type=Path, nargs="+", default=list(DEFAULT_PAGES), help="pages to index (JSONL files)"
    )
    tq.add_argument("--out", type=Path, required=True, help="the .npz file to write")
    tq.add_argument("--epochs", type=int, default=3, help="passes over the questions (default 3)")
    tq.set_defaults(handler=run_tune_queries)


def run_tune_queries(args: argparse.Namespace) -> int:
    """``ragbot tune-queries``: fit, write the file, say what it was fitted on."""
    from ragbot.embedders.query_tuning import TuningOptions, save_biases
    from ragbot.errors import ValidationFailed
    from ragbot.evaluation.query_tuning import tune
    from ragbot.settings import get_chat_settings

    if args.epochs < 1:
        raise ValidationFailed("--epochs must be 1 or more", field="epochs")
    for path in [*args.questions, *args.pages]:
        if not path.is_file():
            raise ValidationFailed(f"{path} is not a file", field="questions")
    biases, about = asyncio.run(
        tune(
            args.questions,
            args.pages,
            text_field=get_chat_settings().document_text_field,
            options=TuningOptions(epochs=args.epochs),
        )
    )
    save_biases(args.out, biases, about)
    sys.stdout.write(
        f"tuned on {about['pairs']} questions over {about['paragraphs']} paragraphs in {about['seconds']} s; "
        f"wrote {args.out}\n"
    )
    return 0
