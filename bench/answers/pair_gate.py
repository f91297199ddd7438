"""Fit the abstention gate (``ragbot.chat.pair_gate``) on the Kol-Zchut question sets already read.

Every question of ``samples/kolzchut/abstention_questions.json`` (both halves) and of the sets held out
whole and read before the gate (``GATE_SETS``: fresh, fresh3 to fresh10) is answered in ``quote``
mode by the chat pipeline over a fresh embedded store of the sample pages, with the rule and the
answer-kind check as shipped and no gate. So each turn records what the gate would
read (the retriever's e5 vectors of the question and of each numbered paragraph, the sources' scores),
whether the rule and the kind check answered, and whether the answer cited a gold page.

A paragraph's label is whether its page answers the question. The gate is a logistic regression (numpy,
L2 on standardised features, ``L2``) over ``ragbot.chat.pair_gate.features``. Its probabilities for
each set come from a fit on the other sets (out of fold). Each language pair's threshold is then the
lowest that, with the rule, abstains on at least ``TARGET`` of that pair's unanswerable questions.
The final gate is fitted on every set and written to ``shared/ragbot/chat/pair_gate.json``; the
figures (out of fold) to ``bench/results/pair_gate_fit.json``.

``--read-sets`` fits on every set read so far (``bench/answers/sets.py``) instead, and
``--criterion balanced`` chooses each threshold for the best sum of the gold-cited and abstained shares
instead of ``TARGET`` abstained.

Another wiki fits its own from its own pages and question files (``--pages``, ``--questions``, each
file a fold; at least two) and points ``RAGBOT_CHAT_ABSTENTION_GATE_PATH`` at ``--gate-out``.

Run: ``uv run python -m bench.answers.pair_gate`` (about 13 minutes on 2 cores; ``--turns FILE`` keeps
what it collected and refits from it).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import logging
import pickle
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench.answers.sets import WHOLE_SETS, set_file

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results" / "pair_gate_fit.json"
MAIN_SET = "samples/kolzchut/abstention_questions.json"
# The sets held out whole that had been read when the gate was fitted (fresh11 was its check).
GATE_SETS: tuple[str, ...] = ("fresh", *(f"fresh{n}" for n in range(3, 11)))
L2 = 1000.0
TARGET = 0.9
MODEL = "multilingual-e5-small"


@dataclass(slots=True)
class Turn:
    """What one question's turn gave the gate, and how the shipped decision went."""

    set_name: str
    question_id: str
    answerable: bool
    x: np.ndarray  # features, one row per numbered paragraph
    labels: np.ndarray  # the paragraph's page answers the question
    cross_language: bool
    answered: bool  # by the rule and the answer-kind check
    gold_cited: bool


def _logistic(x: np.ndarray, y: np.ndarray, *, l2: float, steps: int = 50) -> tuple[np.ndarray, float]:
    """Weights and bias in raw units of an L2 logistic regression on standardised features (the bias
    not penalised), solved by Newton's method: the mean log-loss plus ``l2 / (2 n)`` times the squared
    weights, as scikit-learn's ``C = 1 / l2``."""
    mean, std = x.mean(axis=0), x.std(axis=0) + 1e-9
    a = np.hstack([(x - mean) / std, np.ones((len(x), 1))])
    penalty = np.full(a.shape[1], l2 / len(y))
    penalty[-1] = 0.0
    theta = np.zeros(a.shape[1])
    for _ in range(steps):
        p = 1.0 / (1.0 + np.exp(-np.clip(a @ theta, -50, 50)))
        gradient = a.T @ (p - y) / len(y) + penalty * theta
        hessian = (a * (p * (1 - p))[:, None]).T @ a / len(y) + np.diag(penalty + 1e-10)
        step = np.linalg.solve(hessian, gradient)
        theta -= step
        if float(np.max(np.abs(step))) < 1e-9:
            break
    w = theta[:-1]
    return w / std, float(theta[-1]) - float(np.sum(w * mean / std))


def _fit(turns: Sequence[Turn]) -> tuple[np.ndarray, float]:
    x = np.vstack([t.x for t in turns])
    y = np.concatenate([t.labels for t in turns]).astype(float)
    return _logistic(x, y, l2=L2)


def _best(turn: Turn, w: np.ndarray, b: float) -> float:
    z = np.clip(turn.x @ w + b, -50, 50)
    return float((1.0 / (1.0 + np.exp(-z))).max())


def out_of_fold(turns: Sequence[Turn]) -> dict[str, float]:
    """Each turn's best probability from a gate fitted on the other sets."""
    result: dict[str, float] = {}
    for held in sorted({t.set_name for t in turns}):
        w, b = _fit([t for t in turns if t.set_name != held])
        for t in turns:
            if t.set_name == held:
                result[t.question_id] = _best(t, w, b)
    return result


