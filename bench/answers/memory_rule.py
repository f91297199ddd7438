"""Bench: fit and measure the abstention rule for English turns the question memory voted on.

``make run`` answers an English question over the Hebrew pages with a tuned query encoder and a
question memory (``ragbot.retrieval.tuned``, ``ragbot.retrieval.memory``). Such a turn gets the
cross-language tuned rule (``ABSTENTION_RULE_CROSS_LANGUAGE_TUNED``), or, once the memory voted, the
memory's rule (``ABSTENTION_RULE_CROSS_LANGUAGE_MEMORY``), which also weighs the nearest remembered
question's cosine and whether its page is the retrieved first page (``memory_best``, ``memory_agree``,
``ragbot.chat.answerability``).

Every read file's English questions are answered as ``make run`` answers them, out of fold twice
over: the tuned encoder is fitted without the file's fold (``query_tuning.py``'s five folds) and the
memory holds the other files' questions only. Every rule's threshold is off, so each turn records
whether the gate, the answer-kind check or the quote mode abstained anyway and whether the answer cited
a gold page; a rule's effect is then simulated exactly. The memory's rule is a logistic regression
(``abstention._logistic``) of "answering helps" on the turns nothing else abstained on, its threshold
the best sum of the gold-cited and abstained shares; figures are out of fold by the five folds, and the
rule written is fitted on every turn.

    python -m bench.answers.memory_rule [--language en|he] [--turns FILE] [--from-turns FILE] [--out FILE]

``--language he`` answers the Hebrew questions instead (searching tuned, as ``make run`` does) and
measures the same-language rule refitted with the memory's features beside its candidates
(``FEATURES_SAME``) against the shipped one (``bench/results/memory_rule_he.json``); the rule written
is the candidate for ``ABSTENTION_RULE_MEMORY``, the rule of a Hebrew turn the memory voted on.

``--gate-off`` collects with the gate's thresholds off too: the shipped and refitted rules are then
measured behind the gate's bar for the language pair (``gated``), and the rule written weighs the gate's
probability instead (``gate``, ``…_memory_gate``; ``ragbot.chat.answerability``).

Not part of ``make bench`` (about 28 minutes on 2 cores); ``--from-turns`` refits in seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pickle
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

import numpy as np

from bench.answers.abstention import _logistic
from bench.answers.folds import read_folds
from bench.answers.query_tuning import E5, FOLDS
from bench.answers.question_memory import out_of_fold

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results" / "memory_rule.json"
FEATURES = (
    "dense_top",
    "tuned_top",
    "sentence_top",
    "coverage",
    "memory_best",
    "memory_agree",
    "memory_unanswered",
)
# A Hebrew question over the Hebrew pages: the same-language rule's candidate features and the memory's.
FEATURES_SAME = (
    "dense_top",
    "dense_gap",
    "bm25_gap",
    "agree",
    "coverage",
    "sentence_top",
    "memory_best",
    "memory_agree",
    "memory_unanswered",
)
L2 = 1.0
RULES = ("abstention_rule", "abstention_rule_cross_language", "abstention_rule_cross_language_tuned")


async def collect(language: str = "en", *, gate_off: bool = False) -> list[dict[str, Any]]:
    """Every read file's turns in ``language``, out of fold, with every rule's threshold off. Questions
    search as ``make run`` searches them: in its scripts with the tuned encoder (``TUNED_SCRIPTS``),
    refitted without the held fold. ``gate_off``: the gate's thresholds are off too (it still records
    each turn's probability, the ``gate`` feature)."""
    from ragbot.chat.pipeline import ChatPipeline
    from ragbot.dev.servers import TUNED_SCRIPTS
    from ragbot.evaluation.answers import DEFAULT_PAGES, RecordingRetriever, evaluate
    from ragbot.evaluation.sample_index import SampleIndex
    from ragbot.llms import build_llm
    from ragbot.prompts import PromptLibrary
    from ragbot.settings import get_chat_settings

    shipped = get_chat_settings()
    settings = shipped.model_copy(
        update={
            name: {**rule, "threshold": -1e9}
            for name in RULES
            if (rule := getattr(shipped, name)) is not None
        }
        | {"abstention_rule_cross_language_memory": None, "abstention_rule_memory": None}
        | ({"abstention_gate_path": _open_gate()} if gate_off else {})
    )
    llm = build_llm(settings=settings)
    index = await SampleIndex.build(DEFAULT_PAGES)
    turns: list[dict[str, Any]] = []
    started = time.perf_counter()
    try:
        folds = await read_folds(index, settings.document_text_field)
        files, every, vectors, encoder = folds.files, folds.every, folds.vectors, folds.encoder
        prompts = PromptLibrary(settings.prompts_dir)
        for fold in range(FOLDS):
            held = folds.held(fold)
            folds.refit(fold)
            for path in held:
                memory, _ = out_of_fold(path, files[path], every, vectors, folds.unanswered)
                overrides = {
                    "query_tuning_path": None,
                    "question_memory_path": None,
                    "query_tuning_scripts": list(TUNED_SCRIPTS),
                }
                retriever = await index.engine_with(overrides, memory=memory)
                retriever.engine.tuned = {E5: encoder}
                recorder = RecordingRetriever(retriever, text_field=settings.document_text_field)
                pipeline = ChatPipeline(llm=llm, retriever=recorder, prompts=prompts, settings=settings)
                asking = [q for q in files[path] if q.language == language]
                rows = (
                    await evaluate(pipeline=pipeline, recorder=recorder, questions=asking, modes=["quote"])
                )["quote"].rows
                turns += [{**asdict(r), "file": path, "fold": fold} for r in rows if r.evidence]
                sys.stdout.write(f"{Path(path).name}: {len(rows)} ({time.perf_counter() - started:.0f} s)\n")
                sys.stdout.flush()
    finally:
        await index.close()
        await llm.close()
    return turns


