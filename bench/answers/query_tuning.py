"""How far tuning e5's query side on a wiki's own questions lifts English answers, the rule on (issue 29).

Leave-files-out over the Kol-Zchut question files already read (``READ_FILES``): the files, sorted by
name, are dealt into five folds. For each fold, ``ragbot.embedders.query_tuning.fit_biases`` fits the
bias terms of the dequantized multilingual-e5-small on the other files' answerable (question, gold
page) pairs against the e5 passage vectors of every sample paragraph. The fold's English questions
(the tuned encoder serves Latin-script questions only, so the Hebrew ones answer as shipped) are then
answered in quote mode as shipped (the rule, the answer-kind check and the gate on), once with the
retriever's e5 list searched untuned and once tuned (``ragbot.retrieval.tuned``: the tuned list is
fused in the untuned one's place, the untuned one's cosines stay for the rule).

``bench/results/query_tuning.json``: ``query_tuning_en_gold_cited`` and ``_tuned``,
``query_tuning_en_unanswerable_abstained`` and ``_tuned``, ``query_tuning_en_answerable_abstained`` and
``_tuned``, the counts, and per fold ``query_tuning_fold<k>_en_cited`` / ``_abstained`` (and ``_tuned``).
Not part of ``make bench`` (about 10 minutes on 2 cores).
Run: ``uv run python -m bench.answers.query_tuning``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from bench.answers.sets import WHOLE_SETS, set_file

ROOT = Path(__file__).resolve().parents[2]
READ_FILES = ("samples/kolzchut/abstention_questions.json", *(set_file(name) for name in WHOLE_SETS))
FOLDS = 5
E5 = "multilingual-e5-small"


async def run() -> dict[str, float]:
    """Every fold's English answers, untuned and tuned; the figures."""
    from ragbot.chat.pipeline import ChatPipeline
    from ragbot.embedders.query_tuning import TunedE5Queries, fit_biases, shipped_e5
    from ragbot.evaluation.answers import DEFAULT_PAGES, RecordingRetriever, evaluate, load_questions
    from ragbot.evaluation.query_tuning import passage_matrix
    from ragbot.evaluation.sample_index import SampleIndex
    from ragbot.llms import build_llm
    from ragbot.prompts import PromptLibrary
    from ragbot.settings import get_chat_settings

    settings = get_chat_settings()
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
            pairs = [
                (q.question, q.gold_pages)
                for name in names
                if name not in held
                for q in files[name]
                if q.gold_page_id is not None
            ]
            started = time.perf_counter()
            e5._model.load_state_dict(start)
            fit_biases(e5, pairs, passages, page_ids)
            print(f"fold {fold}: fitted on {len(pairs)} questions in {time.perf_counter() - started:.0f} s")
            questions = [q for name in sorted(held) for q in files[name] if q.language == "en"]
            for way, tuned in (("", {}), ("_tuned", {E5: encoder})):
                engine.tuned = dict(tuned)
                recorder = RecordingRetriever(retriever, text_field=settings.document_text_field)
                pipeline = ChatPipeline(llm=llm, retriever=recorder, prompts=prompts, settings=settings)
                rows = (
                    await evaluate(pipeline=pipeline, recorder=recorder, questions=questions, modes=["quote"])
                )["quote"].rows
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
        base, _, way = key.partition("_tuned") if key.endswith("_tuned") else (key, "", "")
        suffix = "_tuned" if key.endswith("_tuned") else ""
        figures[f"query_tuning_en_{names_out[base]}{suffix}"] = round(hits / max(total, 1), 4)
        figures[f"query_tuning_en_{'unanswerable' if base == 'abstained' else 'answerable'}"] = float(total)
    return dict(sorted(figures.items()))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results/query_tuning.json")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    started = time.perf_counter()
    figures: Mapping[str, float] = asyncio.run(run())
    args.out.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(figures, indent=2))
    print(f"{time.perf_counter() - started:.0f} s; wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
