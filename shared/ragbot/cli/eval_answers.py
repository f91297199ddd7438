"""The ``ragbot eval-answers`` subcommand: answer quality per mode on the sample pages' questions.

``ragbot.cli.main`` owns the parser; ``register`` adds the subcommand. Settings come from the usual
factories (``RAGBOT_*``, ``.env``); the flags choose the modes, the questions and the answer token cap.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any, cast, get_args

from ragbot.chat.schemas import Mode

MODES: tuple[str, ...] = get_args(Mode)


def register(subparsers: Any) -> None:
    """Add eval-answers to the ``ragbot`` parser."""
    from ragbot.evaluation.answers import (
        DEFAULT_PAGES,
        DEFAULT_QUESTIONS,
        ORDER_THRESHOLD,
        SUPPORT_THRESHOLD,
    )
    from ragbot.evaluation.paraphrases import DEFAULT_OVERLAP

    ea = subparsers.add_parser(
        "eval-answers",
        help="answer the sample pages' questions in each mode and score the answers",
        description="Index the sample pages into a fresh embedded store (or use a running retriever), "
        "answer every question of the question file in each mode through the chat pipeline, and print "
        "per mode: gold_cited (answers citing the gold page), supported_sentences (answer sentences "
        f"with >= {SUPPORT_THRESHOLD:.0%} of their words and {ORDER_THRESHOLD:.0%} of their word pairs, "
        "in order, in one cited paragraph), loop_rate, abstained, "
        "and off_topic (the share of questions the pages do not answer that the mode abstained on).",
    )
    ea.add_argument("--questions", type=Path, default=DEFAULT_QUESTIONS, help="question file (JSON)")
    ea.add_argument(
        "--pages", type=Path, nargs="+", default=list(DEFAULT_PAGES), help="pages to index (JSONL files)"
    )
    ea.add_argument(
        "--half",
        choices=["held_out", "tune", "all"],
        default="held_out",
        help="which half of the question file (ragbot.evaluation.split); figures are reported on held_out, "
        "the abstention rule was fitted on tune (default: held_out)",
    )
    ea.add_argument(
        "--before",
        action="store_true",
        help="also answer as before the abstention rule and the boilerplate filter (rows <mode>_before)",
    )
    ea.add_argument(
        "--modes", nargs="+", default=["quote", "grounded"], choices=MODES, help="default: quote grounded"
    )
    ea.add_argument("--retriever-url", help="use this running retriever instead of indexing --pages")
    ea.add_argument("--max-tokens", type=int, help="answer token cap (default: RAGBOT_CHAT_LLM_MAX_TOKENS)")
    ea.add_argument("--language", choices=["he", "en"], help="only the questions in this language")
    ea.add_argument("--output", type=Path, help="write the whole report (every answer) as JSON here")
    ea.add_argument(
        "--unlike",
        type=Path,
        nargs="+",
        default=[],
        help="question files already read: leave out every question that near-paraphrases one of theirs "
        "(ragbot.evaluation.paraphrases)",
    )
    ea.add_argument(
        "--unlike-overlap",
        type=float,
        default=DEFAULT_OVERLAP,
        help=f"the word overlap (Jaccard) that counts as a near-paraphrase (default: {DEFAULT_OVERLAP})",
    )
    ea.set_defaults(handler=run_eval_answers)


def run_eval_answers(args: argparse.Namespace) -> int:
    """``ragbot eval-answers``: print the figures per mode, write the report when asked."""
    from ragbot.evaluation.answers import half_of, load_questions, run_answers
    from ragbot.evaluation.paraphrases import nearest

    questions = [q for q in load_questions(args.questions) if args.language in (None, q.language)]
    if args.half != "all":
        questions = half_of(questions, args.half)
    left_out: list[dict[str, Any]] = []
    earlier: list[str] = []
    if args.unlike:
        if not 0.0 < args.unlike_overlap <= 1.0:
            sys.stderr.write(f"--unlike-overlap must be in (0, 1], got {args.unlike_overlap}\n")
            return 2
        earlier = [q.question for path in args.unlike for q in load_questions(path)]
        near = nearest([q.question for q in questions], earlier)
        left_out = [
            {"id": q.id, "question": q.question, "earlier": n.earlier, "overlap": round(n.overlap, 4)}
            for q, n in zip(questions, near, strict=True)
            if n.overlap >= args.unlike_overlap
        ]
        dropped = {row["id"] for row in left_out}
        questions = [q for q in questions if q.id not in dropped]
    overrides = {"llm_max_tokens": args.max_tokens} if args.max_tokens else {}
    run = asyncio.run(
        run_answers(
            questions=questions,
            modes=[cast(Mode, m) for m in args.modes],
            chat_overrides=overrides,
            retriever_url=args.retriever_url,
            pages_paths=args.pages,
            before=args.before,
        )
    )
    report = run.report()
    if args.unlike:
        report["unlike"] = {"overlap": args.unlike_overlap, "left_out": left_out}
    if args.output:
        args.output.write_text(json.dumps(report, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    if args.unlike:
        sys.stdout.write(
            f"left out {len(left_out)} near-paraphrases (word overlap >= {args.unlike_overlap}) "
            f"of {len(earlier)} earlier questions\n"
        )
    sys.stdout.write(f"{run.questions} questions ({args.half}); retrieval: {run.retrieval}; llm: {run.llm}\n")
    heads = ("gold_cited", "supported", "loop_rate", "abstained", "off_topic", "furniture")
    sys.stdout.write(f"{'mode':<16} " + " ".join(f"{h:>10}" for h in heads) + f" {'s/answer':>9}\n")
    for mode, fig in run.modes.items():
        sys.stdout.write(
            f"{mode:<16} {fig.gold_cited:>10.3f} {fig.supported_sentences:>10.3f} {fig.loop_rate:>10.3f} "
            f"{fig.abstained:>10.3f} {fig.off_topic_abstained:>10.3f} {fig.boilerplate_quoted:>10d} "
            f"{fig.seconds_per_answer:>9.2f}\n"
        )
    if args.output:
        sys.stdout.write(f"report: {args.output}\n")
    return 0
