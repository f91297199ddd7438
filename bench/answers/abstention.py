"""Abstention and boilerplate on held-out questions: fit the abstention rule on one half, report the other.

The question set is ``samples/kolzchut/abstention_questions.json`` (149 questions, Hebrew and English,
50 of them unanswerable by the pages, 42 of those from the pages' own field) over the 39 crawled pages
and the 7 content-API bodies, split by ``ragbot.evaluation.split`` into ``tune`` (76) and ``held_out``
(73).

- ``--fit``: answer the tuning half in ``quote`` mode with the rule off and English questions leaving
  MiniLM out (``HEBREW_CORPUS_LANGUAGE_WEIGHTS``: these pages are Hebrew), read each turn's evidence
  (``ragbot.chat.answerability``), and for each candidate (``FEATURE_SETS`` x ``L2S`` x ``TARGETS``)
  cross-validate inside the tuning half a logistic regression (numpy, L2, standardised features) of
  "answering helps" per language pair (question in its best paragraph's language or not), with the
  threshold that cites the most while abstaining on ``target`` of the unanswerable; choose the candidate
  with the most out-of-fold gold_cited among those abstaining on >= 0.9, refit it on the whole tuning
  half and print both rules (``ABSTENTION_RULE_SAME_LANGUAGE``, ``ABSTENTION_RULE_CROSS_LANGUAGE`` in
  ``ragbot.settings.chat``: a candidate, opt-in). The held-out half is never read.
- default: answer the held-out half in ``quote`` as shipped (since 2026-12-05: English questions
  translated into Hebrew, a rule per language pair, ``_translated_bm25``'s) and, over the same index in
  the same run, as shipped before (``_single_rule``: one rule, every branch, no translation), as the
  first candidate (``_perpair``: the rules per language pair, MiniLM out for
  English questions), with that retrieval and no rule (``_minilm_out_norule``), with English questions
  also translated word by word into Hebrew and the rules fitted with that (``_translated``, ``--fit
  --translate`` before BM25 took the words too) and that retrieval with no rule
  (``_translated_norule``), the same with BM25 searching the translated words as well and its own fit
  (``_translated_bm25``, ``_translated_bm25_norule``), that retrieval with rules fitted on the tuning
  half and every set already read (``_pooled``, ``--fit --fit-spent --translate``), as shipped without
  the answer-kind check (``_no_kind``, ``ragbot.chat.answer_kind``), as shipped without the learned gate
  on the rule (``_no_gate``, ``ragbot.chat.pair_gate``; every other behaviour runs without it too, as it
  was measured), as shipped with query tuning on (``_query_tuned``: ``samples/kolzchut/e5-queries.npz``
  and the chat's rule for tuned turns), and as before any rule
  and the boilerplate filter (``_before``); ``--questions FILE``: every question of a set held out whole
  (``samples/kolzchut/abstention_questions_fresh.json``) instead of the held-out half; write
  ``bench/results/answers.json``: ``answers_gold_cited`` (target >= 0.9), ``answers_offtopic_abstained``
  (>= 0.9), ``answers_boilerplate_quoted`` (0), ``answers_supported_sentences`` (>= 0.95), per mode and
  per question language (``_he``, ``_en``). ``--strict`` adds the embedded LLM's ``strict`` on every
  ``--strict-every``th held-out question, as shipped, without strict's sentence check (``_ungated``),
  with it reading words but not their order (``_unordered``), with query tuning on (``_query_tuned``)
  and ``_before`` (``--only-strict``: only that, its keys added to the file's).

Run: ``uv run python -m bench.answers.abstention [--fit] [--strict | --only-strict]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import math
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bench.answers.sets import WHOLE_SETS, set_file

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results" / "answers.json"
FEATURES = ("dense_top", "dense_gap", "bm25_gap", "agree", "coverage", "sentence_top")
MAX_TOKENS = 96
# The candidates --fit chooses among by cross-validation inside the tuning half.
FEATURE_SETS: dict[str, tuple[str, ...]] = {
    "top": ("dense_top",),
    "top_sentence": ("dense_top", "sentence_top"),
    "top_sentence_coverage": ("dense_top", "sentence_top", "coverage"),
    "top_sentence_coverage_gaps": ("dense_top", "sentence_top", "coverage", "dense_gap", "bm25_gap"),
    "all": FEATURES,
}
L2S = (1.0, 5.0)
# The share of the fold's unanswerable questions the fold's threshold must abstain on (then most cited).
TARGETS = (0.9, 0.95, 1.0)
FOLDS, REPEATS = 5, 4
GOAL = 0.9
PAIRS = ("same_language", "cross_language")
# e5's query side tuned on the read question sets (ragbot tune-queries; RAGBOT_RETRIEVER_QUERY_TUNING_PATH)
TUNED_QUERIES = "samples/kolzchut/e5-queries.npz"
# The question sets held out whole that have been read (docs/benchmarks.md): --fit-spent trains on them.
SPENT_SETS = tuple(set_file(name) for name in WHOLE_SETS)


def _logistic(x: np.ndarray, y: np.ndarray, *, l2: float, steps: int = 1500) -> tuple[np.ndarray, float]:
    """Weights and bias in raw units of an L2 logistic regression on standardised features."""
    mean, std = x.mean(axis=0), x.std(axis=0) + 1e-9
    z = (x - mean) / std
    w, b = np.zeros(x.shape[1]), 0.0
    for _ in range(steps):
        p = 1.0 / (1.0 + np.exp(-(z @ w + b)))
        w -= 0.1 * (z.T @ (p - y) / len(y) + l2 * w / len(y))
        b -= 0.1 * float(np.mean(p - y))
    return w / std, b - float(np.sum(w * mean / std))


def _threshold(scores: np.ndarray, helps: np.ndarray, answerable: np.ndarray, target: float) -> float:
    """The threshold citing the most gold pages while abstaining on ``target`` of the unanswerable
    ones; the midpoint below the chosen score, so a question scoring exactly at it is answered."""
    best: tuple[int, float] | None = None
    for t in [*sorted(set(scores.round(6))), math.inf]:
        abstained = float(np.mean(scores[~answerable] < t)) if (~answerable).any() else 1.0
        cited = int(np.sum((scores >= t) & helps))
        if abstained >= target and (best is None or cited > best[0]):
            best = (cited, t)
    chosen = math.inf if best is None else best[1]
    below = scores[scores < chosen]
    if not math.isfinite(chosen):
        return float(scores.max() + 1e-3) if len(scores) else 0.0
    return float((chosen + below.max()) / 2) if len(below) else chosen - 1e-3


def labels(rows: Sequence[dict[str, Any]]) -> tuple[np.ndarray, np.ndarray]:
    """Per row: whether the pages answer the question, and whether answering helps (a gold page cited)."""
    answerable = np.array([r["gold_page_id"] is not None for r in rows], dtype=bool)
    return answerable, answerable & np.array([bool(r["gold_cited"]) for r in rows], dtype=bool)


def fit_rule(
    rows: Sequence[dict[str, Any]],
    *,
    features: Sequence[str] = FEATURES,
    l2: float = 1.0,
    target: float = 0.95,
) -> dict[str, float]:
    """A logistic regression of "answering helps" (the pages answer it and the answer cites such a page)
    on the evidence, as an ``AbstentionRule`` in raw units, with the threshold that cites the most gold
    pages while abstaining on ``target`` of the unanswerable questions."""
    x = np.array([[float(r["evidence"][f]) for f in features] for r in rows]).reshape(
        len(rows), len(features)
    )
    answerable, helps = labels(rows)
    w, b = _logistic(x, helps.astype(float), l2=l2)
    rule = {"bias": round(b, 6), **{f: round(float(v), 6) for f, v in zip(features, w, strict=True)}}
    rule["threshold"] = round(_threshold(x @ w + b, helps, answerable, target), 6)
    return rule


def _pair(row: dict[str, Any]) -> str:
    return PAIRS[int(bool(row["evidence"].get("cross_language")))]


def _score(rule: dict[str, float], row: dict[str, Any]) -> float:
    weighted = (v * float(row["evidence"][k]) for k, v in rule.items() if k not in ("bias", "threshold"))
    return rule.get("bias", 0.0) + sum(weighted)


def fit_rules(
    rows: Sequence[dict[str, Any]], *, features: Sequence[str], l2: float, target: float
) -> dict[str, dict[str, float]]:
    """One rule per language pair (question in its best paragraph's language or not)."""
    out: dict[str, dict[str, float]] = {}
    for pair in PAIRS:
        mine = [r for r in rows if _pair(r) == pair]
        if mine:
            out[pair] = fit_rule(mine, features=features, l2=l2, target=target)
    return out


def cross_validate(
    rows: Sequence[dict[str, Any]], *, features: Sequence[str], l2: float, target: float
) -> tuple[float, float]:
    """Out-of-fold gold_cited and unanswerable abstained of ``fit_rules`` inside these rows (stratified by
    answerability and language pair; ``REPEATS`` shuffles, ``FOLDS`` folds)."""
    figures: list[tuple[float, float]] = []
    answerable, helps = labels(rows)
    for repeat in range(REPEATS):
        rng = np.random.default_rng(repeat)
        fold = np.zeros(len(rows), dtype=int)
        # sorted: a set's order of strings changes with the process's hash seed, and so would the folds
        for key in sorted({(bool(a), _pair(r)) for a, r in zip(answerable, rows, strict=True)}):
            members = [i for i, r in enumerate(rows) if (bool(answerable[i]), _pair(r)) == key]
            rng.shuffle(members)
            for j, i in enumerate(members):
                fold[i] = j % FOLDS
        answered = np.zeros(len(rows), dtype=bool)
        for f in range(FOLDS):
            rules = fit_rules(
                [r for i, r in enumerate(rows) if fold[i] != f], features=features, l2=l2, target=target
            )
            for i in (int(n) for n in np.flatnonzero(fold == f)):
                rule = rules.get(_pair(rows[i]))
                answered[i] = rule is None or _score(rule, rows[i]) >= rule["threshold"]
        figures.append(
            (float(np.sum(answered & helps) / answerable.sum()), float(np.mean(~answered[~answerable])))
        )
    cited, abstained = np.mean(figures, axis=0)
    return float(cited), float(abstained)


def choose_and_fit(
    rows: Sequence[dict[str, Any]],
    *,
    log: Any = sys.stderr,
    feature_sets: dict[str, tuple[str, ...]] | None = None,
) -> dict[str, Any]:
    """Every candidate (feature set, L2, target) cross-validated inside the tuning half; the one with the
    most out-of-fold gold_cited among those abstaining on at least ``GOAL`` of the unanswerable (or the
    most abstaining, when none does), refitted on the whole tuning half. ``feature_sets``: the
    candidates' features (default ``FEATURE_SETS``)."""
    feature_sets = FEATURE_SETS if feature_sets is None else feature_sets
    candidates: list[dict[str, Any]] = []
    for name, features in feature_sets.items():
        for l2 in L2S:
            for target in TARGETS:
                cited, abstained = cross_validate(rows, features=features, l2=l2, target=target)
                log.write(
                    f"{name} l2={l2} target={target}: out-of-fold gold_cited {cited:.3f} "
                    f"abstained {abstained:.3f}\n"
                )
                candidates.append(
                    {
                        "features": name,
                        "l2": l2,
                        "target": target,
                        "cv_gold_cited": round(cited, 4),
                        "cv_abstained": round(abstained, 4),
                        "meets_goal": abstained >= GOAL,
                    }
                )

    def rank(c: dict[str, Any]) -> tuple[bool, float, float]:
        first = c["cv_gold_cited"] if c["meets_goal"] else c["cv_abstained"]
        return (c["meets_goal"], first, c["cv_abstained"])

    chosen = max(candidates, key=rank)
    name, l2, target = chosen["features"], chosen["l2"], chosen["target"]
    return {
        "chosen": chosen,
        "candidates": candidates,
        "rules": fit_rules(rows, features=feature_sets[name], l2=l2, target=target),
    }


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
        mode, sep, rest = key.partition("_")
        suffix = sep + rest
        summary = fig.summary()
        for name, flat in names.items():
            out[f"{mode}_answers_{flat}{suffix}"] = summary[name]
        for language in ("he", "en"):  # the question's language, from its id (a-he-001, u-en-002)
            rows = [r for r in fig.rows if f"-{language}-" in r.id]
            gold = [r for r in rows if r.gold_page_id is not None]
            off = [r for r in rows if r.gold_page_id is None]
            if gold:
                out[f"{mode}_answers_gold_cited_{language}{suffix}"] = round(
                    sum(r.gold_cited for r in gold) / len(gold), 4
                )
            if off:
                out[f"{mode}_answers_offtopic_abstained_{language}{suffix}"] = round(
                    sum(r.abstained for r in off) / len(off), 4
                )
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
    parser.add_argument(
        "--only-strict", action="store_true", help="strict only, its keys added to the --out file's"
    )
    parser.add_argument(
        "--strict-every", type=int, default=3, help="strict on every Nth held-out question (1: all)"
    )
    parser.add_argument("--max-tokens", type=int, default=MAX_TOKENS, help="strict answers' token cap")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--limit", type=int, default=0, help="only the first N held-out questions (a subset)")
    parser.add_argument("--rows", type=Path, help="also write every answer (JSON) here")
    parser.add_argument(
        "--questions",
        type=Path,
        help="report every question of this file (a set held out whole) instead of the held-out half",
    )
    parser.add_argument(
        "--fit-spent",
        action="store_true",
        help="with --fit: fit on the tuning half and every question set already read (SPENT_SETS, the "
        "held-out half): a set not among them must judge the result",
    )
    parser.add_argument(
        "--translate",
        action="store_true",
        help="with --fit: English questions also search with their words translated into Hebrew",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from ragbot.evaluation.answers import (
        BEFORE,
        BEFORE_OVERRIDES,
        AnswersRun,
        half_of,
        load_questions,
        run_answers,
    )
    from ragbot.settings.chat import (
        ABSTENTION_RULE_CROSS_LANGUAGE,
        ABSTENTION_RULE_CROSS_LANGUAGE_POOLED,
        ABSTENTION_RULE_CROSS_LANGUAGE_TRANSLATED,
        ABSTENTION_RULE_CROSS_LANGUAGE_TRANSLATED_BM25,
        ABSTENTION_RULE_SAME_LANGUAGE,
        ABSTENTION_RULE_SAME_LANGUAGE_POOLED,
        ABSTENTION_RULE_SAME_LANGUAGE_TRANSLATED,
        ABSTENTION_RULE_SAME_LANGUAGE_TRANSLATED_BM25,
        ABSTENTION_RULE_SINGLE,
    )
    from ragbot.settings.retrieval import HEBREW_CORPUS_LANGUAGE_WEIGHTS

    questions = load_questions()
    # the earlier behaviours' retrieval: no translation (the default since 2026-12-05)
    untranslated: dict[str, Any] = {"translate_queries_to": None}
    weights: dict[str, Any] = {**untranslated, "language_weights": HEBREW_CORPUS_LANGUAGE_WEIGHTS}
    # English questions translated word by word: e5's vector only (the first candidate), and BM25 too
    translated = {**weights, "translate_queries_to": "he", "translation_bm25": False}
    translated_bm25 = {**translated, "translation_bm25": True}
    if args.fit:
        if args.from_report:
            tune = {q.id for q in half_of(questions, "tune")}
            answers = json.loads(args.from_report.read_text(encoding="utf-8"))["answers"]
            rows = [r for r in answers if r["mode"] == "quote" and r["evidence"]]
            if not rows or any(r["id"] not in tune for r in rows):
                raise SystemExit("the report must hold answers to the tuning half only, in quote mode")
        else:
            fitted = half_of(questions, "tune")
            if args.fit_spent:  # the sets already read, as training data (a later set must judge it)
                fitted += half_of(questions, "held_out")
                fitted += [q for path in SPENT_SETS for q in load_questions(ROOT / path)]
            tuned = asyncio.run(
                run_answers(
                    questions=fitted,
                    modes=["quote"],
                    chat_overrides={"abstention_enabled": False},
                    retriever_overrides=translated_bm25 if args.translate else weights,
                )
            )
            rows = [r for r in tuned.report()["answers"] if r["evidence"]]
            if args.rows:
                args.rows.write_text(json.dumps(rows, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
        sys.stdout.write(json.dumps(choose_and_fit(rows), indent=2) + "\n")
        return
    overrides: dict[str, Any] = {"llm_max_tokens": args.max_tokens}
    # one index, four behaviours: as shipped (one rule, every branch), the candidate (a rule per language
    # pair, MiniLM out for English questions), that retrieval with no rule, and before any rule
    per_pair = {
        "abstention_rule": ABSTENTION_RULE_SAME_LANGUAGE,
        "abstention_rule_cross_language": ABSTENTION_RULE_CROSS_LANGUAGE,
    }
    per_pair_translated = {
        "abstention_rule": ABSTENTION_RULE_SAME_LANGUAGE_TRANSLATED,
        "abstention_rule_cross_language": ABSTENTION_RULE_CROSS_LANGUAGE_TRANSLATED,
    }
    per_pair_translated_bm25 = {
        "abstention_rule": ABSTENTION_RULE_SAME_LANGUAGE_TRANSLATED_BM25,
        "abstention_rule_cross_language": ABSTENTION_RULE_CROSS_LANGUAGE_TRANSLATED_BM25,
    }
    per_pair_pooled = {
        "abstention_rule": ABSTENTION_RULE_SAME_LANGUAGE_POOLED,
        "abstention_rule_cross_language": ABSTENTION_RULE_CROSS_LANGUAGE_POOLED,
    }
    # every earlier behaviour as it was measured: without the gate (ragbot.chat.pair_gate)
    no_gate: dict[str, Any] = {"abstention_gate_enabled": False}
    compare: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
        # shipped, without the learned gate on the rule
        "_no_gate": (no_gate, translated_bm25),
        # shipped, with e5's query side tuned on the read question sets (its own rule for those turns)
        "_query_tuned": ({}, {**translated_bm25, "query_tuning_path": ROOT / TUNED_QUERIES}),
        "_perpair": ({**per_pair, **no_gate}, weights),
        "_minilm_out_norule": ({"abstention_enabled": False}, weights),
        "_translated": ({**per_pair_translated, **no_gate}, translated),
        "_translated_norule": ({"abstention_enabled": False}, translated),
        "_translated_bm25": ({**per_pair_translated_bm25, **no_gate}, translated_bm25),
        "_translated_bm25_norule": ({"abstention_enabled": False}, translated_bm25),
        "_pooled": ({**per_pair_pooled, **no_gate}, translated_bm25),
        # shipped without the gate, and without the answer-kind check (an amount or a duration asked)
        "_no_kind": ({"answer_kind_margin": -1.0, **no_gate}, translated_bm25),
        # the default before 2026-12-05: one rule for both language pairs, every branch, no translation
        "_single_rule": (
            {"abstention_rule": ABSTENTION_RULE_SINGLE, "abstention_rule_cross_language": None, **no_gate},
            untranslated,
        ),
        BEFORE: (dict(BEFORE_OVERRIDES), untranslated),
    }
    if args.questions is not None:  # a set held out whole (no tuning half)
        questions = load_questions(args.questions)
    else:
        questions = half_of(questions, "held_out")
    if args.limit:
        questions = questions[: args.limit]
    previous: dict[str, Any] = {}
    if args.only_strict:  # keep the quote figures of an earlier run, add strict's
        previous = json.loads(args.out.read_text(encoding="utf-8"))
        args.strict = True
    run: AnswersRun | None = (
        None
        if args.only_strict
        else asyncio.run(
            run_answers(
                questions=questions,
                modes=["quote"],
                chat_overrides=overrides,
                compare=compare,
            )
        )
    )
    strict: AnswersRun | None = None
    if args.strict:
        # the embedded LLM takes seconds per answer on two cores: every Nth held-out question, as shipped
        # and with no rule
        strict = asyncio.run(
            run_answers(
                questions=questions[:: args.strict_every],
                modes=["strict"],
                chat_overrides={**overrides, "llm_backend": "llamacpp"},
                compare={
                    BEFORE: compare[BEFORE],
                    "_ungated": ({"strict_support_min": 0.0}, translated_bm25),
                    "_unordered": ({"strict_order_min": 0.0}, translated_bm25),
                    "_query_tuned": compare["_query_tuned"],
                },
            )
        )
    figures: dict[str, Any] = dict(previous)
    if run is not None:
        figures.update(_flat(run.modes))
        for name in ("gold_cited", "offtopic_abstained", "boilerplate_quoted", "supported_sentences"):
            for suffix in ("", *compare):
                figures[f"answers_{name}{suffix}"] = figures[f"quote_answers_{name}{suffix}"]
        figures["answers_questions"] = float(run.questions)
        figures["answers_half"] = "all" if args.questions is not None else "held_out"
        figures["answers_index_s"] = round(run.index_seconds, 2)
        figures["answers_total_s"] = round(run.seconds, 2)
        figures["llm"] = "none"
    reports = [r.report() for r in (run, strict) if r is not None]
    if strict is not None:
        figures.update(_flat(strict.modes))
        figures["strict_answers_questions"] = float(strict.questions)
        figures["strict_answers_every"] = float(args.strict_every)
        figures["strict_answers_total_s"] = round(strict.seconds, 2)
        figures["llm"] = strict.llm
    if args.rows:
        args.rows.write_text(json.dumps(reports, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    text = json.dumps(figures, indent=2, ensure_ascii=False, sort_keys=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text + "\n", encoding="utf-8")
    sys.stdout.write(text + "\n")


if __name__ == "__main__":
    main()
