"""The LLM and the chat service: backends, answer modes, sessions, Kol-Zchut routes."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings

from ragbot.schemas.retrieval import DEFAULT_PARAGRAPHS_PER_PAGE
from ragbot.settings.common import settings_config

# The rule before 2026-12-05, fitted on the tuning half only (bench/answers/abstention.py --fit as it was
# then: one logistic regression over the evidence of ragbot.chat.answerability for both language pairs,
# L2 1.0; figures in docs/benchmarks.md). {"threshold": -inf} answers all.
ABSTENTION_BRANCHES: tuple[str, ...] = (
    "content_all-MiniLM-L6-v2_vectors",
    "content_multilingual-e5-small_vectors",
    "title_multilingual-e5-small_vectors",
)
ABSTENTION_RULE_SINGLE: dict[str, float] = {
    "bias": -47.586061,
    "dense_top": 14.306191,
    "dense_gap": 82.80072,
    "bm25_gap": -0.074326,
    "agree": 0.511531,
    "coverage": -0.028404,
    "sentence_top": 36.939234,
    "cross_language": 2.149199,
    "threshold": 0.397365,
}
# A candidate, not the default: one rule per language pair, chosen by cross-validation inside the tuning
# half (bench/answers/abstention.py --fit, bench/results/abstention_fit.json). On the held-out half it
# abstained on 0.79 of the unanswerable questions where the rule above abstains on 0.92 (the target is
# 0.9), so it stays opt-in: RAGBOT_CHAT_ABSTENTION_RULE and RAGBOT_CHAT_ABSTENTION_RULE_CROSS_LANGUAGE.
ABSTENTION_RULE_SAME_LANGUAGE: dict[str, float] = {
    "bias": -26.450265,
    "dense_top": 16.812955,
    "sentence_top": 10.997636,
    "coverage": 1.267373,
    "dense_gap": 50.729003,
    "bm25_gap": 1.395378,
    "threshold": 0.110202,
}
ABSTENTION_RULE_CROSS_LANGUAGE: dict[str, float] = {
    "bias": -25.691772,
    "dense_top": 18.805097,
    "sentence_top": 11.125861,
    "coverage": 0.714585,
    "dense_gap": -17.570751,
    "bm25_gap": 6.371888,
    "threshold": -0.106082,
}
# The same fit with English questions translated word by word into Hebrew (the retriever's
# RAGBOT_RETRIEVER_TRANSLATE_QUERIES_TO=he): bench/answers/abstention.py --fit --translate, on the tuning
# half only (bench/results/abstention_fit_translated.json). A candidate, opt-in like the pair above.
ABSTENTION_RULE_SAME_LANGUAGE_TRANSLATED: dict[str, float] = {
    "bias": -33.168684,
    "dense_top": 22.873567,
    "sentence_top": 11.756788,
    "coverage": 2.214647,
    "dense_gap": 42.195341,
    "bm25_gap": 1.415487,
    "threshold": 0.496721,
}
ABSTENTION_RULE_CROSS_LANGUAGE_TRANSLATED: dict[str, float] = {
    "bias": -59.355465,
    "dense_top": 54.544522,
    "sentence_top": 12.814656,
    "coverage": -1.167214,
    "dense_gap": -35.2422,
    "bm25_gap": -0.922793,
    "threshold": 0.36235,
}
# The same with the translated words in BM25's query too (RAGBOT_RETRIEVER_TRANSLATION_BM25, the default
# once translating): --fit --translate chose the best dense cosine alone, L2 1, target 0.9
# (bench/results/abstention_fit_translated_bm25.json). A candidate, opt-in like the pairs above.
ABSTENTION_RULE_SAME_LANGUAGE_TRANSLATED_BM25: dict[str, float] = {
    "bias": -62.963044,
    "dense_top": 71.086755,
    "threshold": 0.252204,
}
ABSTENTION_RULE_CROSS_LANGUAGE_TRANSLATED_BM25: dict[str, float] = {
    "bias": -77.488275,
    "dense_top": 88.147299,
    "threshold": 0.486914,
}
# The default since 2026-12-05: the pair above, with the retriever translating English questions (its
# default), passed the check written before the fifth held-out set was read (docs/benchmarks.md).
ABSTENTION_RULE = ABSTENTION_RULE_SAME_LANGUAGE_TRANSLATED_BM25
ABSTENTION_RULE_CROSS = ABSTENTION_RULE_CROSS_LANGUAGE_TRANSLATED_BM25
# For a cross-language turn the retriever also searched with e5's query side tuned on the wiki's
# questions (RAGBOT_RETRIEVER_QUERY_TUNING_PATH): bench/answers/query_tuning.py fitted it on out-of-fold
# tuned turns of the 14 read question files (bench/results/query_tuning_fit.json, "candidate"), its
# threshold abstaining on as many of their unanswerable questions as the rule above does untuned.
ABSTENTION_RULE_CROSS_LANGUAGE_TUNED: dict[str, float] = {
    "bias": -71.295706,
    "dense_top": 45.384329,
    "tuned_top": 4.667287,
    "sentence_top": 34.256333,
    "coverage": 10.343259,
    "threshold": -0.395403,
}
# For a tuned cross-language turn on which the question memory voted (make run's): bench/answers/
# memory_rule.py --gate-off fitted it on the out-of-fold English turns of the 46 read question files
# (bench/results/memory_rule.json): the tuned rule's features, the memory's (the nearest unanswered
# question's cosine among them) and the gate's probability, which it weighs instead of stopping
# behind the gate's bar; it passed the check on fresh47-fresh48 (docs/benchmarks.md).
ABSTENTION_RULE_CROSS_LANGUAGE_MEMORY: dict[str, float] = {
    "bias": -48.601066,
    "dense_top": 33.247884,
    "tuned_top": 3.570526,
    "sentence_top": 3.255802,
    "coverage": 3.242213,
    "memory_best": 79.959672,
    "memory_agree": 0.841549,
    "memory_unanswered": -64.838666,
    "gate": 2.867156,
    "threshold": 0.199171,
}
# For a same-language (Hebrew) turn on which the question memory voted (make run's): bench/answers/
# memory_rule.py --language he --gate-off fitted it on the out-of-fold Hebrew turns of the 48 read
# question files, searched tuned as make run searches them (bench/results/memory_rule_he.json): the
# same-language rule's features, the memory's (the nearest unanswered question's cosine among them) and
# the gate's probability, which it weighs instead of stopping behind the gate's bar; the rule of 44 sets
# passed the check on fresh45-fresh46, this refit the one on fresh49-fresh50 (docs/benchmarks.md).
ABSTENTION_RULE_MEMORY: dict[str, float] = {
    "bias": -31.708759,
    "dense_top": 31.989349,
    "dense_gap": -16.439006,
    "bm25_gap": 1.071774,
    "agree": 0.224339,
    "coverage": 0.408703,
    "sentence_top": 0.367907,
    "memory_best": 80.227101,
    "memory_agree": 0.775716,
    "memory_unanswered": -80.46373,
    "gate": 3.091185,
    "threshold": 0.470691,
}
# The same retrieval, fitted on 281 questions: the tuning half and the sets already read (the held-out
# half, abstention_questions_fresh.json and _fresh3.json): --fit --fit-spent --translate chose every
# feature, L2 5, target 0.95 (bench/results/abstention_fit_pooled.json); judged on _fresh4.json.
ABSTENTION_RULE_SAME_LANGUAGE_POOLED: dict[str, float] = {
    "bias": -62.644144,
    "dense_top": 56.507738,
    "dense_gap": 28.980277,
    "bm25_gap": -0.086802,
    "agree": 0.814063,
    "coverage": 0.908539,
    "sentence_top": 12.215617,
    "threshold": 0.990325,
}
ABSTENTION_RULE_CROSS_LANGUAGE_POOLED: dict[str, float] = {
    "bias": -50.640574,
    "dense_top": 36.488073,
    "dense_gap": 97.08119,
    "bm25_gap": -2.297566,
    "agree": 0.381994,
    "coverage": 9.90912,
    "sentence_top": 20.487522,
    "threshold": 0.386657,
}


class LLMSettings(BaseSettings):
    """The LLM the chat service answers with (and the worker's contextual retrieval writes with)."""

    model_config = settings_config("RAGBOT_CHAT_")
    # The LLM: the embedded llama.cpp runtime (no server needed), Ollama, or any OpenAI-compatible server.
    llm_backend: Literal["llamacpp", "ollama", "openai"] = "llamacpp"
    # Model name sent to the server (ollama/openai); for llamacpp only a label (empty: the file's name).
    llm_model: str = ""
    # Ollama: http://127.0.0.1:11434; OpenAI-compatible: the base URL ending in /v1.
    llm_url: str = ""
    llm_api_key: SecretStr | None = None
    llm_connect_timeout_s: float = Field(default=5.0, gt=0)
    llm_first_token_timeout_s: float = Field(default=120.0, gt=0)
    llm_idle_timeout_s: float = Field(default=30.0, gt=0)
    llm_total_timeout_s: float = Field(default=300.0, gt=0)
    llm_max_tokens: int = Field(default=512, ge=1, le=32768)
    llm_temperature: float = Field(default=0.2, ge=0.0, le=2.0)
    # Embedded llama.cpp: a GGUF file (empty: the packaged SmolLM2-135M-Instruct), threads (0: half the
    # CPUs, so other processes on the machine do not stall llama.cpp), parallel slots and context tokens
    # per slot.
    llamacpp_model_path: Path | None = None
    llamacpp_threads: int = Field(default=0, ge=0, le=256)
    llamacpp_parallel: int = Field(default=4, ge=1, le=64)
    llamacpp_context_tokens: int = Field(default=4096, ge=256, le=131072)
    llamacpp_cache_prompt: bool = True
    # Tokens llama.cpp processes per step across slots: smaller keeps streams flowing while another
    # request's prompt is read, larger reads long prompts a little faster.
    llamacpp_batch_tokens: int = Field(default=512, ge=32, le=8192)
    # Repetition controls of llama.cpp's sampler for the embedded model (small models loop): a
    # penalty on tokens of the last ``repeat_last_n``, and the DRY sampler against repeated phrases
    # (0 turns each off).
    llamacpp_repeat_penalty: float = Field(default=1.1, ge=1.0, le=2.0)
    llamacpp_repeat_last_n: int = Field(default=128, ge=0, le=4096)
    llamacpp_dry_multiplier: float = Field(default=0.8, ge=0.0, le=5.0)


class ChatSettings(LLMSettings):
    """The chat service: the LLM, sessions, answer modes, prompts and the Kol-Zchut contract."""

    model_config = settings_config("RAGBOT_CHAT_")
    host: str = "127.0.0.1"
    port: int = 8003
    retriever_url: str = "http://127.0.0.1:8002"
    retriever_timeout_s: float = Field(default=30.0, gt=0)
    # The ingest service, for the web UI's documents page (uploads, jobs, indexed pages) and how long
    # the UI's proxy waits for it (uploads included).
    ingest_url: str = "http://127.0.0.1:8001"
    ingest_timeout_s: float = Field(default=120.0, gt=0)
    # The key chat sends to the retriever and ingest (scopes retrieve and ingest), if they require one.
    service_key: SecretStr | None = None
    # Sessions in Redis: lifetime (refreshed on every turn), turns kept, turns sent to the LLM.
    session_ttl_s: int = Field(default=86400, ge=60)
    max_turns: int = Field(default=20, ge=1, le=1000)
    history_turns: int = Field(default=3, ge=0, le=100)
    # Answers kept for feedback and Kol-Zchut ratings.
    message_ttl_s: int = Field(default=30 * 86400, ge=60)
    # Rated or commented answers kept for review and export (GET /v1/feedback), under their own keys.
    feedback_ttl_s: int = Field(default=365 * 86400, ge=60)
    max_question_chars: int = Field(default=1000, ge=1, le=100000)
    default_mode: Literal["strict", "grounded", "open", "quote"] = "grounded"
    default_language: Literal["auto", "he", "en"] = "auto"
    # A folder of prompt files (<language>/<name>.txt) overriding the packaged ones, file by file.
    prompts_dir: Path | None = None
    # The fixed answer when strict mode finds nothing relevant, per language (empty: the prompt file).
    no_documents_answer: dict[str, str] = Field(default_factory=dict)
    # Retrieval for chat: candidates per branch, pages and paragraphs per page, minimum confidence 0..1.
    retrieval_size: int = Field(default=50, ge=1, le=1000)
    paragraphs_per_page: list[int] = Field(
        default_factory=lambda: list(DEFAULT_PARAGRAPHS_PER_PAGE), min_length=1
    )
    relevance_threshold: float = Field(default=0.0, ge=0.0, le=1.0)
    # Characters of paragraph text per answer (empty: 1000 for the small embedded model, 8000 otherwise).
    context_max_chars: int | None = Field(default=None, ge=200)
    # Characters of earlier turns sent with a follow-up and its rewrite (empty: 600 for the embedded
    # model, 6000 otherwise); the oldest turns go first, then answers are clipped.
    history_max_chars: int | None = Field(default=None, ge=0)
    # The document field whose text goes to the LLM (the definition's field_for_llm).
    document_text_field: str = "content"
    rewrite_followups: bool = True
    rewrite_max_tokens: int = Field(default=64, ge=8, le=1024)
    sse_ping_s: float = Field(default=15.0, gt=0)
    # The quote mode (ragbot.chat.quote, no LLM): sentences quoted at most; the score the best must
    # reach, else the turn abstains (cosine of the retriever's model, question vs sentence, plus
    # lexical_weight x the share of the question's tokens the sentence holds, plus the cross-language
    # bonus when the sentence is not in the question's language: e5-small's cosines across Hebrew and
    # English run about that much lower); how far below the best another may be; the token share a
    # sentence needs when the retriever cannot score; the model (empty: the retriever's choice,
    # multilingual-e5-small when loaded); paragraph characters read. Figures: docs/benchmarks.md.
    quote_max_sentences: int = Field(default=3, ge=1, le=20)
    quote_min_score: float = Field(default=0.86, ge=-1.0, le=2.0)
    quote_margin: float = Field(default=0.04, ge=0.0, le=2.0)
    quote_lexical_min_score: float = Field(default=0.5, ge=0.0, le=1.0)
    quote_lexical_weight: float = Field(default=0.1, ge=0.0, le=1.0)
    quote_cross_language_bonus: float = Field(default=0.08, ge=0.0, le=1.0)
    quote_model: str = ""
    quote_context_chars: int = Field(default=6000, ge=200, le=200_000)
    # Abstention in strict and quote mode (ragbot.chat.answerability): on, and the linear rule over
    # the turn's evidence (bias, dense_top, dense_gap, bm25_gap, agree, coverage, threshold), fitted on
    # the tuning half of samples/kolzchut/abstention_questions.json by bench/answers/abstention.py --fit.
    abstention_enabled: bool = True
    abstention_rule: dict[str, float] = Field(default_factory=lambda: dict(ABSTENTION_RULE))
    # The rule for a question in another language than its best paragraph (None: the rule above for both).
    abstention_rule_cross_language: dict[str, float] | None = Field(
        default_factory=lambda: dict(ABSTENTION_RULE_CROSS)
    )
    # The rule for a question in another language than its best paragraph that the retriever also
    # searched with a tuned query encoder (RAGBOT_RETRIEVER_QUERY_TUNING_PATH): it weighs the tuned
    # list's best cosine (tuned_top) beside the untuned one's. None: the cross-language rule above.
    abstention_rule_cross_language_tuned: dict[str, float] | None = Field(
        default_factory=lambda: dict(ABSTENTION_RULE_CROSS_LANGUAGE_TUNED)
    )
    # The retriever's dense branches the rule was fitted on (the shipped config/definition.json); with
    # other branches the rule does not decide (empty: decide with any).
    abstention_branches: list[str] = Field(default_factory=lambda: list(ABSTENTION_BRANCHES))
    # For such a turn on which the retriever's question memory voted too (RAGBOT_RETRIEVER_QUESTION_
    # MEMORY_PATH): the tuned rule's features and the memory's (memory_best, memory_agree). None: the
    # tuned rule above.
    abstention_rule_cross_language_memory: dict[str, float] | None = Field(
        default_factory=lambda: dict(ABSTENTION_RULE_CROSS_LANGUAGE_MEMORY)
    )
    # For a question in its best paragraph's language on which the retriever's question memory voted:
    # the same-language rule's features and the memory's (memory_best, memory_agree). None: the
    # same-language rule.
    abstention_rule_memory: dict[str, float] | None = Field(
        default_factory=lambda: dict(ABSTENTION_RULE_MEMORY)
    )
    # The learned question-paragraph gate on the rule (ragbot.chat.pair_gate): a turn the rule answers
    # still abstains when its best paragraph's probability is under the gate's threshold. The path is a
    # gate file written by bench/answers/pair_gate.py (None: the one shipped with ragbot).
    abstention_gate_enabled: bool = True
    abstention_gate_path: Path | None = None
    # A question that asks an amount or a duration (ragbot.chat.answer_kind) is answered only by a
    # source sentence that states one, scoring at most this far below the best sentence; none: the
    # turn abstains, in every mode that abstains. A negative value, or abstention off, turns it off.
    answer_kind_margin: float = Field(default=0.1, ge=-1.0, le=2.0)
    # Paragraphs that are the site's furniture (ragbot.chat.boilerplate) never become sources.
    boilerplate_filter: bool = True
    # Strict mode sends only the LLM's sentences one source holds at least this share of the words of
    # (ragbot.chat.grounding, the answers benchmark's test of support); 0: no check. When none passes,
    # the answer quotes the sources' own sentences instead.
    strict_support_min: float = Field(default=0.6, ge=0.0, le=1.0)
    # ... and at least this share of the sentence's neighbouring word pairs in the source's order
    # (ragbot.text.support.order_share), so a shuffle of a source's words is not sent; 0: no check.
    strict_order_min: float = Field(default=0.6, ge=0.0, le=1.0)
    # Kol-Zchut contract: answer mode of /search, models offered by /get_config_metadata (empty: the
    # configured one), those that ignore temperature, largest num_of_pages.
    kolzchut_mode: Literal["strict", "grounded", "open", "quote"] = "strict"
    available_models: list[str] = Field(default_factory=list)
    models_without_temperature: list[str] = Field(default_factory=list)
    max_num_of_pages: int = Field(default=10, ge=1, le=100)
    # Kol-Zchut widget endpoints (/kzchatbot/v0/*, what the KZChatbot React app calls): questions per
    # uuid per day, uuid (cookie) lifetime in days, percent of new uuids shown the chatbot, banned words
    # or phrases (403), longest rating text, the time zone whose midnight resets the daily count, and
    # the browser origins CORS allows on these routes (empty: same origin only).
    widget_daily_questions: int = Field(default=100, ge=0, le=100000)
    widget_cookie_days: int = Field(default=365, ge=1, le=3650)
    widget_shown_percent: int = Field(default=100, ge=0, le=100)
    widget_banned_words: list[str] = Field(default_factory=list)
    widget_feedback_chars: int = Field(default=1000, ge=1, le=100000)
    widget_timezone: str = "UTC"
    widget_cors_origins: list[str] = Field(default_factory=list)
    # LLM admission control (ragbot.chat.admission): answers generated at once by this process (empty:
    # llamacpp_parallel for the embedded model, 8 for a server), answers that may wait for a slot, and
    # how long one waits; past the queue (or the wait) a 503 with Retry-After of busy_retry_after_s.
    max_concurrent_generations: int | None = Field(default=None, ge=1, le=1024)
    max_queued_generations: int = Field(default=32, ge=0, le=100_000)
    generation_queue_timeout_s: float = Field(default=120.0, gt=0)
    busy_retry_after_s: int = Field(default=5, ge=1, le=3600)

    @field_validator("widget_timezone")
    @classmethod
    def _known_timezone(cls, value: str) -> str:
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"unknown time zone {value!r} (an IANA name such as Asia/Jerusalem)") from None
        return value

    @property
    def context_budget_chars(self) -> int:
        """Paragraph characters per answer: the setting, else a default that suits the backend."""
        if self.context_max_chars is not None:
            return self.context_max_chars
        return 1000 if self.llm_backend == "llamacpp" else 8000

    @property
    def generation_slots(self) -> int:
        """Answers generated at once: the setting, else the embedded model's slots, else 8."""
        if self.max_concurrent_generations is not None:
            return self.max_concurrent_generations
        return self.llamacpp_parallel if self.llm_backend == "llamacpp" else 8

    @property
    def history_budget_chars(self) -> int:
        """Characters of earlier turns per prompt: the setting, else a default that suits the backend."""
        if self.history_max_chars is not None:
            return self.history_max_chars
        return 600 if self.llm_backend == "llamacpp" else 6000