def judged(turns: Sequence[Turn], best: dict[str, float], bar: float) -> tuple[int, int]:
    """Gold cited (answerable turns) and abstained (unanswerable ones) with the gate at ``bar``."""
    cited = sum(t.answerable and t.answered and best[t.question_id] >= bar and t.gold_cited for t in turns)
    abstained = sum(not t.answerable and not (t.answered and best[t.question_id] >= bar) for t in turns)
    return cited, abstained


def by_pair(turns: Sequence[Turn]) -> dict[str, list[Turn]]:
    """The turns of each language pair (``ragbot.chat.pair_gate.LANGUAGE_PAIRS``), in order."""
    from ragbot.chat.pair_gate import LANGUAGE_PAIRS

    return {
        pair: [t for t in turns if LANGUAGE_PAIRS[int(t.cross_language)] == pair] for pair in LANGUAGE_PAIRS
    }


def figures(turns: Sequence[Turn], best: dict[str, float], thresholds: dict[str, float]) -> dict[str, Any]:
    """Gold cited and unanswerable abstained with the rule alone and with the gate, per language pair."""
    out: dict[str, Any] = {}
    for pair, mine in by_pair(turns).items():
        answerable = sum(t.answerable for t in mine)
        unanswerable = len(mine) - answerable
        for name, bar in (("rule", -np.inf), ("gated", thresholds.get(pair, -np.inf))):
            cited, abstained = judged(mine, best, bar)
            out[f"{pair}_{name}_gold_cited"] = round(cited / max(answerable, 1), 4)
            out[f"{pair}_{name}_unanswerable_abstained"] = round(abstained / max(unanswerable, 1), 4)
        out[f"{pair}_answerable"] = answerable
        out[f"{pair}_unanswerable"] = unanswerable
    return out


def threshold_for(unanswerable: Sequence[Turn], best: dict[str, float], target: float = TARGET) -> float:
    """The lowest threshold at which the rule and the gate abstain on ``target`` of these unanswerable
    turns: the midpoint below the score it stops at (0 when the rule alone does)."""
    passed = sorted(best[t.question_id] for t in unanswerable if t.answered)
    need = int(np.ceil(target * len(unanswerable))) - sum(not t.answered for t in unanswerable)
    if need <= 0:
        return 0.0
    need = min(need, len(passed))
    top = passed[need - 1]
    above = [p for p in passed if p > top]
    return float((top + above[0]) / 2) if above else float(top + 1e-6)


def balanced_threshold(turns: Sequence[Turn], best: dict[str, float]) -> float:
    """The threshold with the most gold cited plus unanswerable abstained, each a share of its own
    questions (both targets weigh the same); the lowest of equals. Candidates: no gate, and the midpoints
    between the probabilities of the turns the rule answered."""
    answerable = max(sum(t.answerable for t in turns), 1)
    unanswerable = max(sum(not t.answerable for t in turns), 1)
    scores = sorted({best[t.question_id] for t in turns if t.answered})
    candidates = [0.0, *((a + b) / 2 for a, b in itertools.pairwise(scores))]

    def value(bar: float) -> float:
        cited, abstained = judged(turns, best, bar)
        return cited / answerable + abstained / unanswerable

    return max(candidates, key=lambda bar: (value(bar), -bar))


# How a language pair's threshold is chosen from its turns: ``TARGET`` of the unanswerable questions
# abstained on (``threshold_for``), or the best sum of the gold-cited and abstained shares.
CRITERIA: dict[str, Callable[[Sequence[Turn], dict[str, float]], float]] = {
    "target": lambda turns, best: threshold_for([t for t in turns if not t.answerable], best),
    "balanced": balanced_threshold,
}


def choose_thresholds(
    turns: Sequence[Turn], best: dict[str, float], criterion: str = "target"
) -> dict[str, float]:
    """Per language pair with unanswerable questions: its threshold by ``CRITERIA[criterion]``."""
    return {
        pair: CRITERIA[criterion](mine, best)
        for pair, mine in by_pair(turns).items()
        if any(not t.answerable for t in mine)
    }


async def answer(pipeline: Any, retriever: Any, set_name: str, q: Any) -> tuple[Turn, dict[str, Any]]:
    """One question answered in quote mode by ``pipeline`` (its settings decide, the gate's included),
    what the gate would read of its paragraphs (``retriever``: a ``RecordingRetriever``), and the
    sources event's debug view."""
    from ragbot.chat.events import ChatRequest, DoneEvent, SourcesEvent
    from ragbot.chat.pair_gate import paragraph_features

    sources: list[Any] = []
    debug: dict[str, Any] = {}
    done: Any = None
    request = ChatRequest(question=q.question, mode="quote", language=q.language, channel="eval")
    async for event in pipeline.run(request):
        if isinstance(event, SourcesEvent):
            sources = list(event.sources)
            debug = dict(event.debug)
        elif isinstance(event, DoneEvent):
            done = event
    decision = dict(debug.get("answerability") or {})
    cross = bool((decision.get("evidence") or {}).get("cross_language"))
    gold = q.gold_pages
    # what the gate reads, for every turn: also those the rule abstained on, to learn from
    x = await paragraph_features(
        retriever=retriever.inner,
        model=MODEL,
        question=q.question,
        texts=[retriever.texts.get(s.doc_id) or s.title for s in sources],
        scores=[s.score for s in sources],
        cross_language=cross,
    )
    if x is None:
        x = np.empty((0, 0))
    labels = np.array([s.page_id in gold for s in sources][: len(x)], dtype=bool)
    cited = {s.page_id for s in (done.citations if done else [])}
    turn = Turn(
        set_name=set_name,
        question_id=f"{set_name}:{q.id}",
        answerable=q.gold_page_id is not None,
        x=x,
        labels=labels,
        cross_language=cross,
        answered=bool(done and not done.abstained),
        gold_cited=bool(gold & cited),
    )
    return turn, debug


