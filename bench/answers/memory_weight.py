"""Bench: where the question memory's votes put the gold page, and the weight of a near neighbour.

Every question of the read Kol-Zchut files is retrieved as the chat retrieves it, out of fold twice
over: the tuned query encoder fitted without the file's fold (``query_tuning.py``'s five folds) and the
question memory holding the other files' questions only (``question_memory.out_of_fold``). Each turn
keeps the fused list *before* the votes and the memory's votes, so any weight is replayed exactly with
the retriever's own ``vote_weight`` and ``with_votes`` (``ragbot.retrieval.memory``).

It prints and writes, per language, how often the gold page comes first among the retrieved pages
(the ceiling of ``gold cited``: an answer cites the page its search put first) without the memory, with
fixed weights, and with the near weight ``0.5 + b x max(0, nearest cosine - c)`` chosen per fold on the
other folds. The choice maximises the gold-first share less ``AGREEMENT_COST`` x the share of
unanswerable turns whose first page is the nearest remembered question's page (the memory's abstention
rule reads that as agreement).

    python -m bench.answers.memory_weight [--scripts latin hebrew] [--turns FILE] [--from-turns FILE]
        [--out FILE]

``--scripts`` names the scripts whose questions search with the tuned encoder
(``RAGBOT_RETRIEVER_QUERY_TUNING_SCRIPTS``; Latin only, as shipped, by default).

Not part of ``make bench`` (about 25 minutes on 2 cores); ``--from-turns`` replays in seconds.
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
from pathlib import Path
from typing import Any

from bench.answers.folds import read_folds
from bench.answers.query_tuning import E5, FOLDS
from bench.answers.question_memory import out_of_fold

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results" / "memory_weight.json"
BASE = 0.5
FIXED = (0.0, 0.3, 0.5, 0.75, 1.0, 1.5)
NEAR = (0.85, 0.88, 0.9, 0.93, 0.95)
NEAR_WEIGHTS = (2.0, 5.0, 10.0, 20.0)
AGREEMENT_COST = 0.25
Scheme = tuple[float, float, float]  # (weight, near, near_weight)


async def collect(scripts: Sequence[str] = ("latin",)) -> list[dict[str, Any]]:
    """Every read file's turns, out of fold: fused list before the votes, the votes, gold page (questions
    in ``scripts`` searched with the tuned encoder)."""
    from ragbot.evaluation.answers import DEFAULT_PAGES
    from ragbot.evaluation.sample_index import SampleIndex
    from ragbot.schemas.retrieval import RetrieveRequest
    from ragbot.settings import get_chat_settings

    chat = get_chat_settings()
    index = await SampleIndex.build(DEFAULT_PAGES)
    turns: list[dict[str, Any]] = []
    started = time.perf_counter()
    try:
        folds = await read_folds(index, chat.document_text_field)
        for fold in range(FOLDS):
            folds.refit(fold)
            for path in folds.held(fold):
                memory, _ = out_of_fold(path, folds.files[path], folds.every, folds.vectors, folds.unanswered)
                retriever = await index.engine_with(
                    {
                        "query_tuning_path": None,
                        "question_memory_path": None,
                        "query_tuning_scripts": list(scripts),
                    }
                )
                retriever.engine.tuned = {E5: folds.encoder}
                for q in folds.files[path]:
                    got = await retriever.engine.retrieve(
                        RetrieveRequest(
                            query=q.question,
                            retrieval_size=chat.retrieval_size,
                            paragraphs_per_page=list(chat.paragraphs_per_page),
                        )
                    )
                    votes = memory.votes(folds.vectors[q.question])
                    turns.append(
                        {
                            "file": path,
                            "fold": fold,
                            "language": q.language,
                            "gold": q.gold_page_id,
                            "fused": [(row.page_id, row.score) for row in got.debug.fused],
                            "neighbours": [
                                (n.question, n.pages, n.cosine, n.weight) for n in votes.neighbours
                            ],
                            "shares": votes.shares,
                        }
                    )
                seconds = time.perf_counter() - started
                sys.stdout.write(f"{Path(path).name}: {len(folds.files[path])} ({seconds:.0f} s)\n")
                sys.stdout.flush()
    finally:
        await index.close()
    return turns


def first_page(turn: dict[str, Any], scheme: Scheme) -> int:
    """The first retrieved page after the votes, weighted as the retriever weighs them."""
    from ragbot.retrieval.fusion import FusedHit
    from ragbot.retrieval.memory import Neighbour, Votes, vote_weight, with_votes

    fused = [
        FusedHit(doc_id=str(i), score=s, source={"page_id": p}) for i, (p, s) in enumerate(turn["fused"])
    ]
    votes = Votes(neighbours=[Neighbour(*n) for n in turn["neighbours"]], shares=turn["shares"])
    return with_votes(fused, votes, vote_weight(votes, *scheme))[0].page_id


def tally(turns: Sequence[dict[str, Any]], scheme: Scheme) -> dict[str, int]:
    """Answerable turns, gold first; unanswerable turns, first page the nearest remembered one's."""
    out = dict.fromkeys(("answerable", "gold_first", "unanswerable", "agree"), 0)
    for turn in turns:
        if not turn["fused"]:
            continue
        first = first_page(turn, scheme)
        if turn["gold"] is not None:
            out["answerable"] += 1
            out["gold_first"] += first == turn["gold"]
        else:
            out["unanswerable"] += 1
            out["agree"] += bool(turn["neighbours"]) and first == turn["neighbours"][0][1][0]
    return out