def _open_gate() -> Path:
    """The shipped gate with no thresholds, in a temporary file: it scores every turn and stops none."""
    import tempfile

    from ragbot.chat.pair_gate import load_gate

    raw = load_gate().as_json() | {"thresholds": {}}
    path = Path(tempfile.mkdtemp(prefix="ragbot-gate-")) / "pair_gate.json"
    path.write_text(json.dumps(raw), encoding="utf-8")
    return path


def with_gate(turns: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The turns with the gate's probability among their evidence (``gate``; 0 where it said nothing)."""
    return [{**t, "evidence": {**t["evidence"], "gate": float(t.get("gate") or 0.0)}} for t in turns]


def score(rule: dict[str, float], evidence: dict[str, float]) -> float:
    """A rule's score for one turn's evidence, as the chat scores it (``AbstentionRule.score``; a feature
    the evidence lacks reads 0)."""
    from ragbot.chat.answerability import AbstentionRule, Evidence

    known = {f.name: float(evidence.get(f.name, 0.0)) for f in fields(Evidence)}
    return AbstentionRule(**rule).score(Evidence(**known))


def counts(turns: Sequence[dict[str, Any]], answers: Sequence[bool]) -> tuple[int, int, int, int]:
    """Gold cited, answerable, abstained, unanswerable, when each turn's rule answers as ``answers`` says
    (the gate, the kind check and the quote mode still abstain where they did)."""
    cited = abstained = answerable = 0
    for turn, rule_answers in zip(turns, answers, strict=True):
        answered = rule_answers and not turn["abstained"]
        if turn["gold_page_id"] is not None:
            answerable += 1
            cited += answered and bool(turn["gold_cited"])
        else:
            abstained += not answered
    return cited, answerable, abstained, len(turns) - answerable


def best_threshold(turns: Sequence[dict[str, Any]], scores: np.ndarray) -> float:
    """The threshold with the best sum of the gold-cited and abstained shares (midway to the next lower
    score, so a turn at it answers)."""
    ranked = sorted(set(scores.tolist()))
    best: tuple[float, float] | None = None
    for i, t in enumerate(ranked):
        c, a, b, u = counts(turns, list(scores >= t))
        value = c / max(a, 1) + b / max(u, 1)
        if best is None or value > best[0] + 1e-12:
            best = (value, (t + ranked[i - 1]) / 2 if i else t - 1e-3)
    return best[1] if best else 0.0


def fit(turns: Sequence[dict[str, Any]], features: Sequence[str] = FEATURES) -> dict[str, float]:
    """The memory's rule fitted on ``turns``: weights on the turns nothing else abstained on (a gold page
    cited against unanswerable), the threshold on all."""
    used = [t for t in turns if not t["abstained"] and (t["gold_page_id"] is None or t["gold_cited"])]
    x = np.array([[float(t["evidence"].get(f, 0.0)) for f in features] for t in used])
    y = np.array([t["gold_page_id"] is not None for t in used], dtype=float)
    w, b = _logistic(x, y, l2=L2)
    rule = {"bias": round(b, 6), **{f: round(float(v), 6) for f, v in zip(features, w, strict=True)}}
    rule["threshold"] = round(best_threshold(turns, np.array([score(rule, t["evidence"]) for t in turns])), 6)
    return rule


def gated(turns: Sequence[dict[str, Any]], bar: float) -> list[dict[str, Any]]:
    """Turns collected with the gate off, as the gate at ``bar`` would have left them: a turn whose
    probability is under it abstained."""
    return [
        {**t, "abstained": t["abstained"] or (t.get("gate") is not None and t["gate"] < bar)} for t in turns
    ]


def measure(
    turns: Sequence[dict[str, Any]],
    shipped: dict[str, float],
    *,
    language: str = "en",
    features: Sequence[str] = FEATURES,
    gate_bar: float | None = None,
) -> dict[str, Any]:
    """Out-of-fold figures of the shipped rule and of the memory's rule (``memory_rule_<language>_…``),
    and the rule fitted on all (``memory_rule_<feature>``). ``gate_bar``: the turns were collected with
    the gate off; the shipped and memory rules are measured behind the gate at that bar, and the memory
    rule that weighs the gate's probability instead of a bar (``…_memory_gate``) is the one written."""
    behind = gated(turns, gate_bar) if gate_bar is not None else list(turns)
    weighing = with_gate(turns) if gate_bar is not None else []
    tally = {"shipped": np.zeros(4, int), "memory": np.zeros(4, int)}
    if weighing:
        tally["memory_gate"] = np.zeros(4, int)
    for fold in sorted({t["fold"] for t in turns}):
        train = [t for t in behind if t["fold"] != fold]
        test = [t for t in behind if t["fold"] == fold]
        rule = fit(train, features)
        tally["memory"] += counts(test, [score(rule, t["evidence"]) >= rule["threshold"] for t in test])
        tally["shipped"] += counts(
            test, [score(shipped, t["evidence"]) >= shipped["threshold"] for t in test]
        )
        if weighing:
            train = [t for t in weighing if t["fold"] != fold]
            test = [t for t in weighing if t["fold"] == fold]
            rule = fit(train, (*features, "gate"))
            tally["memory_gate"] += counts(
                test, [score(rule, t["evidence"]) >= rule["threshold"] for t in test]
            )
    tag = f"memory_rule_{language}"
    out: dict[str, Any] = {f"{tag}_turns": len(turns)}
    for name, (c, a, b, u) in tally.items():
        out[f"{tag}_gold_cited_{name}"] = round(c / max(a, 1), 4)
        out[f"{tag}_unanswerable_abstained_{name}"] = round(b / max(u, 1), 4)
        out[f"{tag}_cited_{name}"] = int(c)
        out[f"{tag}_abstained_{name}"] = int(b)
    out[f"{tag}_answerable"], out[f"{tag}_unanswerable"] = int(tally["memory"][1]), int(tally["memory"][3])
    final = fit(weighing, (*features, "gate")) if weighing else fit(behind, features)
    out.update({f"memory_rule_{k}": v for k, v in final.items()})
    return out


def main(argv: list[str] | None = None) -> None:
    """Collect (or read) the turns, measure out of fold and write the figures and the rule."""
    from ragbot.chat.pair_gate import load_gate
    from ragbot.settings.chat import ABSTENTION_RULE, ABSTENTION_RULE_CROSS_LANGUAGE_TUNED

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--turns", type=Path, help="keep the collected turns here (pickle)")
    parser.add_argument("--from-turns", type=Path, help="refit from turns kept earlier; answer nothing")
    parser.add_argument(
        "--language",
        choices=("en", "he"),
        default="en",
        help="en: the tuned cross-language turns; he: Hebrew",
    )
    parser.add_argument(
        "--gate-off",
        action="store_true",
        help="collect with the gate's thresholds off and fit the rule that weighs its probability instead",
    )
    parser.add_argument("--out", type=Path, help=f"default {RESULTS.name} (en), memory_rule_he.json (he)")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    if args.from_turns:
        turns = pickle.loads(args.from_turns.read_bytes())
    else:
        turns = asyncio.run(collect(args.language, gate_off=args.gate_off))
        if args.turns:
            args.turns.write_bytes(pickle.dumps(turns))
    gate = load_gate()
    if args.language == "en":
        bar = gate.threshold(True, tuned=True) if args.gate_off else None
        report = measure(turns, dict(ABSTENTION_RULE_CROSS_LANGUAGE_TUNED), gate_bar=bar)
    else:
        same = [t for t in turns if not t["evidence"].get("cross_language")]
        bar = gate.threshold(False) if args.gate_off else None
        report = measure(same, dict(ABSTENTION_RULE), language="he", features=FEATURES_SAME, gate_bar=bar)
    out = args.out or RESULTS.with_name(RESULTS.name if args.language == "en" else "memory_rule_he.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    sys.stdout.write(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
