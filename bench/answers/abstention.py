"""Abstention and boilerplate on held-out questions: fit the abstention rule on one half, report the other.

The question set is ``samples/kolzchut/abstention_questions.json`` (149 questions, Hebrew and English,
50 of them unanswerable by the pages, 42 of those from the pages' own field) over the 39 crawled pages
and the 7 content-API bodies, split by ``ragbot.evaluation.split`` into ``tune`` (76) and ``held_out``
(73).

- ``--fit``: answer the tuning half in ``quote`` mode with the rule off, read each turn's evidence
  (``ragbot.chat.answerability``), fit a logistic regression (numpy, L2, standardised features) of
  "the pages answer it" on that evidence, choose the threshold on the same half, and print the rule to
  paste into ``ABSTENTION_RULE`` (``ragbot.settings.chat``). The held-out half is never read.
- default: answer the held-out half in ``quote`` (and ``--strict``: the embedded LLM's ``strict``) as
  shipped and as before (the rule and the boilerplate filter off, keys suffixed ``_before``), and write
  ``bench/results/answers.json``: ``answers_gold_cited`` (target >= 0.9), ``answers_offtopic_abstained``
  (>= 0.9), ``answers_boilerplate_quoted`` (0), ``answers_supported_sentences`` (>= 0.95), per mode.

Run: ``uv run python bench/answers/abstention.py [--fit] [--strict]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results" / "answers.json"
FEATURES = ("dense_top", "dense_gap", "bm25_gap", "agree", "coverage", "sentence_top", "cross_language")
MAX_TOKENS = 96
L2 = 1.0


def fit_rule(rows: Sequence[dict[str, Any]], *, l2: float = L2, steps: int = 5000) -> dict[str, float]:
    """A logistic regression of "answering helps" (the pages answer it and the answer cites such a page)
    on the evidence, as an ``AbstentionRule`` in raw units, with the threshold that maximises the mean of
    ``gold_cited`` (over the answerable questions) and the share of unanswerable ones abstained on."""
    x = np.array([[float(r["evidence"][f]) for f in FEATURES] for r in rows])
    y = np.array([1.0 if r["gold_page_id"] is not None and r["gold_cited"] else 0.0 for r in rows])
    answerable = np.array([r["gold_page_id"] is not None for r in rows])
    mean, std = x.mean(axis=0), x.std(axis=0) + 1e-9
    z = (x - mean) / std
    w, b = np.zeros(len(FEATURES)), 0.0
    for _ in range(steps):
        p = 1.0 / (1.0 + np.exp(-(z @ w + b)))
        w -= 0.1 * (z.T @ (p - y) / len(y) + l2 * w / len(y))
        b -= 0.1 * float(np.mean(p - y))
    raw_w = w / std
    raw_b = b - float(np.sum(w * mean / std))
    scores = x @ raw_w + raw_b
    best: tuple[float, float] = (-1.0, 0.0)
    for t in sorted(set(scores.round(6))):
        cited = float(np.sum((scores >= t) & (y == 1)) / max(int(np.sum(answerable)), 1))
        abstained = float(np.mean(scores[~answerable] < t))
        value = (cited + abstained) / 2
        if value > best[0]:
            best = (value, float(t))
    rule = {"bias": round(raw_b, 6), **{f: round(float(v), 6) for f, v in zip(FEATURES, raw_w, strict=True)}}
    # the midpoint below the chosen score, so a question scoring exactly at it is answered
    below = [s for s in scores if s < best[1]]
    rule["threshold"] = round((best[1] + max(below)) / 2, 6) if below else round(best[1] - 1e-3, 6)
    return rule


def _flat(modes: dict[str, Any]) -> dict[str, float]:
    out: dict[str, float] = {}
    names = {
        "gold_cited": "gold_cited",
        "off_topic_abstained": "offtopic_abstained",
        "boilerplate_quoted": "boilerplate_quoted",
        "supported_sentences": "supported_sentences",
        "abstained": "answerable_abstained",
        "seconds_per_answer": "seconds_per_answer",
    }
    for key, fig in modes.items():
        mode, before, _ = key.partition("_before")
        summary = fig.summary()
        for name, flat in names.items():
            out[f"{mode}_answers_{flat}{before}"] = summary[name]
    return out


def main(argv: list[str] | None = None) -> None:
    """Fit on the tuning half (``--fit``) or report the held-out half."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--fit", action="store_true", help="fit the rule on the tuning half and print it")
    parser.add_argument(
        "--from-report",
        type=Path,
        help="with --fit: read the tuning half's answers from this report of "
        "`ragbot eval-answers --half tune --modes quote --output FILE` instead of answering them again",
    )
    parser.add_argument("--strict", action="store_true", help="also the embedded LLM's strict mode")
    parser.add_argument("--max-tokens", type=int, default=MAX_TOKENS, help="strict answers' token cap")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--rows", type=Path, help="also write every answer (JSON) here")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from ragbot.chat.schemas import Mode
    from ragbot.evaluation.answers import half_of, load_questions, run_answers

    questions = load_questions()
    if args.fit and args.from_report:
        tune = {q.id for q in half_of(questions, "tune")}
        answers = json.loads(args.from_report.read_text(encoding="utf-8"))["answers"]
        rows = [r for r in answers if r["mode"] == "quote" and r["evidence"]]
        if not rows or any(r["id"] not in tune for r in rows):
            raise SystemExit("the report must hold answers to the tuning half only, in quote mode")
        sys.stdout.write(json.dumps(fit_rule(rows), indent=2) + "\n")
        return
    if args.fit:
        run = asyncio.run(
            run_answers(
                questions=half_of(questions, "tune"),
                modes=["quote"],
                chat_overrides={"abstention_enabled": False},
            )
        )
        rows = [r for r in run.report()["answers"] if r["evidence"]]
        if args.rows:
            args.rows.write_text(json.dumps(rows, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
        sys.stdout.write(json.dumps(fit_rule(rows), indent=2) + "\n")
        return
    modes: list[Mode] = ["quote", "strict"] if args.strict else ["quote"]
    overrides: dict[str, Any] = {"llm_max_tokens": args.max_tokens}
    if args.strict:
        overrides["llm_backend"] = "llamacpp"
    run = asyncio.run(
        run_answers(
            questions=half_of(questions, "held_out"), modes=modes, chat_overrides=overrides, before=True
        )
    )
    figures: dict[str, Any] = _flat(run.modes)
    for name in ("gold_cited", "offtopic_abstained", "boilerplate_quoted", "supported_sentences"):
        figures[f"answers_{name}"] = figures[f"quote_answers_{name}"]
        figures[f"answers_{name}_before"] = figures[f"quote_answers_{name}_before"]
    figures["answers_questions"] = float(run.questions)
    figures["answers_half"] = "held_out"
    figures["answers_index_s"] = round(run.index_seconds, 2)
    figures["answers_total_s"] = round(run.seconds, 2)
    figures["llm"] = run.llm
    if args.rows:
        args.rows.write_text(json.dumps(run.report(), ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    text = json.dumps(figures, indent=2, ensure_ascii=False, sort_keys=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text + "\n", encoding="utf-8")
    sys.stdout.write(text + "\n")


if __name__ == "__main__":
    main()
