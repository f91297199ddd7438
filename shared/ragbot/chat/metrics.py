"""Prometheus metrics of the chat service, registered once per registry (tests pass a fresh one)."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Histogram

from ragbot.observability.metrics import PerRegistry
from ragbot.ports import Usage

TTFT_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0)
RATE_BUCKETS = (1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 50.0, 75.0, 100.0, 200.0, 500.0)


@dataclass(frozen=True, slots=True)
class ChatMetrics:
    """What every answer records."""

    time_to_first_token: Histogram
    llm_time_to_first_token: Histogram
    tokens_per_second: Histogram
    answers: Counter
    abstentions: Counter
    strict_sentences: Counter
    feedback: Counter
    llm_errors: Counter
    llm_tokens: Counter

    def count_tokens(self, backend: str, usage: Usage, stage: str) -> None:
        """Add a generation's tokens to ``ragbot_llm_tokens_total`` (input only when the server said)."""
        if usage.prompt_tokens:
            self.llm_tokens.labels(backend, "input", stage).inc(usage.prompt_tokens)
        if usage.completion_tokens:
            self.llm_tokens.labels(backend, "output", stage).inc(usage.completion_tokens)


def _new(registry: CollectorRegistry) -> ChatMetrics:
    return ChatMetrics(
        time_to_first_token=Histogram(
            "ragbot_chat_time_to_first_token_seconds",
            "From the question arriving to the first answer token sent, by mode and channel.",
            ["mode", "channel"],
            buckets=TTFT_BUCKETS,
            registry=registry,
        ),
        llm_time_to_first_token=Histogram(
            "ragbot_llm_time_to_first_token_seconds",
            "From the LLM call to its first token, by backend.",
            ["backend"],
            buckets=TTFT_BUCKETS,
            registry=registry,
        ),
        tokens_per_second=Histogram(
            "ragbot_llm_tokens_per_second",
            "Completion tokens per second after the first token, by backend.",
            ["backend"],
            buckets=RATE_BUCKETS,
            registry=registry,
        ),
        answers=Counter(
            "ragbot_chat_answers_total",
            "Answers by mode, channel (api, openai, kolzchut) and outcome (answered, abstained, error).",
            ["mode", "channel", "outcome"],
            registry=registry,
        ),
        abstentions=Counter(
            "ragbot_chat_abstentions_total",
            "Fixed 'no relevant documents' answers given without calling the LLM, by mode.",
            ["mode"],
            registry=registry,
        ),
        strict_sentences=Counter(
            "ragbot_chat_strict_sentences_total",
            "Strict-mode LLM sentences by outcome: kept (a source holds them) or dropped (none does).",
            ["outcome"],
            registry=registry,
        ),
        feedback=Counter(
            "ragbot_chat_feedback_total",
            "Feedback received, by channel and rating (up, down, none).",
            ["channel", "rating"],
            registry=registry,
        ),
        llm_errors=Counter(
            "ragbot_llm_errors_total",
            "LLM calls that failed or timed out, by backend and stage (answer, rewrite).",
            ["backend", "stage"],
            registry=registry,
        ),
        llm_tokens=Counter(
            "ragbot_llm_tokens_total",
            "LLM tokens by backend, direction (input: the prompt, output: the completion) and stage.",
            ["backend", "direction", "stage"],
            registry=registry,
        ),
    )


# The chat metrics of a registry (the default one unless given), created on first use.
chat_metrics = PerRegistry(_new)
