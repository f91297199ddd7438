"""LLM admission control (ragbot.chat.admission): bounded concurrency, a bounded queue, a 503 at once."""

from __future__ import annotations

import asyncio
import time

import pytest
from prometheus_client import CollectorRegistry

from ragbot.chat.admission import AdmissionGate
from ragbot.errors import DependencyUnavailable, LLMBusy
from ragbot.observability.http import _error_body, retry_after_headers
from ragbot.settings import ChatSettings


def gate(
    *, active: int = 2, waiting: int = 1, wait_s: float = 5.0
) -> tuple[AdmissionGate, CollectorRegistry]:
    registry = CollectorRegistry()
    built = AdmissionGate(
        max_active=active, max_waiting=waiting, wait_s=wait_s, retry_after_s=7, registry=registry
    )
    return built, registry


async def test_at_most_max_active_generations_run_and_a_waiter_gets_the_freed_slot() -> None:
    admission, registry = gate(active=2, waiting=1)
    first, second = await admission.acquire(), await admission.acquire()
    assert admission.active == 2
    third = asyncio.ensure_future(admission.acquire())
    await asyncio.sleep(0.05)
    assert not third.done() and admission.waiting == 1
    assert registry.get_sample_value("ragbot_llm_generations_waiting") == 1.0
    first.release()
    slot = await asyncio.wait_for(third, timeout=1.0)
    assert admission.active == 2 and admission.waiting == 0
    for held in (second, slot):
        held.release()
    assert admission.active == 0
    assert registry.get_sample_value("ragbot_llm_generations_active") == 0.0


async def test_past_the_queue_the_refusal_is_immediate_with_retry_after() -> None:
    admission, registry = gate(active=1, waiting=1)
    held = await admission.acquire()
    queued = asyncio.ensure_future(admission.acquire())
    await asyncio.sleep(0.01)
    started = time.perf_counter()
    with pytest.raises(LLMBusy) as refused:
        await admission.acquire()
    assert time.perf_counter() - started < 0.05
    assert refused.value.retry_after_s == 7 and refused.value.dependency == "llm"
    assert "1 answers are being generated and 1 are waiting" in str(refused.value)
    assert isinstance(refused.value, DependencyUnavailable)  # the widget's 503 and the worker's policy
    status, body = _error_body(refused.value)
    assert status == 503 and body["retry_after_s"] == 7 and body["dependency"] == "llm"
    assert retry_after_headers(refused.value) == {"Retry-After": "7"}
    assert registry.get_sample_value("ragbot_llm_admission_refused_total", {"reason": "queue_full"}) == 1.0
    held.release()
    (await asyncio.wait_for(queued, timeout=1.0)).release()


async def test_no_queue_means_busy_at_once_and_a_wait_is_bounded() -> None:
    no_queue, _ = gate(active=1, waiting=0)
    held = await no_queue.acquire()
    with pytest.raises(LLMBusy):
        await no_queue.acquire()
    held.release()
    (await no_queue.acquire()).release()

    short, registry = gate(active=1, waiting=3, wait_s=0.1)
    held = await short.acquire()
    started = time.perf_counter()
    with pytest.raises(LLMBusy, match=r"no generation slot freed within 0\.1 s"):
        await short.acquire()
    assert 0.09 < time.perf_counter() - started < 1.0
    assert short.waiting == 0
    assert registry.get_sample_value("ragbot_llm_admission_refused_total", {"reason": "wait_timeout"}) == 1.0
    held.release()
    assert short.active == 0


async def test_a_slot_released_twice_is_given_back_once() -> None:
    admission, _ = gate(active=1, waiting=0)
    slot = await admission.acquire()
    slot.release()
    slot.release()
    assert admission.active == 0
    again = await admission.acquire()
    with pytest.raises(LLMBusy):  # the double release did not make room for two
        await admission.acquire()
    again.release()


async def test_a_cancelled_waiter_leaves_the_queue() -> None:
    admission, _ = gate(active=1, waiting=1)
    held = await admission.acquire()
    waiter = asyncio.ensure_future(admission.acquire())
    await asyncio.sleep(0.01)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert admission.waiting == 0
    held.release()
    (await admission.acquire()).release()
    assert admission.active == 0


def test_the_gate_follows_the_chat_settings() -> None:
    settings = ChatSettings(
        max_concurrent_generations=3,
        max_queued_generations=5,
        generation_queue_timeout_s=2.5,
        busy_retry_after_s=9,
    )
    built = AdmissionGate.from_settings(settings, registry=CollectorRegistry())
    assert (built.max_active, built.max_waiting, built.wait_s, built.retry_after_s) == (3, 5, 2.5, 9)
    assert ChatSettings(llamacpp_parallel=6).generation_slots == 6  # the embedded model's own slots
    assert ChatSettings(llm_backend="ollama").generation_slots == 8


async def test_a_turn_without_an_llm_is_admitted_while_every_slot_is_busy() -> None:
    admission, _ = gate(active=1, waiting=0)
    held = await admission.acquire()
    with pytest.raises(LLMBusy):
        await admission.acquire()
    quote = await asyncio.wait_for(admission.acquire(needs_llm=False), timeout=1.0)
    assert admission.active == 1
    quote.release()
    quote.release()
    assert admission.active == 1
    held.release()
    assert admission.active == 0
