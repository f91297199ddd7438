"""English questions over the Hebrew sample pages: where the retriever ranks the page that answers them.

An answer can cite the right page only when retrieval finds it, so this bounds ``answers_gold_cited`` for
English questions. Every answerable English question of the Kol-Zchut question sets
(``samples/kolzchut/abstention_questions*.json``) is asked of one embedded index of the sample pages,
with MiniLM left out for English (``HEBREW_CORPUS_LANGUAGE_WEIGHTS``, as the answers benchmark does),
three ways: untranslated (``none``), translated word by word with each word's nearest corpus word
(``nearest``, ``RAGBOT_RETRIEVER_TRANSLATION_CONTEXT=0``) and with the question choosing among its
words' best five (``context``, the default 0.5). The Hebrew answerable questions run untranslated as
the reference. ``bench/results/crosslingual.json``: per set and way, ``crosslingual_<set>_<way>_top1``,
``_top3`` and ``_mrr`` of the gold page (or another page that answers) among the result pages.

Run: ``uv run python -m bench.answers.crosslingual``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.answers.sets import WHOLE_SETS, set_file

ROOT = Path(__file__).resolve().parents[2]
SETS: Mapping[str, str] = {
    "tune": "abstention_questions.json:tune",
    "held_out": "abstention_questions.json:held_out",
    **{name: Path(set_file(name)).name for name in WHOLE_SETS},
}


def figures(ranks: Sequence[int], prefix: str) -> dict[str, float]:
    """First, top-3 and mean reciprocal rank of the gold page (rank 0: not found)."""
    n = max(len(ranks), 1)
    return {
        f"{prefix}_top1": round(sum(r == 1 for r in ranks) / n, 4),
        f"{prefix}_top3": round(sum(0 < r <= 3 for r in ranks) / n, 4),
        f"{prefix}_mrr": round(sum(1 / r for r in ranks if r) / n, 4),
        f"{prefix}_questions": float(len(ranks)),
    }


async def run(sets: Mapping[str, str]) -> dict[str, Any]:
    """Every set's figures, over one index of the sample pages."""
    from ragbot.evaluation.answers import DEFAULT_PAGES, half_of, load_questions
    from ragbot.evaluation.sample_index import SampleIndex
    from ragbot.schemas.retrieval import RetrieveRequest
    from ragbot.settings.retrieval import HEBREW_CORPUS_LANGUAGE_WEIGHTS

    weights: dict[str, Any] = {"language_weights": HEBREW_CORPUS_LANGUAGE_WEIGHTS}
    translated = {**weights, "translate_queries_to": "he", "translation_bm25": True}
    ways = {
        "none": weights,
        "nearest": {**translated, "translation_context": 0.0},
        "context": {**translated, "translation_context": 0.5},
    }
    out: dict[str, Any] = {}
    index = await SampleIndex.build(DEFAULT_PAGES)
    try:
        engines = {way: await index.engine_with(overrides) for way, overrides in ways.items()}
        for name, spec in sets.items():
            file, _, half = spec.partition(":")
            path = ROOT / "samples" / "kolzchut" / file
            if not path.is_file():
                continue
            questions = load_questions(path)
            if half:
                questions = half_of(questions, "tune" if half == "tune" else "held_out")
            answerable = [q for q in questions if q.gold_page_id is not None]
            for language, asked in (("en", [*ways]), ("he", ["none"])):
                mine = [q for q in answerable if q.language == language]
                for way in asked:
                    ranks: list[int] = []
                    for q in mine:
                        response = await engines[way].retrieve(RetrieveRequest(query=q.question))
                        pages = list(dict.fromkeys(d.page_id for d in response.documents))
                        gold = {q.gold_page_id, *(q.other_gold_page_ids or [])}
                        ranks.append(next((i + 1 for i, p in enumerate(pages) if p in gold), 0))
                    label = way if language == "en" else "he"
                    out.update(figures(ranks, f"crosslingual_{name}_{label}"))
    finally:
        await index.close()
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "crosslingual.json")
    parser.add_argument("--sets", nargs="*", default=list(SETS), choices=list(SETS))
    args = parser.parse_args(argv)
    result = asyncio.run(run({name: SETS[name] for name in args.sets}))
    text = json.dumps(result, indent=2, sort_keys=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text + "\n", encoding="utf-8")
    sys.stdout.write(text + "\n")


if __name__ == "__main__":
    main()
