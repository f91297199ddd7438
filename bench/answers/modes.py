"""Answer quality per mode on the sample pages' questions: what the hebrew report shows.

``ragbot eval-answers`` run as ``make run`` answers: the sample pages (``samples/kolzchut/pages.jsonl``)
indexed through the real indexing pipeline with the default definition into a fresh embedded store,
the questions of ``samples/kolzchut/answer_questions.json`` (12 Hebrew, 8 English, each with its gold
page), the embedded llama.cpp model (SmolLM2-135M) for ``grounded`` with answers capped at
``--max-tokens`` so the run fits in a few minutes. Keys (shares 0..1):

- ``answers_gold_cited``, ``answers_supported_sentences``, ``answers_loop_rate``: the mode ``make run``
  uses with the embedded LLM (``ragbot.dev.servers.EMBEDDED_LLM_MODE``), targets >= 0.8, >= 0.9, 0;
- ``quote_answers_*`` and ``grounded_answers_*``: the same for each mode, side by side, with
  ``*_abstained``, ``*_off_topic_abstained`` (the share of the 6 questions the pages do not answer
  that the mode abstained on) and ``*_seconds_per_answer``.

Run: ``uv run python -m bench.answers.modes [--max-tokens 96]``; writes bench/results/hebrew_answers.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results" / "hebrew_answers.json"
MAX_TOKENS = 96
FIGURES = (
    "gold_cited",
    "supported_sentences",
    "loop_rate",
    "abstained",
    "off_topic_abstained",
    "seconds_per_answer",
)


def measure(*, max_tokens: int = MAX_TOKENS) -> dict[str, float]:
    """Every question in quote and grounded mode (the embedded LLM); the flat figures."""
    from ragbot.dev.servers import EMBEDDED_LLM_MODE
    from ragbot.evaluation.answers import SAMPLE_PAGES, SAMPLE_QUESTIONS, load_questions, run_answers

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    run = asyncio.run(
        run_answers(
            questions=load_questions(SAMPLE_QUESTIONS),
            modes=["quote", "grounded"],
            pages_paths=[SAMPLE_PAGES],
            chat_overrides={"llm_backend": "llamacpp", "llm_max_tokens": max_tokens},
        )
    )
    out: dict[str, float] = {}
    for mode, fig in run.modes.items():
        summary = fig.summary()
        out.update({f"{mode}_answers_{name}": summary[name] for name in FIGURES})
    for name in ("gold_cited", "supported_sentences", "loop_rate"):
        out[f"answers_{name}"] = out[f"{EMBEDDED_LLM_MODE}_answers_{name}"]
    out["answers_questions"] = float(run.questions)
    out["answers_max_tokens"] = float(max_tokens)
    out["answers_index_s"] = round(run.index_seconds, 2)
    out["answers_total_s"] = round(run.seconds, 2)
    return out


def main(argv: list[str] | None = None) -> None:
    """Print the figures as JSON and write them to bench/results/hebrew_answers.json (or ``--out``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--max-tokens", type=int, default=MAX_TOKENS, help="grounded answers' token cap")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    logging.getLogger("ragbot.evaluation.answers").setLevel(logging.INFO)  # one line per answer
    figures = measure(max_tokens=args.max_tokens)
    text = json.dumps(figures, indent=2, ensure_ascii=False)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text + "\n", encoding="utf-8")
    sys.stdout.write(text + "\n")


if __name__ == "__main__":
    main()
