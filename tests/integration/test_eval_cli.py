"""``ragbot train-reranker`` and ``ragbot eval`` end to end: real MiniLM, real stores, a real reranker.

The tests' reranker is trained in the session's setup, by the CLI, on SciFact *train* queries (never
the test split): a cross-encoder initialised from the packaged MiniLM, cut to 2 layers, 128 tokens,
8 epochs over the first 32 train pairs with 3 BM25 negatives each (32 steps, under a minute on two
free cores). That is enough to check that training optimises the right thing end to end (labels,
hard negatives, the saved head, loading through ``CrossEncoder``): on its training queries the
positive must come out above BM25's best negatives. It is not a useful reranker; the one measured in
docs/benchmarks.md is trained by the same command for longer (docs/benchmarks.md says why this
rather than a committed model). The evaluation runs on a small BEIR dataset written by the test, on
the embedded store and on Elasticsearch.

SciFact is read from ``$RAGBOT_TEST_BEIR_DIR/scifact`` when that is set, else from the slice shipped in
``samples/scifact-mini`` (64 train queries, 949 abstracts; see its README); a missing folder fails.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from ragbot.cli.main import main
from ragbot.evaluation import load_beir
from ragbot.rerankers import CrossEncoderReranker
from ragbot.rerankers.training import METADATA_FILE, BM25Index, load_pairs

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
MINILM = "all-MiniLM-L6-v2"
TRAIN_PAIRS = 32
TRAIN_EPOCHS = 8

TOPICS = {
    "photosynthesis": (
        "Photosynthesis",
        "Plants use sunlight, water and carbon dioxide to make glucose and release oxygen.",
    ),
    "volcano": (
        "Volcanoes",
        "Molten magma rises through cracks in the crust and erupts as lava, ash and gas.",
    ),
    "bees": ("Honey bees", "Worker bees gather nectar from flowers and turn it into honey inside the hive."),
    "tides": ("Ocean tides", "The gravitational pull of the moon raises and lowers sea levels twice a day."),
    "rust": ("Rust", "Iron exposed to oxygen and moisture corrodes into reddish iron oxide."),
    "vaccines": ("Vaccines", "A vaccine trains the immune system to recognise a virus before an infection."),
    "insulin": ("Insulin", "The pancreas releases insulin, which lowers the level of sugar in the blood."),
    "earthquakes": ("Earthquakes", "Tectonic plates slip along faults and release energy as seismic waves."),
    "rainbows": ("Rainbows", "Sunlight is refracted and reflected in raindrops, splitting into colours."),
    "antibiotics": (
        "Antibiotics",
        "Antibiotics kill bacteria or stop them growing but do not work on viruses.",
    ),
    "glaciers": ("Glaciers", "Snow compacts into ice over centuries and the glacier flows slowly downhill."),
    "coffee": ("Caffeine", "Caffeine blocks adenosine receptors in the brain and so reduces tiredness."),
}
QUESTIONS = {
    "photosynthesis": "how do plants turn light into sugar",
    "volcano": "what comes out when a volcano erupts",
    "bees": "how is honey made",
    "tides": "what causes the tides of the sea",
    "rust": "why does iron turn red and corrode",
    "vaccines": "how does a vaccine protect against a virus",
    "insulin": "which hormone lowers blood sugar",
    "earthquakes": "what happens at a fault during an earthquake",
    "rainbows": "why do we see colours in a rainbow",
    "antibiotics": "do antibiotics help against viral infections",
}


def scifact_dir() -> Path:
    configured = os.environ.get("RAGBOT_TEST_BEIR_DIR")
    return Path(configured) / "scifact" if configured else REPO / "samples" / "scifact-mini"


@pytest.fixture(scope="session")
def scifact() -> Path:
    path = scifact_dir()
    if not (path / "qrels" / "train.tsv").is_file():
        pytest.fail(
            f"SciFact not found at {path}; set RAGBOT_TEST_BEIR_DIR to the BEIR data folder", pytrace=False
        )
    return path


@pytest.fixture(scope="session")
def trained(tmp_path_factory: pytest.TempPathFactory, scifact: Path) -> tuple[Path, Path]:
    """(model folder, pairs file): the CLI exports SciFact train pairs, then trains on the first ones."""
    root = tmp_path_factory.mktemp("reranker")
    every = root / "all-pairs.jsonl"
    assert main(["beir-pairs", "--dataset", str(scifact), "--split", "train", "--out", str(every)]) == 0
    pairs = root / "pairs.jsonl"
    pairs.write_text("".join(every.read_text(encoding="utf-8").splitlines(keepends=True)[:TRAIN_PAIRS]))
    out = root / "model"
    status = main(
        [
            "train-reranker",
            "--pairs", str(pairs),
            "--corpus", str(scifact / "corpus.jsonl"),
            "--out", str(out),
            "--layers", "2",
            "--max-length", "128",
            "--batch-size", "8",
            "--negatives", "3",
            "--epochs", str(TRAIN_EPOCHS),
            "--learning-rate", "2e-4",
        ]
    )  # fmt: skip
    assert status == 0
    return out, pairs


@pytest.fixture(scope="session")
def tiny_beir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("beir") / "tiny"
    (root / "qrels").mkdir(parents=True)
    with (root / "corpus.jsonl").open("w", encoding="utf-8") as f:
        for doc_id, (title, text) in TOPICS.items():
            f.write(json.dumps({"_id": doc_id, "title": title, "text": text}) + "\n")
    with (root / "queries.jsonl").open("w", encoding="utf-8") as f:
        for doc_id, question in QUESTIONS.items():
            f.write(json.dumps({"_id": f"q-{doc_id}", "text": question}) + "\n")
    lines = ["query-id\tcorpus-id\tscore", *(f"q-{d}\t{d}\t1" for d in QUESTIONS)]
    (root / "qrels" / "test.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


def test_the_trained_reranker_is_a_loadable_cross_encoder(trained: tuple[Path, Path], scifact: Path) -> None:
    out, _ = trained
    meta = json.loads((out / METADATA_FILE).read_text(encoding="utf-8"))
    assert meta["steps"] == TRAIN_PAIRS // 8 * TRAIN_EPOCHS
    corpus_size = sum(1 for line in (scifact / "corpus.jsonl").open(encoding="utf-8") if line.strip())
    assert (meta["pairs"], meta["layers"], meta["corpus_size"]) == (TRAIN_PAIRS, 2, corpus_size)
    assert meta["last_loss"] < meta["first_loss"]
    reranker = CrossEncoderReranker(out, device="cpu")
    assert not reranker.loaded
    reranker.warm_up()
    scores = reranker.score("which hormone lowers blood sugar", [TOPICS["insulin"][1], TOPICS["rust"][1]])
    assert len(scores) == 2
    assert all(0.0 <= s <= 1.0 for s in scores)
    assert reranker.score("q", []) == []
    reranker.close()
    assert not reranker.loaded


def test_training_puts_positives_above_bm25_negatives(trained: tuple[Path, Path], scifact: Path) -> None:
    """On its training queries, the relevant abstract outscores BM25's best other abstracts."""
    out, pairs_file = trained
    texts = [d.text for d in load_beir(scifact, split="train").corpus.values() if d.text.strip()]
    index = BM25Index(texts)
    # float32: this measures what training learned. The tiny model's margins are close enough for
    # bfloat16 scoring (the "auto" precision on an AMX CPU) to flip a few (22 of 32 wins seen in CI).
    reranker = CrossEncoderReranker(out, device="cpu", precision="float32")
    reranker.warm_up()
    wins = 0
    pairs = load_pairs(pairs_file)
    positives = {(p.query, p.positive) for p in pairs}
    for pair in pairs:
        hits = [texts[i] for i, _ in index.search(pair.query, 6)]
        negatives = [t for t in hits if (pair.query, t.strip()) not in positives][:3]
        scores = reranker.score(pair.query, [pair.positive, *negatives])
        wins += scores[0] > max(scores[1:])
    reranker.close()
    # An untrained head ranks the positive first about a quarter of the time.
    assert wins / len(pairs) >= 0.7


