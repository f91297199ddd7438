"""The retriever service: search defaults, fusion, reranking."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings

from ragbot.settings.common import settings_config

# language_weights for a Hebrew corpus searched with the shipped definition (MiniLM on content, e5 on title
# and content): MiniLM embeds only the corpus's few Latin-script lines, so an English question gets its
# noise, which score fusion scales to 1.0 like any list's best. Chosen on the tuning half of
# samples/kolzchut/abstention_questions.json with the per-language-pair abstention rules it was measured
# with (docs/benchmarks.md): opt-in, like them (RAGBOT_RETRIEVER_LANGUAGE_WEIGHTS).
HEBREW_CORPUS_LANGUAGE_WEIGHTS: dict[str, dict[str, float]] = {"en": {"all-MiniLM-L6-v2": 0.0}}


# The scripts whose questions search with a tuned query encoder unless configured (ragbot.retrieval.tuned).
QUERY_TUNING_SCRIPTS: tuple[str, ...] = ("latin",)


class RetrieverSettings(BaseSettings):
    """The retriever service."""

    model_config = settings_config("RAGBOT_RETRIEVER_")
    host: str = "127.0.0.1"
    port: int = 8002
    max_query_chars: int = 2000
    # Retrieval defaults, used when a request leaves them out (see ragbot.retrieval.fusion for the methods).
    default_mode: Literal["semantic", "lexical", "hybrid"] = "hybrid"
    default_fusion: Literal["rrf", "page_rrf", "score"] = "score"
    rrf_k: int = Field(default=60, ge=1, le=10000)
    bm25_weight: float = Field(default=1.0, ge=0.0)
    # Rerank (when a reranker is configured): top N fused paragraphs, then floor and gap-ratio cutoff.
    # reranker_path: a cross-encoder folder (`ragbot train-reranker` writes one); unset = no rerank.
    reranker_path: Path | None = None
    reranker_max_length: int | None = Field(default=None, ge=16, le=8192)
    reranker_quantize: bool = False
    default_rerank: bool = True
    rerank_top_n: int = Field(default=20, ge=1, le=1000)
    rerank_min_score: float | None = None
    rerank_gap_ratio: float | None = Field(default=None, ge=0.0, le=1.0)
    # 1: order by the cross-encoder alone; below 1, blend it with the fused score (fusion.apply_rerank).
    rerank_weight: float = Field(default=1.0, ge=0.0, le=1.0)
    # Every store call and every query embedding is bounded: a dependency that hangs becomes a 503.
    store_timeout_s: float = Field(default=10.0, gt=0)
    embed_timeout_s: float = Field(default=30.0, gt=0)
    # How often the live index generation is looked up (a re-embed's switch is followed this fast).
    generation_poll_s: float = Field(default=2.0, gt=0)
    # Fuse only the dense fields whose model serves the question's script (the definition file's
    # "languages"); a request that names its models is searched as asked. False: every field, always.
    language_routing: bool = True
    # Per question language (a key the routing's guess holds: "en", "he"), a factor on the weight of each
    # branch named by its model, or "bm25": {"en": {"all-MiniLM-L6-v2": 0}} for a Hebrew corpus, where an
    # English-only model finds nothing but the few Latin-script lines (its best noise still scales to
    # 1.0 in score fusion). Empty: every weight as the definition and the request say.
    language_weights: dict[str, dict[str, float]] = Field(default_factory=dict)
    # A corpus language ("he", the default): English questions also search with each content word's
    # corpus word, by the multilingual model (ragbot.retrieval.translation), and without the dense models
    # that do not read that language. The lexicon is built from the store's words (the
    # translation_vocabulary most frequent) in the background, once the store holds words of that
    # language; until then questions search untranslated. Empty: off.
    translate_queries_to: str | None = Field(default="he", max_length=3)
    translation_vocabulary: int = Field(default=20000, ge=100, le=500000)
    # How often the retriever looks at the store's paragraph count: the lexicon is built once there are
    # paragraphs, and again when their number has changed by 5% since.
    translation_poll_s: float = Field(default=10.0, gt=0)
    # A translated question's BM25 query also holds its translated words (False: e5's vector only).
    translation_bm25: bool = True
    # Among a word's best corpus words, the weight of each one's cosine to the whole question (0: the
    # nearest word alone, whatever the question says).
    translation_context: float = Field(default=0.5, ge=0.0, le=10.0)
    # A file `ragbot tune-queries` wrote (ragbot.embedders.query_tuning): the model's query side tuned on
    # the wiki's own questions. Questions in query_tuning_scripts then search that model's vectors with
    # it, the untuned list kept for the answerability rule (ragbot.retrieval.tuned). Empty: off.
    query_tuning_path: Path | None = None
    query_tuning_model: str = "multilingual-e5-small"
    # The scripts (ragbot.text.language: latin, hebrew, arabic…) whose questions search with the tuned
    # encoder. Latin by default: English questions over Hebrew pages gain most (docs/benchmarks.md).
    query_tuning_scripts: list[str] = Field(default_factory=lambda: list(QUERY_TUNING_SCRIPTS), min_length=1)
    # A file `ragbot remember-questions` wrote (ragbot.retrieval.memory): the wiki's answered questions
    # with their pages. The nearest ones vote for pages, raising the retrieved paragraphs of those pages
    # by question_memory_weight x the best fused score at most. Empty: off.
    question_memory_path: Path | None = None
    question_memory_weight: float = Field(default=0.5, ge=0.0, le=10.0)
    # A near remembered question counts more: the weight grows by question_memory_near_weight x how far
    # the nearest one's cosine passes question_memory_near (0: a fixed weight). Chosen out of fold on
    # Kol-Zchut's read question sets (docs/benchmarks.md).
    question_memory_near: float = Field(default=0.9, ge=-1.0, le=1.0)
    question_memory_near_weight: float = Field(default=5.0, ge=0.0, le=100.0)

    @field_validator("query_tuning_path", "question_memory_path", mode="before")
    @classmethod
    def _path_or_off(cls, value: object) -> object:
        """An empty value turns query tuning off."""
        return None if value in ("", None) else value

    @field_validator("query_tuning_scripts")
    @classmethod
    def _known_scripts(cls, value: list[str]) -> list[str]:
        """Each script one ``ragbot.text.language`` tells apart."""
        from ragbot.text.language import SCRIPT_LANGUAGES

        unknown = [s for s in value if s not in SCRIPT_LANGUAGES]
        if unknown:
            raise ValueError(f"unknown script(s) {unknown}: use any of {sorted(SCRIPT_LANGUAGES)}")
        return value

    @field_validator("translate_queries_to")
    @classmethod
    def _language_or_off(cls, value: str | None) -> str | None:
        """An empty value turns translation off; otherwise a two- or three-letter language code."""
        if not value:
            return None
        if not (2 <= len(value) <= 3 and value.isalpha()):
            raise ValueError("translate_queries_to is a language code such as 'he', or empty for off")
        return value.lower()
