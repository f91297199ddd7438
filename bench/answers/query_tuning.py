"""How far tuning e5's query side on a wiki's own questions lifts English answers (issue 29, exploration).

Leave-files-out over the ten Kol-Zchut question files read before fresh11: the files, sorted by name,
are dealt into five folds. For each fold, the bias terms of the dequantized multilingual-e5-small
(``ragbot.embedders.e5_torch``) are fitted on the other files' answerable (question, gold page) pairs:
each question's softmax (temperature 0.02) over the e5 passage vectors of every sample paragraph, the
paragraphs of its gold pages as positives, 3 epochs of batch 16. The fold's questions are then answered
in quote mode with the abstention rule off, once as shipped and once with the tuned encoder embedding
English (Latin-script) questions for retrieval; sentence scoring keeps the shipped e5. The paragraph
vectors are the index's own in both runs.

``bench/results/query_tuning.json``: ``query_tuning_<lang>_gold_cited`` and ``_gold_cited_tuned``, with
the answerable questions' count; per fold ``query_tuning_fold<k>_en_cited`` and ``_cited_tuned``.
Not part of ``make bench`` (about 15 minutes on 2 cores).
Run: ``uv run python -m bench.answers.query_tuning``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
READ_FILES = (
    "abstention_questions.json",
    "abstention_questions_fresh.json",
    *(f"abstention_questions_fresh{n}.json" for n in range(3, 11)),
)
FOLDS = 5
TEMPERATURE = 0.02
EPOCHS = 3
BATCH = 16
LEARNING_RATE = 1e-3
E5 = "multilingual-e5-small"


class QueryTuner:
    """The dequantized e5 whose bias terms are fitted on (question, gold page) pairs."""

    def __init__(self) -> None:
        from ragbot.embedders.e5_torch import TorchE5, packaged_e5_file

        self.e5 = TorchE5(packaged_e5_file(), device="cpu", precision="float32", onnx_queries=False)
        self.start = {k: v.clone() for k, v in self.e5._model.state_dict().items()}

    def _encode(self, texts: Sequence[str], *, train: bool) -> Any:
        """Query vectors with gradients for the fit (``TorchE5.encode`` runs without them)."""
        import torch

        from ragbot.embedders.e5_torch import QUERY_PREFIX

        tok = self.e5.tokenizer
        rows = [[tok.bos, *ids[:126], tok.eos] for ids in tok.content_ids([QUERY_PREFIX + t for t in texts])]
        width = max(len(r) for r in rows)
        ids = np.array([r + [0] * (width - len(r)) for r in rows], dtype=np.int64)
        mask = np.array([[1] * len(r) + [0] * (width - len(r)) for r in rows], dtype=np.int64)
        embeds = torch.from_numpy(self.e5._embeddings(ids))
        attention = torch.from_numpy(mask)
        with torch.set_grad_enabled(train):
            hidden = self.e5._model(inputs_embeds=embeds, attention_mask=attention).last_hidden_state
            weights = attention.unsqueeze(-1).float()
            pooled = (hidden * weights).sum(1) / weights.sum(1)
            return torch.nn.functional.normalize(pooled, dim=-1)

    def fit(self, pairs: Sequence[tuple[str, set[int]]], passages: np.ndarray, pages: np.ndarray) -> None:
        """Fit the bias terms from the shipped weights (seeded, so a fold's fit is repeatable)."""
        import torch

        torch.manual_seed(0)
        order = random.Random(0)
        model = self.e5._model
        model.load_state_dict(self.start)
        model.train()
        biases = [p for n, p in model.named_parameters() if n.endswith("bias")]
        optimiser = torch.optim.AdamW(biases, lr=LEARNING_RATE, weight_decay=0.0)
        matrix = torch.from_numpy(passages)
        shuffled = list(pairs)
        for _ in range(EPOCHS):
            order.shuffle(shuffled)
            for i in range(0, len(shuffled), BATCH):
                batch = shuffled[i : i + BATCH]
                logits = self._encode([q for q, _ in batch], train=True) @ matrix.T / TEMPERATURE
                positive = torch.from_numpy(np.array([np.isin(pages, sorted(gold)) for _, gold in batch]))
                loss: Any = -(
                    torch.logsumexp(logits.masked_fill(~positive, -1e9), 1) - torch.logsumexp(logits, 1)
                ).mean()
                optimiser.zero_grad()
                loss.backward()
                optimiser.step()
        model.eval()

    def queries(self, texts: Sequence[str]) -> np.ndarray:
        """Tuned query vectors, float32 (``TorchE5.encode`` runs the tuned model)."""
        return self.e5.encode(list(texts), is_query=True)


class TunedEnglish:
    """An embedder that answers Latin-script queries with the tuned encoder and the rest as shipped."""

    def __init__(self, base: Any, tuner: QueryTuner) -> None:
        self.base, self.tuner, self.name = base, tuner, base.name

    def __getattr__(self, name: str) -> Any:
        return getattr(self.base, name)

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        from ragbot.text.language import detect_language

        out = np.array(self.base.embed_queries(texts), dtype=np.float32)
        latin = [i for i, t in enumerate(texts) if detect_language(t).script == "latin"]
        if latin:
            out[latin] = self.tuner.queries([texts[i] for i in latin])
        return out


async def run() -> dict[str, float]:
    """Every fold's answers, as shipped and tuned; the figures."""
    from ragbot.chat.pipeline import ChatPipeline
    from ragbot.chat.retriever import EngineRetriever
    from ragbot.evaluation.answers import (
        DEFAULT_PAGES,
        AnswerQuestion,
        RecordingRetriever,
        evaluate,
        load_questions,
    )
    from ragbot.evaluation.sample_index import SampleIndex, load_pages
    from ragbot.llms import build_llm
    from ragbot.prompts import PromptLibrary
    from ragbot.retrieval.similarity import similarity
    from ragbot.schemas.similarity import SimilarityRequest, SimilarityResponse
    from ragbot.settings import get_chat_settings

    settings = get_chat_settings().model_copy(update={"abstention_enabled": False})
    llm = build_llm(settings=settings)
    prompts = PromptLibrary(settings.prompts_dir)
    files = {name: load_questions(ROOT / "samples/kolzchut" / name) for name in sorted(READ_FILES)}
    index = await SampleIndex.build(DEFAULT_PAGES)
    tuner = QueryTuner()
    figures: dict[str, float] = {}
    counts: dict[str, list[int]] = {}
    try:
        engine = (await index.engine_with({})).engine
        shipped = dict(engine.embedders)
        texts: list[str] = []
        pages: list[int] = []
        for page in {int(r["page_id"]) for path in DEFAULT_PAGES for r in load_pages(path)}:
            for doc in await engine.page_documents(page):
                texts.append(str(doc.get(settings.document_text_field) or ""))
                pages.append(page)
        passages = tuner.e5.encode(texts, is_query=False)
        page_ids = np.array(pages)
        tuned = {**shipped, E5: TunedEnglish(shipped[E5], tuner)}

        class ShippedSimilarity(EngineRetriever):
            async def similarity(self, request: SimilarityRequest) -> SimilarityResponse:
                return await similarity(
                    embedders=shipped, request=request, timeout_s=self.engine.defaults.embed_timeout_s
                )

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
            tuner.fit(pairs, passages, page_ids)
            print(f"fold {fold}: fitted on {len(pairs)} questions in {time.perf_counter() - started:.0f} s")
            questions: list[AnswerQuestion] = [q for name in sorted(held) for q in files[name]]
            for way, embedders in (("", shipped), ("_tuned", tuned)):
                engine.embedders = embedders
                recorder = RecordingRetriever(
                    ShippedSimilarity(engine), text_field=settings.document_text_field
                )
                pipeline = ChatPipeline(llm=llm, retriever=recorder, prompts=prompts, settings=settings)
                rows = (
                    await evaluate(pipeline=pipeline, recorder=recorder, questions=questions, modes=["quote"])
                )["quote"].rows
                language = {q.id: q.language for q in questions}
                for lang in ("en", "he"):
                    cited = [
                        r.gold_cited for r in rows if r.gold_page_id is not None and language[r.id] == lang
                    ]
                    tally = counts.setdefault(f"{lang}{way}", [0, 0])
                    tally[0] += sum(cited)
                    tally[1] += len(cited)
                    if lang == "en":
                        figures[f"query_tuning_fold{fold}_en_cited{way}"] = float(sum(cited))
                print(f"  {way or 'shipped'}: {counts}")
        engine.embedders = shipped
    finally:
        await index.close()
        await llm.close()
    for key, (hits, total) in counts.items():
        lang, _, way = key.partition("_")
        figures[f"query_tuning_{lang}_gold_cited{'_' + way if way else ''}"] = round(hits / max(total, 1), 4)
        figures[f"query_tuning_{lang}_answerable"] = float(total)
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