def test_the_int8_reranker_runs_on_onnx_runtime_and_agrees_with_float32(
    trained: tuple[Path, Path], scifact: Path
) -> None:
    out, pairs_file = trained
    texts = [d.text for d in load_beir(scifact, split="train").corpus.values() if d.text.strip()]
    index = BM25Index(texts)
    exact = CrossEncoderReranker(out, device="cpu", precision="float32")
    int8 = CrossEncoderReranker(out, device="cpu", quantize=True)
    exact.warm_up()
    int8.warm_up()
    assert (int8.runtime, int8.resolved_precision) == ("onnxruntime", "int8")
    assert exact.runtime == "torch"
    a: list[float] = []
    b: list[float] = []
    for pair in load_pairs(pairs_file)[:12]:
        passages = [pair.positive, *(texts[i] for i, _ in index.search(pair.query, 5))]
        a += exact.score(pair.query, passages)
        b += int8.score(pair.query, passages)
    assert all(0.0 <= s <= 1.0 for s in b)
    assert float(np.corrcoef(a, b)[0, 1]) > 0.97
    exact.close()
    int8.close()
    assert not int8.loaded


def test_training_pairs_never_come_from_the_test_split(trained: tuple[Path, Path], scifact: Path) -> None:
    _, pairs_file = trained
    test_queries = set(load_beir(scifact, split="test").queries.values())
    train_queries = set(load_beir(scifact, split="train").queries.values())
    queries = {p.query for p in load_pairs(pairs_file)}
    assert len(queries) >= TRAIN_PAIRS - 4
    assert queries <= train_queries
    assert not queries & test_queries