async def collect(
    sets: Sequence[tuple[str, Path]], *, pages: Sequence[Path] | None = None, log: Any = sys.stderr
) -> list[Turn]:
    """Answer every question of ``sets`` in quote mode without the gate, and keep what it would read."""
    from ragbot.chat.pipeline import ChatPipeline
    from ragbot.evaluation.answers import DEFAULT_PAGES, RecordingRetriever, load_questions
    from ragbot.evaluation.sample_index import SampleIndex
    from ragbot.llms import build_llm
    from ragbot.prompts import PromptLibrary
    from ragbot.settings import get_chat_settings

    # the rule and the kind check decide as shipped; the gate's paragraphs are read below, every turn
    settings = get_chat_settings().model_copy(update={"abstention_gate_enabled": False})
    index = await SampleIndex.build(list(pages or DEFAULT_PAGES))
    turns: list[Turn] = []
    try:
        retriever = RecordingRetriever(await index.engine_with({}), text_field=settings.document_text_field)
        pipeline = ChatPipeline(
            llm=build_llm(settings=settings),
            retriever=retriever,
            prompts=PromptLibrary(settings.prompts_dir),
            settings=settings,
        )
        for name, path in sets:
            for q in load_questions(path):
                turns.append((await answer(pipeline, retriever, name, q))[0])
            log.write(f"{name}: {len(turns)} turns so far\n")
    finally:
        await index.close()
    return turns


def main(argv: list[str] | None = None) -> None:
    """Collect, fit out of fold, choose the thresholds, fit on all and write the gate and its figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gate-out", type=Path, default=None, help="where to write the gate file")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument(
        "--questions",
        type=Path,
        action="append",
        help="a question file (ragbot eval-answers' shape), each one a fold; repeat it (default: the "
        "Kol-Zchut sets read before the gate)",
    )
    parser.add_argument(
        "--pages", type=Path, action="append", help="a pages JSONL to index (default: the Kol-Zchut samples)"
    )
    parser.add_argument(
        "--turns", type=Path, default=None, help="keep the collected turns here (pickle), reuse them if there"
    )
    parser.add_argument(
        "--read-sets",
        action="store_true",
        help="fit on every Kol-Zchut set read so far (bench/answers/sets.py), not only GATE_SETS",
    )
    parser.add_argument(
        "--criterion",
        choices=sorted(CRITERIA),
        default="target",
        help="how each language pair's threshold is chosen (default: target, TARGET abstained)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    from ragbot.chat.pair_gate import PACKAGED_GATE, PairGate

    started = time.perf_counter()
    names = WHOLE_SETS if args.read_sets else GATE_SETS
    sets = [("main", ROOT / MAIN_SET), *((name, ROOT / set_file(name)) for name in names)]
    if args.questions:
        sets = [(path.stem, path) for path in args.questions]
    if len({name for name, _ in sets}) < 2:
        parser.error("give at least two --questions files with different names: each is a fold")
    if args.turns is not None and args.turns.exists():
        turns = pickle.loads(args.turns.read_bytes())  # our own file, written below
    else:
        turns = asyncio.run(collect(sets, pages=args.pages))
        if args.turns is not None:
            args.turns.write_bytes(pickle.dumps(turns))
    usable = [t for t in turns if len(t.x)]
    best = out_of_fold(usable)
    for t in turns:  # no paragraph to read: the turn abstains (it has no sources either)
        best.setdefault(t.question_id, -1.0)
    thresholds = choose_thresholds(turns, best, args.criterion)
    w, b = _fit(usable)
    gate = PairGate(w, b, thresholds, MODEL)
    target = args.gate_out or PACKAGED_GATE
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(gate.as_json()) + "\n", encoding="utf-8")
    report = {
        "sets": list(dict.fromkeys(t.set_name for t in turns)),
        "criterion": args.criterion,
        "questions": len(turns),
        "pairs_labelled": int(sum(len(t.x) for t in usable)),
        "l2": L2,
        "target": TARGET,
        "thresholds": {k: round(v, 6) for k, v in thresholds.items()},
        **figures(turns, best, thresholds),
        "seconds": round(time.perf_counter() - started, 1),
    }
    args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    sys.stdout.write(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
