"""The one test fake behind the ``Embedder`` port: a hashed bag of words, no model."""

from __future__ import annotations

import hashlib
import re
import threading
import time
from collections.abc import Sequence

import numpy as np

from ragbot.errors import EmbeddingError
from ragbot.ports import Vector

_WORD = re.compile(r"\w+")


class HashEmbedder:
    """Implements ``ragbot.ports.Embedder`` without a model.

    Vectors are hashed bags of words (salted with the model's name, so two models disagree),
    L2-normalised: equal texts give equal vectors, texts sharing words are close. Every batch is
    recorded (``calls``, ``texts``, ``query_calls``, ``passage_calls``).
    ``fail_on`` makes any batch holding that word raise ``EmbeddingError``; ``broken`` makes every
    query batch raise it (passages still embed, as a store built earlier would hold them);
    ``seconds_per_text`` slows every batch, ``query_delay_s`` each query batch; ``passages_only``
    turns a query into an ``AssertionError`` (for code that must never embed one).
    """

    def __init__(
        self,
        name: str = "hash-embedder",
        *,
        dimension: int = 32,
        max_tokens: int = 512,
        fail_on: str | None = None,
        broken: bool = False,
        seconds_per_text: float = 0.0,
        query_delay_s: float = 0.0,
        passages_only: bool = False,
    ) -> None:
        self.name = name
        self._dimension = dimension
        self._max_tokens = max_tokens
        self.fail_on = fail_on
        self.broken = broken
        self.seconds_per_text = seconds_per_text
        self.query_delay_s = query_delay_s
        self.passages_only = passages_only
        self.calls: list[int] = []  # size of every batch, queries and passages, in order
        self.texts: list[str] = []  # every text embedded, in order
        self.query_calls: list[list[str]] = []
        self.passage_calls: list[list[str]] = []
        self.loaded = False
        self._lock = threading.Lock()

    @property
    def dimension(self) -> int:
        """Vector size."""
        return self._dimension

    @property
    def max_tokens(self) -> int:
        """Longest input, in words plus two specials."""
        return self._max_tokens

    def warm_up(self) -> None:
        """Nothing to load."""
        self.loaded = True

    def count_tokens(self, text: str) -> int:
        """Words plus two special tokens."""
        return len(_WORD.findall(text)) + 2

    def embed_queries(self, texts: Sequence[str]) -> Vector:
        """Same vectors as passages; fails when ``broken``, waits ``query_delay_s``."""
        if self.passages_only:
            raise AssertionError(f"{self.name} embeds passages only")
        self._record(texts, self.query_calls)
        if self.broken:
            raise EmbeddingError(f"{self.name} is broken")
        if self.query_delay_s:
            time.sleep(self.query_delay_s)
        return self._embed(texts)

    def embed_passages(self, texts: Sequence[str]) -> Vector:
        """Hashed bag of words per text."""
        self._record(texts, self.passage_calls)
        return self._embed(texts)

    def close(self) -> None:
        """Nothing to free."""
        self.loaded = False

    def embedded(self) -> str:
        """Every passage embedded so far, one per line (for 'was this text embedded?')."""
        return "\n".join(t for batch in self.passage_calls for t in batch)

    def vectors(self, texts: Sequence[str]) -> Vector:
        """The vectors of ``texts``, without recording, failing or waiting."""
        matrix = np.zeros((len(texts), self._dimension), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in _WORD.findall(text.lower()) or [""]:
                digest = hashlib.blake2b(f"{self.name}:{word}".encode(), digest_size=4).digest()
                matrix[row, int.from_bytes(digest, "little") % self._dimension] += 1.0
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        normalised: Vector = (matrix / norms).astype(np.float32)
        return normalised

    def _record(self, texts: Sequence[str], kind: list[list[str]]) -> None:
        with self._lock:
            kind.append(list(texts))
            self.calls.append(len(texts))
            self.texts.extend(texts)

    def _embed(self, texts: Sequence[str]) -> Vector:
        if self.fail_on is not None and any(self.fail_on in t for t in texts):
            raise EmbeddingError(f"{self.name} refuses texts containing {self.fail_on!r}")
        if self.seconds_per_text:
            time.sleep(self.seconds_per_text * len(texts))
        return self.vectors(texts)
