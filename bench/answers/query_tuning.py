"""How far tuning e5's query side on a wiki's own questions lifts English answers, the rule on (issue 29).

Leave-files-out over the Kol-Zchut question files already read (``READ_FILES``): the files, sorted by
name, are dealt into five folds. For each fold, ``ragbot.embedders.query_tuning.fit_biases`` fits the
bias terms of the dequantized multilingual-e5-small on the other files' answerable (question, gold
page) pairs against the e5 passage vectors of every sample paragraph. The fold's English questions
(the tuned encoder serves Latin-script questions only, so the Hebrew ones answer as shipped) are then
answered in quote mode as shipped (the rule, the answer-kind check and the gate on), once with the
retriever's e5 list searched untuned and once tuned (``ragbot.retrieval.tuned``: the tuned list is
fused in the untuned one's place, the untuned one's cosines stay for the rule). Then twice more with
the rule off, untuned and tuned: those turns' evidence holds both lists' cosines (``dense_top`` and the
tuned ``tuned_top``, ``ragbot.chat.answerability``), a question's tuned cosines from an encoder fitted
without its file, as a new question's would be from the shipped file. On the turns whose question is
in another language than its best paragraph, every rule of ``TUNED_FEATURE_SETS`` is scored out of
fold at the same shares of unanswerable questions abstained on (``cited_at``), and ``candidate_rule``
fits the tuned turns' rule (``ABSTENTION_RULE_CROSS_LANGUAGE_TUNED``) at the shipped cross-language
rule's abstention on the untuned turns: ``bench/results/query_tuning_fit.json``.

``bench/results/query_tuning.json``: ``query_tuning_en_gold_cited`` and ``_tuned``,
``query_tuning_en_unanswerable_abstained`` and ``_tuned``, ``query_tuning_en_answerable_abstained`` and
``_tuned``, the same with ``_norule`` and ``_tuned_norule``, the counts, and per fold
``query_tuning_fold<k>_en_cited`` / ``_abstained`` (and the other ways' suffixes).
Not part of ``make bench`` (about 30 minutes on 2 cores; ``--fit-only``, the rule-off ways only, 14).
Run: ``uv run python -m bench.answers.query_tuning`` (``--rows FILE`` keeps the rule-off turns;
``--from-rows FILE`` refits from them and answers nothing).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.answers.sets import WHOLE_SETS, set_file

ROOT = Path(__file__).resolve().parents[2]
READ_FILES = ("samples/kolzchut/abstention_questions.json", *(set_file(name) for name in WHOLE_SETS))
FOLDS = 5
# The tuned turns' rule that is a candidate for the default (the best at every level on the read files).
CANDIDATE = ("dense_top", "tuned_top", "sentence_top", "coverage")
# The shares of unanswerable questions abstained on at which the tuned rule's candidates are compared.
LEVELS = (0.7, 0.8, 0.82, 0.85, 0.872, 0.9)
# The tuned rule's candidates: the untuned lists' cosines (as the shipped rule reads), the tuned lists',
# and both, each alone and with the best sentence score and key-term coverage.
TUNED_FEATURE_SETS: dict[str, tuple[str, ...]] = {
    "untuned": ("dense_top",),
    "untuned_sentence_coverage": ("dense_top", "sentence_top", "coverage"),
    "tuned": ("tuned_top",),
    "tuned_sentence_coverage": ("tuned_top", "sentence_top", "coverage"),
    "both": ("dense_top", "tuned_top"),
    "both_sentence_coverage": ("dense_top", "tuned_top", "sentence_top", "coverage"),
    "both_gaps_sentence_coverage": (
        "dense_top",
        "tuned_top",
        "dense_gap",
        "tuned_gap",
        "sentence_top",
        "coverage",
    ),
}
E5 = "multilingual-e5-small"


def fold_pairs(files: Mapping[str, Sequence[Any]], held: set[str]) -> list[tuple[str, set[int]]]:
    """The (question, gold pages) pairs of every answerable question outside the ``held`` files."""
    return [
        (q.question, q.gold_pages)
        for name, questions in files.items()
        if name not in held
        for q in questions
        if q.gold_page_id is not None
    ]


async def run(fit_rows: list[dict[str, Any]], *, fit_only: bool = False) -> dict[str, float]:
    """Every fold's English answers, untuned and tuned, with the rule and without (those turns added to
    ``fit_rows``; ``fit_only``: only those); the figures."""
    from ragbot.chat.pipeline import ChatPipeline
    from ragbot.embedders.query_tuning import TunedE5Queries, fit_biases, shipped_e5
    from ragbot.evaluation.answers import DEFAULT_PAGES, RecordingRetriever, evaluate, load_questions
    from ragbot.evaluation.query_tuning import passage_matrix
    from ragbot.evaluation.sample_index import SampleIndex
    from ragbot.llms import build_llm
    from ragbot.ports import Embedder
    from ragbot.prompts import PromptLibrary
    from ragbot.settings import ChatSettings, get_chat_settings

    settings = get_chat_settings()
    unruled = settings.model_copy(update={"abstention_enabled": False})
    llm = build_llm(settings=settings)
    prompts = PromptLibrary(settings.prompts_dir)
    files = {path: load_questions(ROOT / path) for path in sorted(READ_FILES)}
    index = await SampleIndex.build(DEFAULT_PAGES)
    e5 = shipped_e5()
    start = {k: v.clone() for k, v in e5._model.state_dict().items()}
    encoder = TunedE5Queries.of(E5, e5)  # refitted in place for each fold
    figures: dict[str, float] = {}
    counts: dict[str, list[int]] = {}
    try:
        retriever = await index.engine_with({})
        engine = retriever.engine
        passages, page_ids = await passage_matrix(engine, e5, DEFAULT_PAGES, settings.document_text_field)
        names = list(files)
        for fold in range(FOLDS):
            held = set(names[fold::FOLDS])
            pairs = fold_pairs(files, held)
            started = time.perf_counter()
            e5._model.load_state_dict(start)
            fit_biases(e5, pairs, passages, page_ids)
            print(f"fold {fold}: fitted on {len(pairs)} questions in {time.perf_counter() - started:.0f} s")
            questions = [q for name in sorted(held) for q in files[name] if q.language == "en"]
            ways: tuple[tuple[str, dict[str, Embedder], ChatSettings], ...] = (
                ("", {}, settings),
                ("_tuned", {E5: encoder}, settings),
                # the rule off: the turns the rules are compared on (their evidence reads both lists)
                ("_norule", {}, unruled),
                ("_tuned_norule", {E5: encoder}, unruled),
            )
            for way, tuned, chat in ways[2:] if fit_only else ways:
                engine.tuned = dict(tuned)
                recorder = RecordingRetriever(retriever, text_field=settings.document_text_field)
                pipeline = ChatPipeline(llm=llm, retriever=recorder, prompts=prompts, settings=chat)
                rows = (
                    await evaluate(pipeline=pipeline, recorder=recorder, questions=questions, modes=["quote"])
                )["quote"].rows
                if way.endswith("_norule"):
                    fit_rows.extend(
                        {
                            "id": r.id,
                            "tuned": way == "_tuned_norule",
                            "gold_page_id": r.gold_page_id,
                            "gold_cited": r.gold_cited,
                            "evidence": r.evidence,
                        }
                        for r in rows
                        if r.evidence
                    )
                answerable = [r for r in rows if r.gold_page_id is not None]
                unanswerable = [r for r in rows if r.gold_page_id is None]
                for key, hits, total in (
                    ("cited", sum(r.gold_cited for r in answerable), len(answerable)),
                    ("answerable_abstained", sum(r.abstained for r in answerable), len(answerable)),
                    ("abstained", sum(r.abstained for r in unanswerable), len(unanswerable)),
                ):
                    tally = counts.setdefault(f"{key}{way}", [0, 0])
                    tally[0] += hits
                    tally[1] += total
                    figures[f"query_tuning_fold{fold}_en_{key}{way}"] = float(hits)
                print(f"  {way or 'untuned'}: {counts}", flush=True)
        engine.tuned = {}
    finally:
        await index.close()
        await llm.close()
    names_out = {
        "cited": "gold_cited",
        "answerable_abstained": "answerable_abstained",
        "abstained": "unanswerable_abstained",
    }
    for key, (hits, total) in counts.items():
        base = next(b for b in sorted(names_out, key=len, reverse=True) if key.startswith(b))
        suffix = key.removeprefix(base)
        figures[f"query_tuning_en_{names_out[base]}{suffix}"] = round(hits / max(total, 1), 4)
        figures[f"query_tuning_en_{'unanswerable' if base == 'abstained' else 'answerable'}"] = float(total)
    return dict(sorted(figures.items()))


def cited_at(
    rows: Sequence[dict[str, Any]], features: Sequence[str], *, levels: Sequence[float] = LEVELS
) -> dict[str, float]:
    """Gold cited (of the answerable rows) by a rule on these features at each share of unanswerable rows
    abstained on (``LEVELS``): out-of-fold scores of ``bench.answers.abstention``'s logistic regression
    (L2 1; 5 folds stratified by answerability, 4 shuffles), the threshold at that quantile of the
    unanswerable rows' scores. So feature sets compare at the same abstention, the shipped one's
    included."""
    import numpy as np

    from bench.answers.abstention import FOLDS as CV_FOLDS
    from bench.answers.abstention import REPEATS, _logistic, labels

    x = np.array([[float(r["evidence"][f]) for f in features] for r in rows]).reshape(
        len(rows), len(features)
    )
    answerable, helps = labels(rows)
    cited = np.zeros(len(levels))
    for repeat in range(REPEATS):
        rng = np.random.default_rng(repeat)
        fold = np.zeros(len(rows), dtype=int)
        for kind in (True, False):
            members = np.flatnonzero(answerable == kind)
            rng.shuffle(members)
            fold[members] = np.arange(len(members)) % CV_FOLDS
        scores = np.zeros(len(rows))
        for f in range(CV_FOLDS):
            w, b = _logistic(x[fold != f], helps[fold != f].astype(float), l2=1.0)
            scores[fold == f] = x[fold == f] @ w + b
        for k, level in enumerate(levels):
            threshold = np.quantile(scores[~answerable], level)
            cited[k] += np.sum((scores >= threshold) & helps) / answerable.sum()
    return {f"{level:.3f}": round(float(c / REPEATS), 4) for level, c in zip(levels, cited, strict=True)}


def candidate_rule(tuned: Sequence[dict[str, Any]], plain: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The tuned turns' rule on ``CANDIDATE`` (logistic regression, L2 1, on every tuned turn), its
    threshold abstaining on as many of the tuned turns' unanswerable questions as the shipped
    cross-language rule does on the untuned retrieval's (the rule alone, before the gate and the
    answer-kind check, which follow both): the same operating point, so what changes is gold cited."""
    import numpy as np

    from bench.answers.abstention import _logistic, _score, labels
    from ragbot.settings.chat import ABSTENTION_RULE_CROSS

    def figures(rows: Sequence[dict[str, Any]], rule: dict[str, float]) -> tuple[float, float]:
        answerable, helps = labels(rows)
        answered = np.array([_score(rule, r) >= rule["threshold"] for r in rows])
        return float(np.sum(answered & helps) / answerable.sum()), float(np.mean(~answered[~answerable]))

    shipped = figures(plain, ABSTENTION_RULE_CROSS)
    x = np.array([[float(r["evidence"][f]) for f in CANDIDATE] for r in tuned])
    answerable, helps = labels(tuned)
    w, b = _logistic(x, helps.astype(float), l2=1.0)
    rule = {"bias": round(b, 6), **{f: round(float(v), 6) for f, v in zip(CANDIDATE, w, strict=True)}}
    rule["threshold"] = round(float(np.quantile(x[~answerable] @ w + b, shipped[1])), 6)
    on_tuned_shipped = figures(tuned, ABSTENTION_RULE_CROSS)
    return {
        "features": list(CANDIDATE),
        "rule": rule,
        "level": round(shipped[1], 4),
        "shipped_untuned_retrieval": [round(v, 4) for v in shipped],
        "shipped_tuned_retrieval": [round(v, 4) for v in on_tuned_shipped],
        "in_sample": [round(v, 4) for v in figures(tuned, rule)],
        "out_of_fold_at_level": cited_at(tuned, CANDIDATE, levels=(shipped[1],)),
    }


