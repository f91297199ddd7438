"""Fit the abstention gate's threshold for the turns a tuned query encoder searched (issue 29).

The gate's thresholds (``bench/answers/pair_gate.py``) were chosen on turns retrieved with e5 untuned.
With query tuning on (``ragbot.retrieval.tuned``), an English question's paragraphs come from the tuned
list, and the rule for those turns (``ABSTENTION_RULE_CROSS_LANGUAGE_TUNED``) lets more of them through,
so the cross-language threshold may no longer abstain as it was chosen to.

Leave-files-out, as ``bench/answers/query_tuning.py`` deals them: the Kol-Zchut question files already
read, five folds. For each fold, e5's query side is tuned on the other folds' questions, and the fold's
English questions are answered in quote mode with tuning on, the rule and the answer-kind check as
shipped and the gate off, keeping what the gate would read (``bench.answers.pair_gate.answer``). Each
such turn's gate probability comes from a gate fitted on the gate's own turns (``--gate-turns``, what
``bench/answers/pair_gate.py --turns`` keeps) of the files outside the fold. So neither the tuned
encoder nor the gate has seen the question.

On the cross-language turns that searched a tuned list, the threshold is chosen by one of the gate's
``CRITERIA`` (``bench.answers.pair_gate``): ``target`` is the gate's own criterion (``threshold_for``:
the lowest that abstains on ``TARGET`` of the unanswerable questions), ``balanced`` (the default) the
best sum of gold cited and unanswerable abstained, each a share of its own questions. Both are judged
out of fold: each fold's turns at the threshold chosen on the other folds. The threshold chosen on every
fold is written to a copy of the gate file (``--gate`` in, ``--gate-out``) as ``cross_language_tuned``
(``ragbot.chat.pair_gate.TUNED_PAIR``); the figures to ``bench/results/tuned_gate_fit.json``. The
shipped gate has no such threshold: the candidate failed its check (docs/benchmarks.md).

Not part of ``make bench``. Run after ``pair_gate``:
``uv run python -m bench.answers.tuned_gate --gate-turns FILE`` (about 15 minutes on 2 cores for the
tuned turns, 7 more when the gate's turns are collected; ``--turns FILE`` keeps the tuned turns and
refits from them).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pickle
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench.answers.pair_gate import (
    CRITERIA,
    GATE_SETS,
    MAIN_SET,
    TARGET,
    Turn,
    _best,
    _fit,
    answer,
    collect,
    judged,
)
from bench.answers.query_tuning import E5, FOLDS, READ_FILES
from bench.answers.sets import set_file

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results" / "tuned_gate_fit.json"


@dataclass(slots=True)
class TunedTurn:
    """One English question answered with tuning on: the gate's view of it, its fold, and whether its
    retrieval searched a tuned list."""

    turn: Turn
    fold: int
    tuned: bool


def set_name(path: str) -> str:
    """A read file's set name, as the gate's turns name it (``main`` for the split file)."""
    return "main" if path == MAIN_SET else Path(path).stem.removeprefix("abstention_questions_")


def folds() -> list[set[str]]:
    """The set names of each fold, dealt as ``bench/answers/query_tuning.py`` deals the files."""
    names = sorted(READ_FILES)
    return [{set_name(p) for p in names[fold::FOLDS]} for fold in range(FOLDS)]


async def answer_tuned() -> list[TunedTurn]:
    """Every fold's English questions, answered with e5's query side tuned on the other folds."""
    from ragbot.chat.answerability import searched_tuned
    from ragbot.chat.pipeline import ChatPipeline
    from ragbot.embedders.query_tuning import TunedE5Queries, fit_biases, shipped_e5
    from ragbot.evaluation.answers import DEFAULT_PAGES, RecordingRetriever, load_questions
    from ragbot.evaluation.query_tuning import passage_matrix
    from ragbot.evaluation.sample_index import SampleIndex
    from ragbot.llms import build_llm
    from ragbot.prompts import PromptLibrary
    from ragbot.settings import get_chat_settings

    settings = get_chat_settings().model_copy(update={"abstention_gate_enabled": False})
    llm = build_llm(settings=settings)
    files = {set_name(p): load_questions(ROOT / p) for p in READ_FILES}
    index = await SampleIndex.build(DEFAULT_PAGES)
    e5 = shipped_e5()
    start = {k: v.clone() for k, v in e5._model.state_dict().items()}
    encoder = TunedE5Queries.of(E5, e5)  # refitted in place for each fold
    out: list[TunedTurn] = []
    try:
        retriever = await index.engine_with({})
        engine = retriever.engine
        passages, page_ids = await passage_matrix(engine, e5, DEFAULT_PAGES, settings.document_text_field)
        engine.tuned = {E5: encoder}
        recorder = RecordingRetriever(retriever, text_field=settings.document_text_field)
        pipeline = ChatPipeline(
            llm=llm, retriever=recorder, prompts=PromptLibrary(settings.prompts_dir), settings=settings
        )
        for fold, held in enumerate(folds()):
            pairs = [
                (q.question, q.gold_pages)
                for name, questions in files.items()
                if name not in held
                for q in questions
                if q.gold_page_id is not None
            ]
            started = time.perf_counter()
            e5._model.load_state_dict(start)
            fit_biases(e5, pairs, passages, page_ids)
            print(f"fold {fold}: tuned on {len(pairs)} questions in {time.perf_counter() - started:.0f} s")
            for name in sorted(held):
                for q in files[name]:
                    if q.language != "en":
                        continue
                    turn, debug = await answer(pipeline, recorder, name, q)
                    retrieval = (debug.get("retrieval") or {}).get("debug") or {}
                    out.append(TunedTurn(turn, fold, searched_tuned(retrieval)))
            print(f"  {len(out)} turns so far", flush=True)
        engine.tuned = {}
    finally:
        await index.close()
        await llm.close()
    return out


def out_of_fold(tuned: Sequence[TunedTurn], gate_turns: Sequence[Turn]) -> dict[str, float]:
    """Each tuned turn's best gate probability, the gate fitted on the gate's turns outside its fold (the
    sets its fold's turns came from, as they were dealt when answered)."""
    usable = [t for t in gate_turns if len(t.x)]
    best: dict[str, float] = {}
    for fold in sorted({t.fold for t in tuned}):
        held = {t.turn.set_name for t in tuned if t.fold == fold}
        w, b = _fit([t for t in usable if t.set_name not in held])
        for t in tuned:
            if t.fold == fold:
                best[t.turn.question_id] = _best(t.turn, w, b) if len(t.turn.x) else -1.0
    return best


def fit(
    tuned: Sequence[TunedTurn],
    gate_turns: Sequence[Turn],
    shipped_cross: float,
    *,
    criterion: str = "balanced",
) -> dict[str, Any]:
    """The tuned threshold chosen by ``criterion`` on every fold, and each way's out-of-fold figures (a
    fold judged at the threshold its criterion chose on the other folds)."""
    best = out_of_fold(tuned, gate_turns)
    mine = [t for t in tuned if t.tuned and t.turn.cross_language]
    turns = [t.turn for t in mine]
    answerable = sum(t.answerable for t in turns)
    unanswerable = len(turns) - answerable
    ways: dict[str, list[int]] = {"rule": [0, 0], "shipped_cross": [0, 0]}
    ways.update({name: [0, 0] for name in CRITERIA})
    per_fold: dict[str, float] = {}
    for fold in range(FOLDS):
        inside = [t.turn for t in mine if t.fold == fold]
        others = [t.turn for t in mine if t.fold != fold]
        bars = {"rule": -np.inf, "shipped_cross": shipped_cross}
        for name, choose in CRITERIA.items():
            bars[name] = choose(others, best)
            per_fold[f"fold{fold}_{name}_threshold"] = round(bars[name], 6)
        for way, bar in bars.items():
            cited, abstained = judged(inside, best, bar)
            ways[way][0] += cited
            ways[way][1] += abstained
    report: dict[str, Any] = {
        "turns": len(tuned),
        "cross_language_tuned_turns": len(turns),
        "answerable": answerable,
        "unanswerable": unanswerable,
        "criterion": criterion,
        "target": TARGET,
        "threshold": round(CRITERIA[criterion](turns, best), 6),
        **{f"{name}_threshold": round(choose(turns, best), 6) for name, choose in CRITERIA.items()},
        "shipped_cross_language_threshold": round(shipped_cross, 6),
        **per_fold,
    }
    for way, (cited, abstained) in ways.items():
        report[f"{way}_gold_cited"] = round(cited / max(answerable, 1), 4)
        report[f"{way}_unanswerable_abstained"] = round(abstained / max(unanswerable, 1), 4)
    report["gate_probabilities_unanswerable_answered"] = sorted(
        round(best[t.question_id], 4) for t in turns if not t.answerable and t.answered
    )
    return report


def main(argv: Sequence[str] | None = None) -> int:
    """Answer (or reload) the tuned turns, fit the threshold, write it to the gate file and the figures."""
    from ragbot.chat.pair_gate import PACKAGED_GATE, TUNED_PAIR, load_gate

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--gate-turns",
        type=Path,
        required=True,
        help="the gate's turns (bench/answers/pair_gate.py --turns); collected here when missing",
    )
    parser.add_argument("--turns", type=Path, help="keep the tuned turns here (pickle), reuse them if there")
    parser.add_argument(
        "--gate", type=Path, default=PACKAGED_GATE, help="the gate file whose copy gets the threshold"
    )
    parser.add_argument(
        "--gate-out", type=Path, default=ROOT / "var/bench/tuned_gate.json", help="where the copy goes"
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument(
        "--criterion",
        choices=sorted(CRITERIA),
        default="balanced",
        help="how the threshold is chosen",
    )
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    started = time.perf_counter()
    if args.gate_turns.exists():
        gate_turns: list[Turn] = pickle.loads(args.gate_turns.read_bytes())  # our own file
    else:
        sets = [("main", ROOT / MAIN_SET), *((name, ROOT / set_file(name)) for name in GATE_SETS)]
        gate_turns = asyncio.run(collect(sets))
        args.gate_turns.write_bytes(pickle.dumps(gate_turns))
    if args.turns is not None and args.turns.exists():
        tuned: list[TunedTurn] = pickle.loads(args.turns.read_bytes())  # our own file
    else:
        tuned = asyncio.run(answer_tuned())
        if args.turns is not None:
            args.turns.write_bytes(pickle.dumps(tuned))
    gate = load_gate(args.gate)
    report = fit(tuned, gate_turns, gate.threshold(True), criterion=args.criterion)
    raw = json.loads(args.gate.read_text(encoding="utf-8"))
    raw["thresholds"][TUNED_PAIR] = report["threshold"]
    args.gate_out.parent.mkdir(parents=True, exist_ok=True)
    args.gate_out.write_text(json.dumps(raw) + "\n", encoding="utf-8")
    report["seconds"] = round(time.perf_counter() - started, 1)
    args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
