"""A vector cache on disk, so repeated evaluations embed each text once."""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from ragbot.ports import Embedder, Vector

logger = logging.getLogger(__name__)


class VectorCache:
    """An ``Embedder`` that remembers every vector it computed in a file (evaluation only).

    Keys are SHA-1 of (kind, text); the file is ``<model name>.npz`` under the cache folder
    (``<model name>-<precision>.npz`` when the model runs in bfloat16 or float16) and is written by
    ``flush``. Token counting and everything else go to the wrapped model.
    """

    def __init__(self, inner: Embedder, *, folder: Path) -> None:
        self.inner = inner
        self.name = inner.name
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in inner.name)
        self.path = Path(folder) / f"{safe}.npz"
        self._rows: dict[bytes, Vector] = {}
        self._dirty = False
        self._loaded = False
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    @property
    def dimension(self) -> int:
        """The wrapped model's vector size."""
        return self.inner.dimension

    @property
    def max_tokens(self) -> int:
        """The wrapped model's input limit."""
        return self.inner.max_tokens

    def warm_up(self) -> None:
        """Load the wrapped model and the cached vectors."""
        self.inner.warm_up()
        with self._lock:
            if self._loaded:
                return
            precision = str(getattr(self.inner, "resolved_precision", "") or "float32")
            if precision != "float32":  # other vectors than float32's: a file of their own
                self.path = self.path.with_name(f"{self.path.stem}-{precision}.npz")
            if self.path.is_file():
                with np.load(self.path) as data:
                    keys, vectors = data["keys"], data["vectors"]
                if vectors.ndim == 2 and vectors.shape[1] == self.inner.dimension:
                    self._rows = {bytes(k): vectors[i] for i, k in enumerate(keys)}
                else:
                    logger.warning(
                        "ignoring %s: its vectors do not have %d dimensions", self.path, self.dimension
                    )
            self._loaded = True

    def count_tokens(self, text: str) -> int:
        """The wrapped model's token count."""
        return self.inner.count_tokens(text)

    def embed_queries(self, texts: Sequence[str]) -> Vector:
        """Query vectors, from the file where present."""
        return self._embed("q", texts, self.inner.embed_queries)

    def embed_passages(self, texts: Sequence[str]) -> Vector:
        """Passage vectors, from the file where present."""
        return self._embed("p", texts, self.inner.embed_passages)

    def _embed(self, kind: str, texts: Sequence[str], compute: Callable[[Sequence[str]], Vector]) -> Vector:
        keys = [hashlib.sha1(f"{kind}\x00{t}".encode()).digest() for t in texts]
        with self._lock:
            missing = list(dict.fromkeys(t for t, k in zip(texts, keys, strict=True) if k not in self._rows))
        if missing:
            fresh = compute(missing)
            with self._lock:
                for text, row in zip(missing, fresh, strict=True):
                    self._rows[hashlib.sha1(f"{kind}\x00{text}".encode()).digest()] = np.asarray(
                        row, dtype=np.float32
                    )
                self._dirty = True
        with self._lock:
            self.misses += len(missing)
            self.hits += len(texts) - len(missing)
            if not texts:
                return np.zeros((0, self.dimension), dtype=np.float32)
            out: Vector = np.stack([self._rows[k] for k in keys]).astype(np.float32, copy=False)
        return out

    def flush(self) -> None:
        """Write the cache file if anything new was computed (atomically)."""
        with self._lock:
            if not self._dirty:
                return
            keys = list(self._rows)
            vectors = np.stack([self._rows[k] for k in keys]) if keys else np.zeros((0, 0), np.float32)
            self._dirty = False
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, suffix=".npz")
        os.close(fd)
        np.savez(tmp, keys=np.array(keys, dtype="S20"), vectors=vectors)
        os.replace(tmp, self.path)

    def close(self) -> None:
        """Write the cache, then free the wrapped model."""
        self.flush()
        self.inner.close()