def objective(counts: dict[str, int]) -> float:
    """The gold-first share less ``AGREEMENT_COST`` x the agreement share on unanswerable turns."""
    return counts["gold_first"] / max(counts["answerable"], 1) - AGREEMENT_COST * counts["agree"] / max(
        counts["unanswerable"], 1
    )


def schemes() -> list[Scheme]:
    """The candidates: fixed weights, then 0.5 plus a near weight (listed first wins a tie)."""
    return [(w, 1.0, 0.0) for w in FIXED if w > 0] + [(BASE, c, b) for b in NEAR_WEIGHTS for c in NEAR]


def measure(turns: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Gold first per language for fixed weights and out of fold for the chosen scheme, as flat keys."""
    report: dict[str, Any] = {"memory_weight_turns": len(turns)}
    groups = {
        "all": list(turns),
        **{lang: [t for t in turns if t["language"] == lang] for lang in ("he", "en")},
    }
    for name, group in groups.items():
        for w in FIXED:
            c = tally(group, (w, 1.0, 0.0))
            report[f"memory_weight_{name}_fixed_{w}_gold_first"] = c["gold_first"]
            report[f"memory_weight_{name}_fixed_{w}_agree"] = c["agree"]
        report[f"memory_weight_{name}_answerable"] = c["answerable"]
        report[f"memory_weight_{name}_unanswerable"] = c["unanswerable"]
    held = dict.fromkeys(("answerable", "gold_first", "unanswerable", "agree"), 0)
    chosen: list[str] = []
    for fold in sorted({t["fold"] for t in turns}):
        train = [t for t in turns if t["fold"] != fold]
        best = max(schemes(), key=lambda s: objective(tally(train, s)))
        chosen.append(f"{best[0]}+{best[2]}x(cos-{best[1]})")
        for key, value in tally([t for t in turns if t["fold"] == fold], best).items():
            held[key] += value
    report |= {f"memory_weight_oof_{key}": value for key, value in held.items()}
    report["memory_weight_oof_choices"] = ",".join(chosen)
    for name, group in groups.items():
        c = tally(group, (BASE, 0.9, 5.0))
        report[f"memory_weight_{name}_shipped_gold_first"] = c["gold_first"]
        report[f"memory_weight_{name}_shipped_agree"] = c["agree"]
    return report


def main(argv: list[str] | None = None) -> None:
    """Collect (or load) the turns, replay the weights, write the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--turns", type=Path, help="also keep the collected turns here (pickle)")
    parser.add_argument("--from-turns", type=Path, help="replay turns kept by --turns instead of collecting")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument(
        "--scripts", nargs="+", default=["latin"], help="scripts searched with the tuned encoder"
    )
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    if args.from_turns:
        turns = pickle.loads(args.from_turns.read_bytes())
    else:
        turns = asyncio.run(collect(args.scripts))
        if args.turns:
            args.turns.write_bytes(pickle.dumps(turns))
    report = measure(turns)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    sys.stdout.write(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
