"""Benchmark the chat service's own overhead and 20 concurrent streaming sessions, with the embedded LLM.

Both services run in this process under uvicorn on free ports (real HTTP): the retriever over an
embedded store of sample Kol-Zchut pages (multilingual-e5-small), the chat service calling it over
HTTP and the embedded llama.cpp model (SmolLM2-135M) built by the same factory and settings as
``make run`` (threads, slots, batch, context, and every LLM timeout at its default), except prompt
caching, which is off while the overhead is measured so every prefill costs the same, and the
workload knobs below (short answers, a short context, no follow-up rewrite). Sessions need Redis:
``--redis-url``, default ``RAGBOT_TEST_REDIS_URL`` (set by ``make bench``), else ``RAGBOT_REDIS_URL``,
else the test Redis on 6390 (``make services-up`` starts one).

Overhead, side by side in one run, for the same questions in alternating order:

- baseline: ``POST /v1/retrieve`` on the retriever, then the model streaming the prompt the chat
  service builds: retrieval time + LLM time to first token;
- chat: ``POST /v1/sessions/{id}/messages``, from sending the request to receiving the first
  ``token`` event.

``chat_overhead_ms`` is the median over chat requests of the client's time to first token minus the
retrieval time and the LLM time to first token *of that same request* (the chat service reports both
in ``done.timings_ms``): everything the chat service adds (HTTP, session lookup, history, prompt,
SSE) with the LLM's run-to-run prefill noise taken out. ``chat_overhead_side_by_side_ms`` compares the
medians of the independent baseline runs and the chat runs; on a shared 2-core machine LLM prefill
varies by seconds between runs, so that figure is reported but is noise-dominated.

Then 20 sessions stream at once (``--parallel`` llama.cpp slots, default 4 as in ``make run``) under
the default timeouts (first token, idle, total): errors, and streams whose tokens do not add up to
their own ``done`` answer or to the turn stored in their session (interleaving), are counted.

Run: ``uv run python -m bench.chat.sessions [--questions 10] [--out bench/results/chat.json]``.
Prints a table and
writes flat JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import redis
import redis.asyncio as aioredis

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from support.chat_corpus import build_sample_store, open_engine, sample_definition  # noqa: E402
from support.chat_fakes import serve_app  # noqa: E402
from support.processes import delete_redis_prefix  # noqa: E402

from ragbot.chat.events import ChatRequest  # noqa: E402
from ragbot.chat.retriever import HttpRetriever  # noqa: E402
from ragbot.llms import build_llm  # noqa: E402
from ragbot.llms.llamacpp import LlamaCppChatModel, default_threads  # noqa: E402
from ragbot.prompts import detect_language  # noqa: E402
from ragbot.schemas.retrieval import RetrieveRequest  # noqa: E402
from ragbot.settings import ChatSettings  # noqa: E402
from ragbot_chat.app import assemble  # noqa: E402
from ragbot_chat.app import create_app as create_chat_app  # noqa: E402
from ragbot_chat.deps import Resources as ChatResources  # noqa: E402
from ragbot_retriever.app import create_app as create_retriever_app  # noqa: E402
from ragbot_retriever.deps import Resources as RetrieverResources  # noqa: E402

# English questions keep the prompts short (English prompt files; Hebrew costs a token per letter with
# SmolLM2's tokenizer); retrieval is cross-lingual with e5.
QUESTIONS = [
    "Who is exempt from income tax?",
    "Tax credit points for working teenagers",
    "Are student scholarships taxed?",
    "How do blind people get a tax exemption?",
    "Income tax credit points for women",
    "Which income is exempt from tax for the visually impaired?",
    "Do teenagers who work pay income tax?",
    "Is a scholarship counted as income?",
]
MAX_TOKENS = 16
CONTEXT_CHARS = 300


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def baseline(
    *, retriever: HttpRetriever, settings: ChatSettings, chat: ChatResources, question: str
) -> tuple[float, float]:
    """(retrieval ms, LLM time to first token ms) for what the chat service does for ``question``."""
    request = ChatRequest(question=question, mode="grounded", language=detect_language(question))
    t0 = time.perf_counter()
    response = await retriever.retrieve(
        RetrieveRequest(
            query=question,
            retrieval_size=settings.retrieval_size,
            paragraphs_per_page=settings.paragraphs_per_page,
        )
    )
    retrieval_ms = (time.perf_counter() - t0) * 1000
    selection = chat.pipeline.select_sources(request, response)
    messages = chat.pipeline.messages(request, selection.documents)
    stream = chat.llm.stream(messages=messages, temperature=settings.llm_temperature, max_tokens=MAX_TOKENS)
    t0 = time.perf_counter()
    ttft_ms = 0.0
    async for _ in stream:
        if not ttft_ms:
            ttft_ms = (time.perf_counter() - t0) * 1000
    return retrieval_ms, ttft_ms


async def chat_turn(
    client: httpx.AsyncClient, question: str
) -> tuple[float, dict[str, Any], str, list[str], str]:
    """(ms to the first token event, the done (or error) event, the tokens, event names, session id)."""
    session_id = (await client.post("/v1/sessions", json={"mode": "grounded"})).json()["session_id"]
    t0 = time.perf_counter()
    first_ms = 0.0
    tokens: list[str] = []
    names: list[str] = []
    done: dict[str, Any] = {}
    event = ""
    async with client.stream(
        "POST", f"/v1/sessions/{session_id}/messages", json={"question": question}
    ) as response:
        async for line in response.aiter_lines():
            if line.startswith("event: "):
                event = line[7:]
                names.append(event)
            elif line.startswith("data: "):
                data = json.loads(line[6:])
                if event == "token":
                    if not first_ms:
                        first_ms = (time.perf_counter() - t0) * 1000
                    tokens.append(data["text"])
                elif event in ("done", "error"):
                    done = data
    return first_ms, done, "".join(tokens), names, session_id


async def measure(
    *, chat_url: str, retriever_url: str, chat: ChatResources, questions: int
) -> dict[str, Any]:
    settings = chat.settings
    retriever = HttpRetriever(base_url=retriever_url, timeout_s=60)
    rows: list[dict[str, float]] = []
    async with httpx.AsyncClient(base_url=chat_url, timeout=1800) as client:
        await chat_turn(client, QUESTIONS[0])  # warm both paths (first HTTP connections, query cache)
        await baseline(retriever=retriever, settings=settings, chat=chat, question=QUESTIONS[0])
        for n in range(questions):
            question = QUESTIONS[n % len(QUESTIONS)]
            order = ("chat", "base") if n % 2 else ("base", "chat")
            row: dict[str, float] = {}
            for which in order:
                if which == "base":
                    row["base_retrieval_ms"], row["base_llm_ttft_ms"] = await baseline(
                        retriever=retriever, settings=settings, chat=chat, question=question
                    )
                else:
                    row["chat_ttft_ms"], done, _, _, _ = await chat_turn(client, question)
                    t = done["timings_ms"]
                    row["chat_retrieval_ms"], row["chat_llm_ttft_ms"] = t["retrieval_ms"], t["llm_ttft_ms"]
                    row["internal_ms"] = t["ttft_ms"] - t["retrieval_ms"] - t["llm_ttft_ms"]
            row["overhead_ms"] = row["chat_ttft_ms"] - row["chat_retrieval_ms"] - row["chat_llm_ttft_ms"]
            rows.append(row)
            print(
                f"  q{n:02d} baseline: retrieval {row['base_retrieval_ms']:6.1f} + llm ttft "
                f"{row['base_llm_ttft_ms']:8.1f} | chat ttft {row['chat_ttft_ms']:8.1f} = retrieval "
                f"{row['chat_retrieval_ms']:6.1f} + llm ttft {row['chat_llm_ttft_ms']:8.1f} + overhead "
                f"{row['overhead_ms']:6.2f} (in-service {row['internal_ms']:5.2f}) ms",
                flush=True,
            )

        # The concurrent phase runs with make run's prompt caching (a slot reuses the system prompt it
        # read last); the overhead phase above had it off so that every prefill cost the same.
        cache_prompt = ChatSettings().llamacpp_cache_prompt
        if isinstance(chat.llm, LlamaCppChatModel):
            chat.llm.cache_prompt = cache_prompt
        print(f"20 concurrent streaming sessions (prompt cache {cache_prompt}) ...", flush=True)
        started = time.perf_counter()
        results = await asyncio.gather(
            *(chat_turn(client, f"{QUESTIONS[n % len(QUESTIONS)]} #{n}") for n in range(20)),
            return_exceptions=True,
        )
        wall_s = time.perf_counter() - started
        errors = interleaved = 0
        ttfts: list[float] = []
        for result in results:
            if isinstance(result, BaseException):
                errors += 1
                print(f"  failed: {result!r}", flush=True)
                continue
            first_ms, done, tokens, names, session_id = result
            if "error" in names or not done or names[0] != "sources" or names[-1] != "done":
                errors += 1
                print(f"  failed: events {names}: {done.get('message')}", flush=True)
                continue
            stored = (await client.get(f"/v1/sessions/{session_id}")).json()["turns"]
            if tokens != done["answer"] or [t["answer"] for t in stored] != [tokens]:
                interleaved += 1
            ttfts.append(first_ms)
    await retriever.close()

    def med(key: str) -> float:
        return round(statistics.median(r[key] for r in rows), 2)

    baseline_ms = statistics.median(r["base_retrieval_ms"] + r["base_llm_ttft_ms"] for r in rows)
    return {
        "chat_overhead_ms": med("overhead_ms"),
        "chat_overhead_p90_ms": round(percentile([r["overhead_ms"] for r in rows], 0.9), 2),
        "chat_overhead_in_service_ms": med("internal_ms"),
        "chat_overhead_side_by_side_ms": round(med("chat_ttft_ms") - baseline_ms, 2),
        "chat_ttft_ms_median": med("chat_ttft_ms"),
        "chat_retrieval_ms_median": med("chat_retrieval_ms"),
        "chat_llm_ttft_ms_median": med("chat_llm_ttft_ms"),
        "baseline_retrieval_ms_median": med("base_retrieval_ms"),
        "baseline_llm_ttft_ms_median": med("base_llm_ttft_ms"),
        "baseline_total_ms_median": round(baseline_ms, 2),
        "chat_questions": len(rows),
        "chat_concurrent20_errors": errors,
        "chat_concurrent20_interleaved": interleaved,
        "chat_concurrent20_wall_s": round(wall_s, 2),
        "chat_concurrent20_cache_prompt": cache_prompt,
        "chat_concurrent20_ttft_p50_ms": round(percentile(ttfts, 0.5), 1) if ttfts else None,
        "chat_concurrent20_ttft_p95_ms": round(percentile(ttfts, 0.95), 1) if ttfts else None,
        "chat_llm": chat.llm.model,
        "chat_llm_parallel": settings.llamacpp_parallel,
        "chat_llm_threads": settings.llamacpp_threads or default_threads(),
        "chat_llm_batch_tokens": settings.llamacpp_batch_tokens,
        "chat_llm_context_tokens": settings.llamacpp_context_tokens,
        "chat_llm_first_token_timeout_s": settings.llm_first_token_timeout_s,
        "chat_llm_idle_timeout_s": settings.llm_idle_timeout_s,
        "chat_llm_total_timeout_s": settings.llm_total_timeout_s,
        "chat_max_tokens": MAX_TOKENS,
        "chat_context_chars": CONTEXT_CHARS,
        "machine": f"{platform.machine()} {os.cpu_count()} cpu, python {platform.python_version()}",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=8)
    parser.add_argument("--parallel", type=int, default=4, help="llama.cpp slots")
    parser.add_argument(
        "--redis-url",
        default=os.environ.get("RAGBOT_TEST_REDIS_URL")
        or os.environ.get("RAGBOT_REDIS_URL")
        or "redis://127.0.0.1:6390/0",
    )
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "chat.json")
    args = parser.parse_args()
    # The services' rate limits would refuse this load from one address; bench/security/limits.py
    # measures them. Set before the apps start, whose lifespans read it.
    os.environ["RAGBOT_RATE_LIMIT_ENABLED"] = "false"
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

    try:
        redis.Redis.from_url(args.redis_url, socket_connect_timeout=3).ping()
    except redis.RedisError as exc:
        raise SystemExit(
            f"Redis at {args.redis_url} does not answer ({exc}); `make services-up` starts one"
        ) from None

    workdir = Path(tempfile.mkdtemp(prefix="ragbot-bench-chat-"))
    store = workdir / "store.sqlite3"
    print("indexing the sample pages (multilingual-e5-small) ...", flush=True)
    asyncio.run(build_sample_store(store))

    prefix = f"bench-chat-{uuid.uuid4().hex[:8]}"
    # make run's settings (timeouts, threads, batch, context) with this bench's workload on top; init
    # arguments win over RAGBOT_CHAT_* variables, so a shell's environment cannot change the workload.
    settings = ChatSettings(
        llm_backend="llamacpp",
        llamacpp_model_path=None,
        llamacpp_parallel=args.parallel,
        llamacpp_cache_prompt=False,
        llm_max_tokens=MAX_TOKENS,
        context_max_chars=CONTEXT_CHARS,
        rewrite_followups=False,
    )
    llm = build_llm(settings=settings)
    llm.warm_up()
    built: list[ChatResources] = []

    @asynccontextmanager
    async def retriever_resources() -> AsyncIterator[RetrieverResources]:
        async with open_engine(store) as engine:
            yield RetrieverResources(
                engine=engine, store=engine.store, embedders=engine.embedders, definition=sample_definition()
            )

    with serve_app(create_retriever_app(resources=retriever_resources), start_timeout_s=120) as retriever_url:

        @asynccontextmanager
        async def chat_resources() -> AsyncIterator[ChatResources]:
            client = aioredis.Redis.from_url(args.redis_url)
            retriever = HttpRetriever(base_url=retriever_url, timeout_s=60)
            res = assemble(
                settings=settings, llm=llm, retriever=retriever, redis_client=client, key_prefix=prefix
            )
            built.append(res)
            try:
                yield res
            finally:
                await retriever.close()
                await client.aclose()

        with serve_app(create_chat_app(resources=chat_resources), start_timeout_s=120) as chat_url:
            print(f"retriever {retriever_url}  chat {chat_url}  llm {llm.model} x{args.parallel}", flush=True)
            results = asyncio.run(
                measure(
                    chat_url=chat_url, retriever_url=retriever_url, chat=built[0], questions=args.questions
                )
            )
    asyncio.run(llm.close())
    delete_redis_prefix(args.redis_url, prefix)

    width = max(len(k) for k in results)
    for key, value in results.items():
        print(f"{key:<{width}}  {value}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
