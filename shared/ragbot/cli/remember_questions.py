"""The ``ragbot remember-questions`` subcommand: the wiki's answered (and unanswered) questions, embedded.

``ragbot.cli.main`` owns the parser; ``register`` adds the subcommand. The retriever reads the file
it writes when ``RAGBOT_RETRIEVER_QUESTION_MEMORY_PATH`` names it (``ragbot.retrieval.memory``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def register(subparsers: Any) -> None:
    """Add remember-questions to the ``ragbot`` parser."""
    from ragbot.retrieval.memory import DEFAULT_NEIGHBOURS, DEFAULT_TEMPERATURE

    rq = subparsers.add_parser(
        "remember-questions",
        help="embed the wiki's answered questions, each with its pages, for the retriever's question memory",
        description="Embed every answerable question of the files (eval-answers' shape) with the "
        "retriever's embedder of --model and write them, with their gold pages, to --out for "
        "RAGBOT_RETRIEVER_QUESTION_MEMORY_PATH. A new question's nearest remembered ones then vote for "
        "their pages among the retrieved ones. Unanswerable questions (no gold page) are remembered as "
        "questions the wiki did not answer: the nearest one's cosine is evidence for the chat's "
        "abstention rule. Measure on questions you did not remember (docs/benchmarks.md).",
    )
    rq.add_argument(
        "--questions", type=Path, nargs="+", required=True, help="question files (eval-answers' shape)"
    )
    rq.add_argument("--out", type=Path, required=True, help="the .npz file to write")
    rq.add_argument(
        "--model", default="multilingual-e5-small", help="the definition's model that embeds the questions"
    )
    rq.add_argument(
        "--neighbours",
        type=int,
        default=DEFAULT_NEIGHBOURS,
        help="remembered questions that vote (default 10)",
    )
    rq.add_argument(
        "--temperature",
        type=float,
        default=DEFAULT_TEMPERATURE,
        help="a vote weighs exp((cosine - best cosine) / temperature) (default 0.02)",
    )
    rq.add_argument(
        "--answered-only",
        action="store_true",
        help="leave the unanswerable questions out (a memory without them: the chat's rules that weigh "
        "memory_unanswered then do not apply)",
    )
    rq.set_defaults(handler=run_remember_questions)


def run_remember_questions(args: argparse.Namespace) -> int:
    """``ragbot remember-questions``: embed, write the file, say what it holds."""
    from ragbot.definition import load_definition
    from ragbot.embedders import build_embedders
    from ragbot.errors import ValidationFailed
    from ragbot.evaluation.question_memory import answered, build_memory, unanswered
    from ragbot.settings import get_model_settings

    for path in args.questions:
        if not path.is_file():
            raise ValidationFailed(f"{path} is not a file", field="questions")
    if args.neighbours < 1:
        raise ValidationFailed("--neighbours must be 1 or more", field="neighbours")
    if not args.temperature > 0:
        raise ValidationFailed("--temperature must be above 0", field="temperature")
    settings = get_model_settings()
    definition = load_definition(settings.document_definition)
    if args.model not in definition.model_names:
        raise ValidationFailed(
            f"unknown model {args.model!r}; the definition's models: {sorted(definition.model_names)}",
            field="model",
        )
    # the retriever's embedder of the model, one question at a time as it embeds them
    embedder = build_embedders(settings=settings, definition=definition, batched=False)[args.model]
    embedder.warm_up()
    memory = build_memory(
        answered(args.questions),
        model=args.model,
        embedder=embedder,
        neighbours=args.neighbours,
        temperature=args.temperature,
        about={"files": [p.name for p in args.questions]},
        not_answered=[] if args.answered_only else unanswered(args.questions),
    )
    memory.save(args.out)
    sys.stdout.write(
        f"remembered {len(memory)} questions over {memory.about['pages']} pages and "
        f"{len(memory.unanswered)} the wiki did not answer in "
        f"{memory.about['seconds']} s; wrote {args.out}\n"
    )
    return 0
