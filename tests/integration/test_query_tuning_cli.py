"""``ragbot tune-queries`` end to end: it indexes real pages with the real models, fits e5's biases on a
question file, writes the file; the eval index and the retriever's composition root load it, and an
English question then searches e5's vectors with it (the untuned list kept for the rule)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from ragbot.cli.main import main
from ragbot.embedders.query_tuning import TunedE5Queries, load_biases
from ragbot.evaluation.sample_index import SampleIndex
from ragbot.schemas.retrieval import RetrieveRequest
from ragbot.settings import ModelSettings, RetrieverSettings, StoreSettings
from ragbot_retriever.app import build_resources

ROOT = Path(__file__).resolve().parents[2]
E5 = "multilingual-e5-small"


def _sample(tmp_path: Path) -> tuple[Path, Path]:
    """The first three sample pages and four English questions about them."""
    lines = (ROOT / "samples/kolzchut/pages.jsonl").read_text(encoding="utf-8").splitlines()[:3]
    pages = tmp_path / "pages.jsonl"
    pages.write_text("\n".join(lines) + "\n", encoding="utf-8")
    questions = tmp_path / "questions.json"
    asked = [
        ("How do I get an income tax refund?", 100005),
        ("Do teenagers who work get tax credit points?", 100028),
        ("Are there extra tax credit points for women?", 100029),
        ("What is the weather in Haifa?", None),
    ]
    questions.write_text(
        json.dumps(
            {
                "questions": [
                    {"id": f"q{i}", "language": "en", "question": q, "gold_page_id": gold}
                    for i, (q, gold) in enumerate(asked)
                ]
            }
        ),
        encoding="utf-8",
    )
    return pages, questions


async def test_tune_queries_writes_a_file_the_retriever_searches_english_questions_with(
    tmp_path: Path,
) -> None:
    pages, questions = _sample(tmp_path)
    out = tmp_path / "e5-queries.npz"
    args = ["tune-queries", "--questions", str(questions), "--pages", str(pages), "--out", str(out)]
    done = subprocess.run(
        [sys.executable, "-m", "ragbot.cli.main", *args], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "tuned on 3 questions" in done.stdout
    biases, about = load_biases(out)
    assert about["pairs"] == 3 and about["questions"] == ["questions.json"] and about["paragraphs"] > 3
    assert len(biases) > 50

    index = await SampleIndex.build([pages], work_dir=tmp_path)
    try:
        retriever = await index.engine_with({"query_tuning_path": out})
        english = await retriever.engine.retrieve(RetrieveRequest(query="tax refund for employees"))
        tuned = {n: b for n, b in english.debug.branches.items() if b.tuned}
        assert tuned and all(n.endswith("@tuned") and b.model == E5 for n, b in tuned.items())
        assert all(english.debug.branches[n.removesuffix("@tuned")].weight == 0.0 for n in tuned)
        hebrew = await retriever.engine.retrieve(RetrieveRequest(query="החזר מס הכנסה לשכירים"))
        assert not any(b.tuned for b in hebrew.debug.branches.values())
    finally:
        await index.close()

    async with build_resources(
        retriever_settings=RetrieverSettings(query_tuning_path=out),
        store_settings=StoreSettings(backend="embedded", embedded_path=tmp_path / "retriever.sqlite3"),
        model_settings=ModelSettings(query_runtime="torch"),  # no ONNX export here
    ) as resources:
        encoder = resources.engine.tuned[E5]
        assert isinstance(encoder, TunedE5Queries) and encoder.dimension == 384


def test_tune_queries_refuses_a_missing_question_file(tmp_path: Path) -> None:
    assert (
        main(["tune-queries", "--questions", str(tmp_path / "none.json"), "--out", str(tmp_path / "x")]) == 1
    )
