"""Bench: the question memory (``ragbot.retrieval.memory``) out of fold over the question files read.

Each read file is answered as ``make run`` answers it (quote, query tuning on, the shipped gate),
twice over one index: without a question memory, and with one holding every answerable question of
the *other* read files. Prints and writes (flat JSON) gold cited and unanswerable abstained per
language for both. A question whose text is in the answered file is never remembered for it.

    python -m bench.answers.question_memory [--files F ...] [--out bench/results/question_memory.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bench.answers.query_tuning import READ_FILES

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results" / "question_memory.json"
TUNED_QUERIES = "samples/kolzchut/e5-queries.npz"
MODEL = "multilingual-e5-small"
VARIANTS = ("without", "with")


def file_keys(name: str, counts: dict[str, Any]) -> dict[str, int]:
    """One file's counts as flat keys: ``question_memory_<set>_<variant>_<count>`` (the first file's set
    is ``main``)."""
    tag = "question_memory_" + (
        name.removesuffix(".json").removeprefix("abstention_questions").lstrip("_") or "main"
    )
    out = {f"{tag}_{variant}_{key}": value for variant in VARIANTS for key, value in counts[variant].items()}
    out[f"{tag}_remembered"] = counts["remembered"]
    return out


def out_of_fold(
    path: str,
    asked: Sequence[Any],
    every: Mapping[str, Sequence[Any]],
    vectors: Mapping[str, np.ndarray],
    unanswered: Mapping[str, Sequence[Any]] | None = None,
) -> tuple[Any, int]:
    """A memory of every other read file's answerable questions for the file at ``path`` (none whose
    text is ``asked`` in it), and of their unanswerable ones (``unanswered``, each file's) as questions
    the wiki did not answer, as ``ragbot remember-questions`` writes it; and how many answerable ones it
    holds."""
    from ragbot.evaluation.question_memory import distinct, question_key, remember

    keys = {question_key(q.question) for q in asked}

    def others(by_file: Mapping[str, Sequence[Any]]) -> list[Any]:
        return distinct((q for other, qs in by_file.items() if other != path for q in qs), skip=keys)

    kept, far = others(every), others(unanswered or {})
    memory = remember(
        kept,
        np.stack([vectors[q.question] for q in kept]),
        model=MODEL,
        not_answered=far,
        not_answered_vectors=np.stack([vectors[q.question] for q in far]) if far else None,
    )
    return memory, len(kept)


def shares(rows: Sequence[Any], language: dict[str, str], lang: str | None) -> dict[str, int]:
    """Counts for one language (None: both): answerable, gold cited, unanswerable, abstained on."""
    mine = [r for r in rows if lang is None or language[r.id] == lang]
    gold = [r for r in mine if r.gold_page_id is not None]
    off = [r for r in mine if r.gold_page_id is None]
    return {
        "answerable": len(gold),
        "gold_cited": sum(r.gold_cited for r in gold),
        "unanswerable": len(off),
        "abstained": sum(r.abstained for r in off),
    }


async def measure(files: Sequence[str]) -> dict[str, Any]:
    """Answer each file without and with the other files' memory; the counts per variant and language."""
    from ragbot.chat.pipeline import ChatPipeline
    from ragbot.evaluation.answers import DEFAULT_PAGES, RecordingRetriever, evaluate, load_questions
    from ragbot.evaluation.question_memory import answered, unanswered
    from ragbot.evaluation.sample_index import SampleIndex
    from ragbot.llms import build_llm
    from ragbot.prompts import PromptLibrary
    from ragbot.settings import get_chat_settings

    settings = get_chat_settings()
    llm = build_llm(settings=settings)
    index = await SampleIndex.build(DEFAULT_PAGES)
    started = time.perf_counter()
    per_file: dict[str, int] = {}
    rows: dict[str, list[Any]] = {variant: [] for variant in VARIANTS}
    language: dict[str, str] = {}
    try:
        every = {path: answered([ROOT / path]) for path in READ_FILES}
        far = {path: unanswered([ROOT / path]) for path in READ_FILES}
        texts = sorted({q.question for qs in (*every.values(), *far.values()) for q in qs})
        vectors = dict(zip(texts, index.queries[MODEL].embed_queries(texts), strict=True))
        prompts = PromptLibrary(settings.prompts_dir)
        overrides = {"query_tuning_path": ROOT / TUNED_QUERIES, "question_memory_path": None}
        for path in files:
            questions = load_questions(ROOT / path)
            for q in questions:
                language[q.id] = q.language
            memory, remembered = out_of_fold(path, questions, every, vectors, far)
            counts: dict[str, Any] = {}
            for variant in VARIANTS:
                engine = await index.engine_with(overrides, memory=memory if variant == "with" else None)
                recorder = RecordingRetriever(engine, text_field=settings.document_text_field)
                pipeline = ChatPipeline(llm=llm, retriever=recorder, prompts=prompts, settings=settings)
                figures = await evaluate(
                    pipeline=pipeline, recorder=recorder, questions=questions, modes=["quote"]
                )
                rows[variant] += figures["quote"].rows
                counts[variant] = shares(figures["quote"].rows, language, None)
            counts["remembered"] = remembered
            per_file.update(file_keys(Path(path).name, counts))
            sys.stdout.write(
                f"{Path(path).name}: {json.dumps(counts)} ({time.perf_counter() - started:.0f} s)\n"
            )
            sys.stdout.flush()
    finally:
        await index.close()
        await llm.close()
    flat: dict[str, Any] = {}
    for variant, got in rows.items():
        for lang in (None, "he", "en"):
            c = shares(got, language, lang)
            tag = f"question_memory_{variant}" + (f"_{lang}" if lang else "")
            flat[f"{tag}_gold_cited"] = round(c["gold_cited"] / max(c["answerable"], 1), 4)
            flat[f"{tag}_unanswerable_abstained"] = round(c["abstained"] / max(c["unanswerable"], 1), 4)
    return {
        **flat,
        "question_memory_files": len(files),
        "question_memory_questions": len(language),
        "question_memory_seconds": round(time.perf_counter() - started, 1),
        **per_file,
    }


def main(argv: list[str] | None = None) -> None:
    """Measure out of fold and write the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--files", nargs="+", default=list(READ_FILES), help="read question files to answer")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    unknown = sorted(set(args.files) - set(READ_FILES))
    if unknown:
        raise SystemExit(f"not a read question file: {unknown} (the memory is measured out of fold on those)")
    report = asyncio.run(measure(args.files))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    sys.stdout.write(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
