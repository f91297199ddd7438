"""The sample pages indexed into a fresh embedded store, and retrieval engines over it per settings override.

``ragbot eval-answers`` and the answers benchmarks index the pages once (the configured definition and
models, through the real indexing pipeline: what ``make run`` indexes) and query that one index as
several retriever configurations, a query translator built once per corpus language.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ragbot.chat.retriever import EngineRetriever
from ragbot.definition import DocumentDefinition, load_definition
from ragbot.embedders import build_embedders, cached_queries
from ragbot.embedders.query_tuning import TunedE5Queries
from ragbot.indexing.pipeline import IndexingPipeline, SplitOptions
from ragbot.ports import Embedder
from ragbot.retrieval import RetrievalDefaults, RetrievalEngine
from ragbot.retrieval.memory import QuestionMemory
from ragbot.retrieval.translation import LexiconTranslator, build_translator
from ragbot.schemas.pages import Page
from ragbot.settings import get_model_settings, get_retriever_settings, get_worker_settings
from ragbot.stores.embedded import EmbeddedStore


def load_pages(path: Path) -> list[dict[str, Any]]:
    """Page records (the content API's shape) from a JSONL file."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@dataclass(slots=True)
class SampleIndex:
    """One embedded store of the sample pages, with the query embedders that search it."""

    store: EmbeddedStore
    definition: DocumentDefinition
    queries: dict[str, Embedder]
    pages: int
    index_seconds: float
    translators: dict[str, LexiconTranslator | None] = field(default_factory=dict)
    tuned: dict[Path, Embedder] = field(default_factory=dict)
    memories: dict[Path, QuestionMemory] = field(default_factory=dict)

    @classmethod
    async def build(cls, pages_paths: Sequence[Path], work_dir: Path | None = None) -> SampleIndex:
        """Index every page of ``pages_paths`` into a new store under ``work_dir`` (a temp folder)."""
        model_settings = get_model_settings()
        definition = load_definition(model_settings.document_definition)
        embedders = build_embedders(settings=model_settings, definition=definition)
        for embedder in embedders.values():
            embedder.warm_up()
        folder = work_dir or Path(tempfile.mkdtemp(prefix="ragbot-eval-answers-"))
        store = EmbeddedStore(
            path=folder / "answers.sqlite3",
            definition=definition,
            dimensions={v.name: embedders[v.model].dimension for v in definition.vector_fields},
        )
        await store.ensure_ready()
        worker = get_worker_settings()
        indexing = IndexingPipeline(
            definition=definition,
            embedders=embedders,
            split=SplitOptions(max_tokens=worker.paragraph_tokens, link_targets=worker.link_targets),
        )
        t0 = time.perf_counter()
        pages = [Page.from_wiki_content(r) for path in pages_paths for r in load_pages(path)]
        await indexing.index(pages, store=store)
        await store.warm_up()
        return cls(
            store=store,
            definition=definition,
            queries=cached_queries(embedders, max_size=model_settings.query_cache_size),
            pages=len(pages),
            index_seconds=time.perf_counter() - t0,
        )

    async def engine_with(
        self, overrides: Mapping[str, Any], memory: QuestionMemory | None = None
    ) -> EngineRetriever:
        """A retriever over this index: the configured retriever settings with ``overrides``, and
        ``memory`` as its question memory (by default, the file the settings name, if any)."""
        configured = get_retriever_settings().model_copy(update=dict(overrides))
        if memory is None and configured.question_memory_path is not None:
            known = configured.question_memory_path
            if known not in self.memories:
                self.memories[known] = QuestionMemory.load(known)
            memory = self.memories[known]
        language = configured.translate_queries_to
        if language and language not in self.translators:
            self.translators[language] = await build_translator(
                store=self.store,
                definition=self.definition,
                embedders=self.queries,
                language=language,
                limit=configured.translation_vocabulary,
            )
        tuned: dict[str, Embedder] = {}
        path = configured.query_tuning_path
        if path is not None:
            if path not in self.tuned:
                encoder = TunedE5Queries(configured.query_tuning_model, path)
                encoder.warm_up()
                self.tuned[path] = encoder
            tuned[configured.query_tuning_model] = self.tuned[path]
        return EngineRetriever(
            RetrievalEngine(
                store=self.store,
                embedders=self.queries,
                definition=self.definition,
                defaults=RetrievalDefaults.from_settings(configured),
                translator=self.translators.get(language) if language else None,
                tuned=tuned,
                memory=memory,
            )
        )

    async def close(self) -> None:
        """Close the store."""
        await self.store.close()
