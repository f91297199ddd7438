"""LLM adapters behind the ``ChatModel`` port, and the one factory that picks them from settings.

    llm = build_llm(settings=get_llm_settings())    # nothing loaded or connected yet
    await asyncio.to_thread(llm.warm_up)
    async for piece in llm.stream(messages=[ChatMessage("user", "hi")]):
        ...

Backends: ``llamacpp`` (embedded llama.cpp with a local GGUF, the default), ``ollama`` (official
client) and ``openai`` (any OpenAI-compatible server over httpx).
"""

from __future__ import annotations

from ragbot.errors import LLMError
from ragbot.llms.base import complete, with_timeouts
from ragbot.ports import ChatModel, TokenStream, Usage
from ragbot.settings import LLMSettings

__all__ = ["LLMError", "TokenStream", "Usage", "build_llm", "complete", "with_timeouts"]


def build_llm(*, settings: LLMSettings) -> ChatModel:
    """The configured adapter, not yet warmed up."""
    if settings.llm_backend == "ollama":
        from ragbot.llms.ollama import OllamaChatModel

        return OllamaChatModel(
            model=settings.llm_model or "qwen2.5:3b-instruct",
            host=settings.llm_url,
            connect_timeout_s=settings.llm_connect_timeout_s,
            read_timeout_s=settings.llm_first_token_timeout_s,
        )
    if settings.llm_backend == "openai":
        from ragbot.llms.openai_compat import OpenAICompatChatModel

        return OpenAICompatChatModel(
            model=settings.llm_model or "default",
            base_url=settings.llm_url,
            api_key=settings.llm_api_key,
            connect_timeout_s=settings.llm_connect_timeout_s,
            read_timeout_s=settings.llm_first_token_timeout_s,
        )
    from ragbot.llms.llamacpp import LlamaCppChatModel, Repetition

    return LlamaCppChatModel(
        model_path=settings.llamacpp_model_path,
        model_name=settings.llm_model,
        threads=settings.llamacpp_threads,
        parallel=settings.llamacpp_parallel,
        context_tokens=settings.llamacpp_context_tokens,
        cache_prompt=settings.llamacpp_cache_prompt,
        batch_tokens=settings.llamacpp_batch_tokens,
        repetition=Repetition(
            penalty=settings.llamacpp_repeat_penalty,
            last_n=settings.llamacpp_repeat_last_n,
            dry_multiplier=settings.llamacpp_dry_multiplier,
        ),
    )
