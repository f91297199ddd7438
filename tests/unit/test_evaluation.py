"""ragbot.evaluation: BEIR loading, the metrics against hand-computed values, the vector cache, and a
whole evaluation over the embedded store with a small deterministic embedder (no model to load)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from support.fakes import HashEmbedder

from ragbot.definition import DocumentDefinition, parse_definition
from ragbot.errors import ConfigurationError, ValidationFailed
from ragbot.evaluation import (
    METRICS,
    EvalConfig,
    VectorCache,
    draw_chart,
    eval_definition,
    evaluate,
    latency_summary,
    load_beir,
    mrr_at_k,
    ndcg_at_k,
    page_ids,
    pairs_from_beir,
    recall_at_k,
    score_run,
    standard_configs,
    write_report,
)
from ragbot.retrieval import RetrievalDefaults
from ragbot.settings import StoreSettings
from ragbot.stores import build_store

DIM = 32
DOCS = {
    "d1": ("Photosynthesis", "Plants turn sunlight, water and carbon dioxide into sugar and oxygen."),
    "d2": ("Volcanoes", "Magma rises through the crust and erupts as lava and ash."),
    "d3": ("Honey bees", "Bees collect nectar from flowers and make honey in the hive."),
    "d4": ("Tides", "The moon's gravity pulls the oceans, raising and lowering the tides."),
    "d5": ("Rust", "Iron reacts with oxygen and water and slowly turns into rust."),
}
QUERIES = {
    "q1": "how do plants make sugar from sunlight",
    "q2": "why does lava erupt from magma",
    "q3": "what do bees make from nectar",
    "q4": "what pulls the oceans to make tides",
    "q5": "unjudged query",
}
QRELS = {"q1": {"d1": 1}, "q2": {"d2": 1}, "q3": {"d3": 2}, "q4": {"d4": 1, "d5": 0}}


def write_beir(root: Path) -> Path:
    (root / "qrels").mkdir(parents=True)
    with (root / "corpus.jsonl").open("w", encoding="utf-8") as f:
        for doc_id, (title, text) in DOCS.items():
            f.write(json.dumps({"_id": doc_id, "title": title, "text": text}) + "\n")
    with (root / "queries.jsonl").open("w", encoding="utf-8") as f:
        for qid, text in QUERIES.items():
            f.write(json.dumps({"_id": qid, "text": text}) + "\n")
    lines = ["query-id\tcorpus-id\tscore"]
    lines += [f"{q}\t{d}\t{s}" for q, rels in QRELS.items() for d, s in rels.items()]
    (root / "qrels" / "test.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (root / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\nq5\td5\t1\n", encoding="utf-8")
    return root


def bag_of_words() -> HashEmbedder:
    """The shared deterministic embedder (a hashed bag of words) as model ``bow``; records its calls."""
    return HashEmbedder("bow", dimension=DIM, max_tokens=128)


def definition() -> DocumentDefinition:
    return parse_definition(
        {
            "identifier_field": "page_id",
            "saved_fields": {"title": "text", "content": "text", "page_id": "integer"},
            "field_for_llm": "content",
            "models": {"bow": ["title", "content"]},
        }
    )


# -- loading --------------------------------------------------------------------------------------


def test_load_beir_keeps_only_judged_queries_of_the_split(tmp_path: Path) -> None:
    dataset = load_beir(write_beir(tmp_path / "tiny"))
    assert dataset.name == "tiny"
    assert set(dataset.queries) == {"q1", "q2", "q3", "q4"}
    assert dataset.qrels["q4"] == {"d4": 1, "d5": 0}
    assert dataset.corpus["d3"].title == "Honey bees"
    train = load_beir(tmp_path / "tiny", split="train")
    assert set(train.queries) == {"q5"}
    assert len(load_beir(tmp_path / "tiny", max_queries=2).queries) == 2


def test_load_beir_names_what_is_missing(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"corpus\.jsonl"):
        load_beir(tmp_path)
    write_beir(tmp_path / "x")
    with pytest.raises(ConfigurationError, match=r"dev\.tsv"):
        load_beir(tmp_path / "x", split="dev")


def test_pairs_come_from_positive_judgements_only(tmp_path: Path) -> None:
    dataset = load_beir(write_beir(tmp_path / "tiny"))
    pairs = pairs_from_beir(dataset)
    assert len(pairs) == 4  # d5 is judged 0 for q4
    assert pairs[0].query == QUERIES["q1"] and pairs[0].positive == DOCS["d1"][1]
    assert pairs_from_beir(dataset, with_title=True)[0].positive.startswith("Photosynthesis\n")


def test_page_ids_follow_corpus_order(tmp_path: Path) -> None:
    dataset = load_beir(write_beir(tmp_path / "tiny"))
    assert page_ids(dataset) == {1: "d1", 2: "d2", 3: "d3", 4: "d4", 5: "d5"}


# -- metrics --------------------------------------------------------------------------------------


def test_ndcg_matches_a_hand_computed_value() -> None:
    relevant = {"a": 2, "b": 1}
    # DCG = 1/log2(3) (b at rank 2) + 2/log2(4) (a at rank 3); IDCG = 2/1 + 1/log2(3)
    expected = (1 / math.log2(3) + 2 / 2) / (2 + 1 / math.log2(3))
    assert ndcg_at_k(["x", "b", "a"], relevant, 10) == pytest.approx(expected)
    assert ndcg_at_k(["a", "b"], relevant, 10) == pytest.approx(1.0)
    assert ndcg_at_k(["x", "y"], relevant, 10) == 0.0
    assert ndcg_at_k(["x", "a"], relevant, 1) == 0.0


def test_recall_and_mrr_respect_the_cutoff() -> None:
    relevant = {"a": 1, "b": 1, "c": 0}
    ranked = ["x", "a", "c", "y", "b"]
    assert recall_at_k(ranked, relevant, 2) == 0.5
    assert recall_at_k(ranked, relevant, 5) == 1.0
    assert mrr_at_k(ranked, relevant, 10) == 0.5
    assert mrr_at_k(ranked, relevant, 1) == 0.0
    assert recall_at_k(ranked, {"c": 0}, 5) == 0.0


def test_score_run_averages_over_judged_queries_and_counts_missing_runs_as_zero() -> None:
    qrels = {"q1": {"a": 1}, "q2": {"b": 1}}
    scores = score_run({"q1": ["a"], "q3": ["b"]}, qrels)
    assert scores == {"ndcg@10": 0.5, "recall@10": 0.5, "recall@100": 0.5, "mrr@10": 0.5}
    assert set(scores) == set(METRICS)


def test_score_run_ignores_repeated_documents() -> None:
    assert score_run({"q": ["x", "x", "a"]}, {"q": {"a": 1}})["mrr@10"] == 0.5


def test_latency_summary() -> None:
    summary = latency_summary([float(v) for v in range(1, 101)])
    assert summary["p50"] == pytest.approx(50.5)
    assert summary["p95"] == pytest.approx(95.05)
    assert summary["mean"] == pytest.approx(50.5)
    assert latency_summary([]) == {"p50": 0.0, "p95": 0.0, "mean": 0.0}


# -- configurations and the definition ----------------------------------------------------------


def test_standard_configs() -> None:
    names = [c.name for c in standard_configs(["m1", "m2"], with_rerank=True)]
    assert names == ["bm25", "dense:m1", "dense:m2", "hybrid", "hybrid+rerank", "default"]
    assert [c.name for c in standard_configs(["m1"], with_rerank=False)][-2:] == ["hybrid", "default"]
    default = EvalConfig("default", None, rerank=None).request("q", retrieval_size=10, pages=3)
    assert (default.mode, default.rerank, default.fusion, default.bm25_weight) == (None, None, None, None)
    request = EvalConfig("dense:m1", "semantic", models={"m1": 1.0}).request("q", retrieval_size=30, pages=7)
    assert request.paragraphs_per_page == [1] * 7
    assert (request.mode, request.models, request.rerank, request.retrieval_size) == (
        "semantic",
        {"m1": 1.0},
        False,
        30,
    )


def test_eval_definition_restricts_models_and_needs_title_and_content() -> None:
    base = parse_definition(
        {
            "identifier_field": "page_id",
            "saved_fields": {"title": "text", "content": "text", "page_id": "integer"},
            "field_for_llm": "content",
            "models": {"a": "content", "b": ["title", "content"]},
        }
    )
    assert eval_definition(base, ["b"]).models == {"b": ("title", "content")}
    assert eval_definition(base).model_names == ("a", "b")
    with pytest.raises(ConfigurationError, match="not in the document definition"):
        eval_definition(base, ["c"])
    no_title = parse_definition(
        {
            "identifier_field": "page_id",
            "saved_fields": {"content": "text", "page_id": "integer"},
            "field_for_llm": "content",
            "models": {"a": "content"},
        }
    )
    with pytest.raises(ConfigurationError, match="title"):
        eval_definition(no_title)


# -- the vector cache -----------------------------------------------------------------------------


def test_vector_cache_persists_and_skips_the_model_for_known_texts(tmp_path: Path) -> None:
    inner = bag_of_words()
    cache = VectorCache(inner, folder=tmp_path)
    cache.warm_up()
    first = cache.embed_passages(["alpha beta", "gamma", "alpha beta"])
    assert first.shape == (3, DIM)
    assert len(inner.passage_calls) == 1
    cache.embed_passages(["gamma"])
    assert len(inner.passage_calls) == 1
    query = cache.embed_queries(["gamma"])  # a query is cached apart from the same passage text
    assert len(inner.query_calls) == 1
    np.testing.assert_allclose(query[0], first[1])
    cache.close()
    assert cache.path.is_file()

    again = bag_of_words()
    reloaded = VectorCache(again, folder=tmp_path)
    reloaded.warm_up()
    np.testing.assert_allclose(reloaded.embed_passages(["alpha beta", "gamma"]), first[:2])
    assert len(again.passage_calls) == 0
    assert reloaded.hits == 2 and reloaded.misses == 0
    assert reloaded.embed_passages([]).shape == (0, DIM)


def test_vector_cache_ignores_a_file_of_another_dimension(tmp_path: Path) -> None:
    np.savez(
        tmp_path / "bow.npz", keys=np.array([b"x" * 20], dtype="S20"), vectors=np.zeros((1, 7), np.float32)
    )
    cache = VectorCache(bag_of_words(), folder=tmp_path)
    cache.warm_up()
    assert cache.embed_passages(["a"]).shape == (1, DIM)


# -- a whole evaluation -----------------------------------------------------------------------------


async def test_evaluate_over_the_embedded_store(tmp_path: Path) -> None:
    dataset = load_beir(write_beir(tmp_path / "tiny"))
    defn = definition()
    store = build_store(
        settings=StoreSettings(backend="embedded", embedded_path=tmp_path / "eval.sqlite3"),
        definition=defn,
        dimensions={"title_bow_vectors": DIM, "content_bow_vectors": DIM},
    )
    await store.ensure_ready()
    try:
        report = await evaluate(
            dataset,
            store=store,
            definition=defn,
            embedders={"bow": bag_of_words()},
            defaults=RetrievalDefaults(),
            max_tokens=128,
            retrieval_size=10,
        )
        assert await store.count() == 5
    finally:
        await store.close()
    assert [r.config.name for r in report.results] == ["bm25", "dense:bow", "hybrid", "default"]
    by_name = {r.config.name: r for r in report.results}
    assert by_name["bm25"].metrics["mrr@10"] == pytest.approx(1.0)
    assert by_name["hybrid"].metrics["ndcg@10"] == pytest.approx(1.0)
    assert by_name["bm25"].run["q1"][0] == "d1"
    assert all(r.latency_ms["p50"] > 0 for r in report.results)
    assert (report.documents, report.paragraphs, report.queries) == (5, 5, 4)
    assert "hybrid" in report.table()

    out = tmp_path / "report.json"
    write_report(report, out)
    body = json.loads(out.read_text(encoding="utf-8"))
    assert body["dataset"] == "tiny"
    assert body["defaults"]["fusion"] == "rrf"
    assert [c["name"] for c in body["configurations"]] == ["bm25", "dense:bow", "hybrid", "default"]
    assert set(body["configurations"][0]["metrics"]) == set(METRICS)
    assert body["configurations"][1]["request"]["models"] == {"bow": 1.0}


async def test_evaluate_can_reuse_a_filled_store(tmp_path: Path) -> None:
    dataset = load_beir(write_beir(tmp_path / "tiny"))
    defn = definition()
    settings = StoreSettings(backend="embedded", embedded_path=tmp_path / "eval.sqlite3")
    dims = {"title_bow_vectors": DIM, "content_bow_vectors": DIM}
    embedder = bag_of_words()
    for reindex in (True, False):
        store = build_store(settings=settings, definition=defn, dimensions=dims)
        await store.ensure_ready()
        try:
            report = await evaluate(
                dataset,
                store=store,
                definition=defn,
                embedders={"bow": embedder},
                defaults=RetrievalDefaults(),
                configs=[EvalConfig("bm25", "lexical")],
                max_tokens=128,
                reindex=reindex,
            )
        finally:
            await store.close()
        assert report.results[0].metrics["mrr@10"] == pytest.approx(1.0)
    # Title and content of the 5 pages, indexed once: one batch per field across the pages.
    assert sorted(len(call) for call in embedder.passage_calls) == [5, 5]


def test_run_config_refuses_more_pages_than_a_request_allows() -> None:
    with pytest.raises(ValidationFailed):
        EvalConfig("x", "lexical").request("q", retrieval_size=10, pages=101)


def test_chart_is_a_png(tmp_path: Path) -> None:
    from ragbot.evaluation import ConfigResult, EvalReport

    results = [
        ConfigResult(
            EvalConfig(n, "lexical"), dict.fromkeys(METRICS, v), {"p50": 1.0, "p95": 2.0, "mean": 1.0}
        )
        for n, v in (("bm25", 0.6), ("hybrid", 0.7))
    ]
    report = EvalReport("tiny", "test", "embedded", ["bow"], None, 5, 5, 4, 0.1, {}, results)
    draw_chart(report, tmp_path / "chart.png")
    assert (tmp_path / "chart.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
