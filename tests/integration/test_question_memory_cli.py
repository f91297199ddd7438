"""The question memory end to end: ``ragbot remember-questions`` embeds a question file with the real
multilingual-e5-small and writes the file; the eval index and the retriever's composition root load
it, and an English question near a remembered one puts that one's page first among those found."""

from __future__ import annotations

from pathlib import Path

from support.question_files import first_pages, question_file

from ragbot.cli.main import main
from ragbot.evaluation.sample_index import SampleIndex
from ragbot.retrieval.memory import QuestionMemory
from ragbot.schemas.retrieval import RetrieveRequest
from ragbot.settings import ModelSettings, RetrieverSettings, StoreSettings
from ragbot_retriever.app import build_resources

E5 = "multilingual-e5-small"
QUESTIONS = [
    ("Can a teenager with a summer job get income tax credit points?", 100028),
    ("Are there extra tax credit points for women?", 100029),
    ("How do I ask for an income tax refund?", 100005),
    ("What is the weather in Haifa?", None),
]


def _sample(tmp_path: Path) -> tuple[Path, Path]:
    """The first three sample pages, and the questions with the first one again under another page."""
    return first_pages(tmp_path), question_file(tmp_path, [*QUESTIONS, (QUESTIONS[0][0], 100005)])


async def test_remembered_questions_reorder_the_pages_found(tmp_path: Path) -> None:
    pages, questions = _sample(tmp_path)
    out = tmp_path / "memory.npz"
    assert main(["remember-questions", "--questions", str(questions), "--out", str(out)]) == 0
    memory = QuestionMemory.load(out)
    # the answerable questions once each (the repeat keeps its first pages), none without a page
    assert memory.questions == [q for q, gold in QUESTIONS if gold is not None]
    assert memory.pages == [(100028,), (100029,), (100005,)] and memory.dimension == 384
    assert memory.model == E5 and memory.about["files"] == ["questions.json"]
    # the unanswerable one is remembered as a question the wiki did not answer
    assert memory.unanswered == ["What is the weather in Haifa?"] and memory.about["unanswered"] == 1
    plain_out = tmp_path / "answered.npz"
    assert (
        main(
            ["remember-questions", "--questions", str(questions), "--out", str(plain_out), "--answered-only"]
        )
        == 0
    )
    assert QuestionMemory.load(plain_out).unanswered == []

    asked = "My 17-year-old works this summer: does he get credit points on his income tax?"
    index = await SampleIndex.build([pages], work_dir=tmp_path)
    try:
        plain = await (await index.engine_with({"question_memory_path": None})).engine.retrieve(
            RetrieveRequest(query=asked, paragraphs_per_page=[1, 1, 1])
        )
        engine = (await index.engine_with({"question_memory_path": out})).engine
        remembered = await engine.retrieve(RetrieveRequest(query=asked, paragraphs_per_page=[1, 1, 1]))
        # a memory that remembers this question under another page moves that page first
        engine.memory = QuestionMemory(
            model=E5, questions=[asked], pages=[[100029]], vectors=memory.vectors[:1]
        )
        moved = await engine.retrieve(RetrieveRequest(query=asked, paragraphs_per_page=[1, 1, 1]))
    finally:
        await index.close()
    assert plain.debug.memory is None
    assert remembered.debug.memory is not None
    nearest = remembered.debug.memory.neighbours[0]
    assert nearest.question == QUESTIONS[0][0] and nearest.pages == [100028] and nearest.cosine > 0.85
    assert remembered.debug.pages[0] == 100028
    # the weather question is further from a tax question than the remembered tax question is
    far = remembered.debug.memory.unanswered
    assert far is not None and far.question == QUESTIONS[3][0] and far.cosine < nearest.cosine
    assert moved.debug.pages[0] == 100029 and set(moved.debug.pages) == set(plain.debug.pages)

    async with build_resources(
        retriever_settings=RetrieverSettings(question_memory_path=out),
        store_settings=StoreSettings(backend="embedded", embedded_path=tmp_path / "retriever.sqlite3"),
        model_settings=ModelSettings(query_runtime="torch"),
    ) as resources:
        assert resources.engine.memory is not None and len(resources.engine.memory) == 3


def test_remember_questions_refuses_a_missing_file_and_an_unknown_model(tmp_path: Path) -> None:
    _, questions = _sample(tmp_path)
    out = tmp_path / "x.npz"
    assert main(["remember-questions", "--questions", str(tmp_path / "none.json"), "--out", str(out)]) == 1
    assert main(["remember-questions", "--questions", str(questions), "--out", str(out), "--model", "x"]) == 1
    assert not out.exists()
