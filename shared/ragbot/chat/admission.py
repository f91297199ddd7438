"""LLM admission control: a bounded number of answers generated at once, a bounded wait, then a 503.

One gate per chat process. A turn takes a slot before its first byte goes out, so a full queue is
refused at once with ``LLMBusy`` (503 + ``Retry-After``) instead of a client waiting minutes::

    slot = await gate.acquire()     # at once, after a bounded wait, or LLMBusy
    try: ...generate...
    finally: slot.release()         # idempotent: a stream's end and its client leaving may both call it
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge

from ragbot.errors import LLMBusy
from ragbot.observability.metrics import PerRegistry
from ragbot.settings import ChatSettings


@dataclass(frozen=True, slots=True)
class AdmissionMetrics:
    """Generations running and waiting, and turns refused (queue full or wait over)."""

    active: Gauge
    waiting: Gauge
    refused: Counter


def _new_metrics(registry: CollectorRegistry) -> AdmissionMetrics:
    return AdmissionMetrics(
        active=Gauge("ragbot_llm_generations_active", "Answers being generated now.", registry=registry),
        waiting=Gauge("ragbot_llm_generations_waiting", "Answers waiting for a slot.", registry=registry),
        refused=Counter(
            "ragbot_llm_admission_refused_total",
            "Answers refused with 503 by admission control, by reason (queue_full, wait_timeout).",
            ["reason"],
            registry=registry,
        ),
    )


admission_metrics = PerRegistry(_new_metrics)


class Slot:
    """One generation slot; ``release`` gives it back once, however often it is called."""

    def __init__(self, gate: AdmissionGate | None) -> None:
        self._gate: AdmissionGate | None = gate  # None: a turn that calls no LLM holds nothing

    def release(self) -> None:
        """Give the slot back (the next waiter, if any, takes it)."""
        gate, self._gate = self._gate, None
        if gate is not None:
            gate._release()


class AdmissionGate:
    """At most ``max_active`` generations at once, at most ``max_waiting`` waiting up to ``wait_s``."""

    def __init__(
        self,
        *,
        max_active: int,
        max_waiting: int,
        wait_s: float,
        retry_after_s: int,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.max_active = max_active
        self.max_waiting = max_waiting
        self.wait_s = wait_s
        self.retry_after_s = retry_after_s
        self._slots = asyncio.Semaphore(max_active)
        self.active = 0
        self.waiting = 0
        self.metrics = admission_metrics(registry)

    @classmethod
    def from_settings(
        cls, settings: ChatSettings, *, registry: CollectorRegistry | None = None
    ) -> AdmissionGate:
        """The gate the chat settings describe."""
        return cls(
            max_active=settings.generation_slots,
            max_waiting=settings.max_queued_generations,
            wait_s=settings.generation_queue_timeout_s,
            retry_after_s=settings.busy_retry_after_s,
            registry=registry,
        )

    def _busy(self, reason: str, message: str) -> LLMBusy:
        self.metrics.refused.labels(reason).inc()
        return LLMBusy(message, retry_after_s=self.retry_after_s)

    async def acquire(self, *, needs_llm: bool = True) -> Slot:
        """A slot now, or after waiting in the bounded queue; ``LLMBusy`` at once when the queue is full.
        A turn that calls no LLM (``quote`` mode) gets an empty slot at once."""
        if not needs_llm:
            return Slot(None)
        if self._slots.locked() or self.waiting:
            if self.waiting >= self.max_waiting:
                raise self._busy(
                    "queue_full",
                    f"the LLM is busy: {self.max_active} answers are being generated and "
                    f"{self.waiting} are waiting; retry in {self.retry_after_s} s",
                )
            self.waiting += 1
            self.metrics.waiting.set(self.waiting)
            try:
                await asyncio.wait_for(self._slots.acquire(), timeout=self.wait_s)
            except TimeoutError:
                raise self._busy(
                    "wait_timeout",
                    f"the LLM is busy: no generation slot freed within {self.wait_s:g} s; "
                    f"retry in {self.retry_after_s} s",
                ) from None
            finally:
                self.waiting -= 1
                self.metrics.waiting.set(self.waiting)
        else:
            await self._slots.acquire()
        self.active += 1
        self.metrics.active.set(self.active)
        return Slot(self)

    def _release(self) -> None:
        self.active -= 1
        self.metrics.active.set(self.active)
        self._slots.release()