def run_eval(args: list[str]) -> dict[str, Any]:
    report = Path(args[args.index("--report") + 1])
    assert main(["eval", "--no-progress", *args]) == 0
    body: dict[str, Any] = json.loads(report.read_text(encoding="utf-8"))
    return body


def check_report(body: dict[str, Any], *, store: str) -> dict[str, dict[str, Any]]:
    by_name = {c["name"]: c for c in body["configurations"]}
    assert list(by_name) == ["bm25", f"dense:{MINILM}", "hybrid", "hybrid+rerank", "default"]
    assert body["store"] == store
    assert (body["documents"], body["queries"]) == (len(TOPICS), len(QUESTIONS))
    assert body["paragraphs"] == len(TOPICS)
    for entry in by_name.values():
        assert set(entry["metrics"]) == {"ndcg@10", "recall@10", "recall@100", "mrr@10"}
        assert all(0.0 <= v <= 1.0 for v in entry["metrics"].values())
        assert entry["latency_ms"]["p50"] > 0
    # Easy questions: every configuration finds the right document near the top.
    assert by_name["bm25"]["metrics"]["recall@10"] >= 0.8
    assert by_name[f"dense:{MINILM}"]["metrics"]["mrr@10"] >= 0.8
    assert by_name["hybrid"]["metrics"]["ndcg@10"] >= 0.8
    assert by_name["hybrid+rerank"]["metrics"]["recall@10"] >= 0.8
    assert by_name["default"]["metrics"] == by_name["hybrid+rerank"]["metrics"]
    return by_name


def test_eval_on_the_embedded_store(tiny_beir: Path, trained: tuple[Path, Path], tmp_path: Path) -> None:
    model, _ = trained
    body = run_eval(
        [
            "--dataset", str(tiny_beir),
            "--store", "embedded",
            "--models", MINILM,
            "--reranker", str(model),
            "--report", str(tmp_path / "report.json"),
            "--chart", str(tmp_path / "chart.png"),
        ]
    )  # fmt: skip
    check_report(body, store="embedded")
    assert body["reranker"] == str(model)
    assert (tmp_path / "chart.png").read_bytes()[:4] == b"\x89PNG"


def test_eval_on_elasticsearch_cleans_up(
    tiny_beir: Path, trained: tuple[Path, Path], tmp_path: Path, es_url: str
) -> None:
    model, _ = trained
    prefix = f"test_{uuid.uuid4().hex[:12]}"
    body = run_eval(
        [
            "--dataset", str(tiny_beir),
            "--store", "elasticsearch",
            "--es-url", es_url,
            "--index-prefix", prefix,
            "--models", MINILM,
            "--reranker", str(model),
            "--report", str(tmp_path / "report.json"),
        ]
    )  # fmt: skip
    check_report(body, store="elasticsearch")
    left = httpx.get(f"{es_url}/_cat/indices/{prefix}_*", params={"format": "json"}, timeout=10).json()
    assert left == []


def test_eval_refuses_an_unknown_configuration(tiny_beir: Path, tmp_path: Path) -> None:
    status = main(
        [
            "eval", "--no-progress", "--dataset", str(tiny_beir), "--models", MINILM, "--no-rerank",
            "--store-path", str(tmp_path / "s.sqlite3"), "--configs", "nope",
        ]
    )  # fmt: skip
    assert status == 1


def test_the_console_script_lists_the_subcommands() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "ragbot.cli.main", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0
    for command in ("eval", "train-reranker", "beir-pairs"):
        assert command in done.stdout
