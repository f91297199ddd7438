"""The one test fake behind the ``Reranker`` port: a score per passage text, looked up in a dict."""

from __future__ import annotations

from collections.abc import Sequence


class FakeReranker:
    """Implements ``ragbot.ports.Reranker``: ``scores[passage]``, 0 for others; ``seen``: the last batch."""

    def __init__(self, scores: dict[str, float]) -> None:
        self.scores = scores
        self.seen: list[str] = []

    def warm_up(self) -> None:
        """Nothing to load."""

    def score(self, query: str, passages: Sequence[str]) -> list[float]:
        """The score set for each passage."""
        self.seen = list(passages)
        return [self.scores.get(p, 0.0) for p in passages]

    def close(self) -> None:
        """Nothing to free."""
