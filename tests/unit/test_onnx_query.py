"""The retriever's ONNX query path gives torch's vectors (packaged MiniLM, exported at warm-up)."""

from __future__ import annotations

from typing import Literal

import numpy as np
import pytest

from ragbot.definition import parse_definition
from ragbot.embedders import build_embedders
from ragbot.embedders.sentence_transformers import SentenceTransformerEmbedder
from ragbot.settings import ModelSettings

DEFINITION = parse_definition(
    {
        "identifier_field": "page_id",
        "saved_fields": {"title": "text", "page_id": "integer", "content": "text"},
        "field_for_llm": "content",
        "models": {"all-MiniLM-L6-v2": "content"},
    }
)
QUESTIONS = [
    "What is the effect of vitamin D on bone density?",
    "short",
    "מה הזכויות של עובד בחופשת מחלה?",
    " ".join(["a very long question that goes on"] * 80),  # past the 256-token limit: truncated
]


@pytest.fixture(scope="module")
def embedders() -> tuple[SentenceTransformerEmbedder, SentenceTransformerEmbedder]:
    def build(runtime: Literal["auto", "torch", "onnx"], batched: bool) -> SentenceTransformerEmbedder:
        settings = ModelSettings(device="cpu", query_runtime=runtime, precision="float32")
        embedder = build_embedders(settings=settings, definition=DEFINITION, batched=batched)[
            "all-MiniLM-L6-v2"
        ]
        assert isinstance(embedder, SentenceTransformerEmbedder)
        embedder.warm_up()
        return embedder

    return build("auto", False), build("torch", False)


def test_one_query_process_uses_onnx_and_matches_torch(
    embedders: tuple[SentenceTransformerEmbedder, SentenceTransformerEmbedder],
) -> None:
    onnx, torch_only = embedders
    assert onnx._onnx is not None and torch_only._onnx is None
    got = onnx.embed_queries(QUESTIONS)
    want = torch_only.embed_queries(QUESTIONS)
    assert got.shape == want.shape == (len(QUESTIONS), 384) and got.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, rtol=1e-5)
    assert (got * want).sum(axis=1).min() > 0.9999
    # Passages never take the ONNX path.
    np.testing.assert_allclose(
        onnx.embed_passages(QUESTIONS[:2]), torch_only.embed_passages(QUESTIONS[:2]), atol=1e-6
    )


def test_batched_processes_stay_on_torch() -> None:
    settings = ModelSettings(device="cpu", precision="float32")
    embedder = build_embedders(settings=settings, definition=DEFINITION)["all-MiniLM-L6-v2"]
    assert isinstance(embedder, SentenceTransformerEmbedder)
    embedder.warm_up()
    assert embedder._onnx is None


def test_models_with_other_heads_are_not_exported() -> None:
    from ragbot.embedders.onnx_query import OnnxQueryEncoder

    class Odd:
        def __iter__(self):  # type: ignore[no-untyped-def]
            return iter([object(), object(), object(), object()])

    assert OnnxQueryEncoder.build(Odd()) is None
