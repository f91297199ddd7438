"""The one test fake each of the command sender and the event publisher: what was sent, in lists."""

from __future__ import annotations

from dataclasses import dataclass, field

from pydantic import BaseModel

from ragbot.errors import DependencyUnavailable
from ragbot.schemas.messages import PageDeleted, PageIndexed


@dataclass
class FakeSender:
    """Records what would have gone to the queue (task, message, request id); ``broken`` refuses."""

    sent: list[tuple[str, BaseModel, str | None]] = field(default_factory=list)
    # The countdown a command was sent with, by its index in ``sent`` (none: at once).
    countdowns: dict[int, float] = field(default_factory=dict)
    broken: bool = False

    async def send(
        self, *, task: str, message: BaseModel, request_id: str | None = None, countdown: float | None = None
    ) -> str:
        """Record the command; a task id ``t<n>``."""
        if self.broken:
            raise DependencyUnavailable("could not enqueue: connection refused", dependency="redis")
        if countdown is not None:
            self.countdowns[len(self.sent)] = countdown
        self.sent.append((task, message, request_id))
        return f"t{len(self.sent)}"


@dataclass
class FakeEvents:
    """Records every event ``EventPublisher.publish`` would have put on the stream."""

    published: list[PageIndexed | PageDeleted] = field(default_factory=list)

    async def publish(self, event: PageIndexed | PageDeleted) -> str:
        """Record the event; a stream id."""
        self.published.append(event)
        return "1-0"