def fit_tuned_rule(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The cross-language rule for tuned turns, chosen and fitted like ``bench.answers.abstention --fit``
    on the out-of-fold tuned evidence of the English questions whose best paragraph is in another
    language (a question's cosines come from an encoder fitted without its file); and, to compare at the
    same abstention, each candidate's gold cited on those turns and the untuned feature sets' on the
    untuned retrieval's turns (``cited_at_abstained``, ``cited_at_abstained_untuned_retrieval``)."""
    from bench.answers.abstention import choose_and_fit

    cross = [r for r in rows if r["evidence"].get("cross_language") and r.get("tuned", True)]
    plain = [r for r in rows if r["evidence"].get("cross_language") and not r.get("tuned", True)]
    fit = choose_and_fit(cross, feature_sets=TUNED_FEATURE_SETS)
    fit["cited_at_abstained"] = {
        name: cited_at(cross, features) for name, features in TUNED_FEATURE_SETS.items()
    }
    if plain:
        fit["cited_at_abstained_untuned_retrieval"] = {
            name: cited_at(plain, features)
            for name, features in TUNED_FEATURE_SETS.items()
            if "tuned_top" not in features
        }
    if plain:
        fit["candidate"] = candidate_rule(cross, plain)
    for name, mine in (("", cross), ("_untuned_retrieval", plain)):
        fit[f"rows{name}"] = len(mine)
        fit[f"answerable{name}"] = sum(r["gold_page_id"] is not None for r in mine)
        fit[f"cited_no_rule{name}"] = sum(
            r["gold_page_id"] is not None and bool(r["gold_cited"]) for r in mine
        )
    return fit


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results/query_tuning.json")
    parser.add_argument("--fit-out", type=Path, default=ROOT / "bench/results/query_tuning_fit.json")
    parser.add_argument("--rows", type=Path, help="also keep the rule-off turns (JSON) here")
    parser.add_argument("--from-rows", type=Path, help="refit the tuned rule from kept turns, answer nothing")
    parser.add_argument("--fit-only", action="store_true", help="answer only the rule-off tuned way, and fit")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    started = time.perf_counter()
    if args.from_rows is not None:  # refit only, from the turns an earlier run kept
        fit_rows = json.loads(args.from_rows.read_text(encoding="utf-8"))
    else:
        fit_rows = []
        figures: Mapping[str, float] = asyncio.run(run(fit_rows, fit_only=args.fit_only))
        args.out.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
        print(json.dumps(figures, indent=2))
        if args.rows is not None:
            args.rows.write_text(json.dumps(fit_rows, indent=1) + "\n", encoding="utf-8")
    fit = fit_tuned_rule(fit_rows)
    args.fit_out.write_text(json.dumps(fit, indent=2) + "\n", encoding="utf-8")
    print(json.dumps({"chosen": fit["chosen"], "rules": fit["rules"]}, indent=2))
    wrote = [args.fit_out] if args.from_rows is not None else [args.out, args.fit_out]
    print(f"{time.perf_counter() - started:.0f} s; wrote {', '.join(map(str, wrote))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
