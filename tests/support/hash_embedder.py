"""A small deterministic embedder behind the ``Embedder`` port, for tests that are not about models.

Vectors are hashed bags of words, L2-normalised: equal texts give equal vectors, texts sharing words
are close. It counts its calls and texts, can fail on a marker word, and can be slowed down per text.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Sequence

import numpy as np

from ragbot.errors import EmbeddingError
from ragbot.ports import Vector

_WORD = re.compile(r"\w+")


class HashEmbedder:
    """Implements ``ragbot.ports.Embedder`` without a model."""

    def __init__(
        self,
        name: str = "hash-embedder",
        *,
        dimension: int = 32,
        max_tokens: int = 512,
        fail_on: str | None = None,
        seconds_per_text: float = 0.0,
    ) -> None:
        self.name = name
        self._dimension = dimension
        self._max_tokens = max_tokens
        self.fail_on = fail_on
        self.seconds_per_text = seconds_per_text
        self.calls: list[int] = []
        self.texts: list[str] = []
        self.loaded = False

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
        """Same as passages."""
        return self._embed(texts)

    def embed_passages(self, texts: Sequence[str]) -> Vector:
        """Hashed bag of words per text."""
        return self._embed(texts)

    def close(self) -> None:
        """Nothing to free."""
        self.loaded = False

    def _embed(self, texts: Sequence[str]) -> Vector:
        self.calls.append(len(texts))
        self.texts.extend(texts)
        if self.fail_on is not None and any(self.fail_on in t for t in texts):
            raise EmbeddingError(f"{self.name} refuses texts containing {self.fail_on!r}")
        if self.seconds_per_text:
            time.sleep(self.seconds_per_text * len(texts))
        matrix = np.zeros((len(texts), self._dimension), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in _WORD.findall(text.lower()) or [""]:
                digest = hashlib.blake2b(word.encode("utf-8"), digest_size=4).digest()
                matrix[row, int.from_bytes(digest, "little") % self._dimension] += 1.0
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        normalised: Vector = (matrix / norms).astype(np.float32)
        return normalised
