"""``make run`` answers in quote mode when the only LLM is the embedded one, unless a mode is set."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from ragbot.dev.servers import EMBEDDED_LLM_MODE
from ragbot.settings import get_chat_settings, get_ingest_settings, get_retriever_settings

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def run_script(monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    for name in (
        "RAGBOT_CHAT_DEFAULT_MODE",
        "RAGBOT_CHAT_KOLZCHUT_MODE",
        "RAGBOT_CHAT_LLM_BACKEND",
        "RAGBOT_RETRIEVER_QUERY_TUNING_PATH",
        "RAGBOT_RETRIEVER_QUERY_TUNING_SCRIPTS",
        "RAGBOT_RETRIEVER_QUESTION_MEMORY_PATH",
    ):
        monkeypatch.delenv(name, raising=False)
    spec = importlib.util.spec_from_file_location("ragbot_run_script", ROOT / "scripts" / "run.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    caches = (get_chat_settings, get_ingest_settings, get_retriever_settings)
    for cached in caches:
        cached.cache_clear()
    yield module
    for cached in caches:
        cached.cache_clear()
    sys.modules.pop(spec.name, None)


def modes(module: ModuleType, tmp_path: Path) -> tuple[str | None, str | None]:
    get_chat_settings.cache_clear()
    env = module.service_env("redis://127.0.0.1:1/0", tmp_path, "127.0.0.1:8090")
    return env.get("RAGBOT_CHAT_DEFAULT_MODE"), env.get("RAGBOT_CHAT_KOLZCHUT_MODE")


def test_the_embedded_llm_gets_quote_mode(run_script: ModuleType, tmp_path: Path) -> None:
    assert EMBEDDED_LLM_MODE == "quote"
    assert modes(run_script, tmp_path) == ("quote", "quote")


def test_a_configured_mode_or_another_llm_is_left_alone(
    run_script: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAGBOT_CHAT_DEFAULT_MODE", "grounded")
    assert modes(run_script, tmp_path) == ("grounded", "quote")
    monkeypatch.delenv("RAGBOT_CHAT_DEFAULT_MODE")
    monkeypatch.setenv("RAGBOT_CHAT_LLM_BACKEND", "ollama")
    assert modes(run_script, tmp_path) == (None, None)


@pytest.mark.parametrize(
    ("variable", "sample"),
    [
        ("RAGBOT_RETRIEVER_QUERY_TUNING_PATH", "e5-queries.npz"),  # e5's query side tuned
        ("RAGBOT_RETRIEVER_QUESTION_MEMORY_PATH", "question-memory.npz"),  # answered questions vote
    ],
)
def test_make_run_sets_a_sample_file_unless_told_otherwise(
    run_script: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variable: str, sample: str
) -> None:
    def value() -> str | None:
        get_retriever_settings.cache_clear()
        env: dict[str, str] = run_script.service_env("redis://127.0.0.1:1/0", tmp_path, "127.0.0.1:8090")
        return env.get(variable)

    path = value()
    assert path is not None and Path(path) == ROOT / "samples" / "kolzchut" / sample
    assert Path(path).is_file()
    monkeypatch.setenv(variable, "")  # off
    assert value() == ""
    monkeypatch.setenv(variable, "/srv/mine.npz")
    assert value() == "/srv/mine.npz"


def test_make_run_searches_hebrew_and_english_questions_tuned_unless_told_otherwise(
    run_script: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ragbot.settings import RetrieverSettings

    def scripts() -> list[str]:
        get_retriever_settings.cache_clear()
        env: dict[str, str] = run_script.service_env("redis://127.0.0.1:1/0", tmp_path, "127.0.0.1:8090")
        variable = "RAGBOT_RETRIEVER_QUERY_TUNING_SCRIPTS"
        monkeypatch.setenv(variable, env[variable])
        # what the retriever this run starts reads from that environment
        read: list[str] = RetrieverSettings().query_tuning_scripts
        return read

    assert scripts() == ["latin", "hebrew"]
    monkeypatch.setenv("RAGBOT_RETRIEVER_QUERY_TUNING_SCRIPTS", '["latin"]')  # the library's default, set
    assert scripts() == ["latin"]


def test_the_sample_question_memory_holds_e5_vectors_of_the_read_question_sets() -> None:
    from ragbot.retrieval.memory import QuestionMemory

    shipped = QuestionMemory.load(ROOT / "samples" / "kolzchut" / "question-memory.npz")
    assert len(shipped) == 2608 and shipped.model == "multilingual-e5-small" and shipped.dimension == 384
    assert len(shipped.about["files"]) == 58 and all(shipped.pages)
    assert len(shipped.unanswered) == 1303 and shipped.about["unanswered"] == 1303


def test_make_run_indexes_with_the_client_key_and_says_why_it_cannot_without_one(
    run_script: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    from support.auth import KEYS, auth_settings, ingest_app
    from support.chat_fakes import serve_app

    from ragbot.dev.servers import LocalWiki
    from ragbot.settings import get_client_settings

    pages = [{"page_id": 7, "title": "Leave", "content": "Paid leave is 12 days."}]
    wiki = LocalWiki(pages).start()
    try:
        with serve_app(ingest_app(auth_settings())) as url:
            monkeypatch.delenv("RAGBOT_CLIENT_API_KEY", raising=False)
            get_client_settings.cache_clear()
            with pytest.raises(run_script.Refused, match="401"):
                run_script.index_samples(ingest_url=url, wiki=wiki, pages=pages)
            # A key is sent once set: a key without the ingest scope is refused as such (403, not 401).
            monkeypatch.setenv("RAGBOT_CLIENT_API_KEY", KEYS["kzchatbot"][0])
            get_client_settings.cache_clear()
            with pytest.raises(run_script.Refused, match=r"403.*ingest"):
                run_script.index_samples(ingest_url=url, wiki=wiki, pages=pages)
    finally:
        wiki.stop()
        get_client_settings.cache_clear()
