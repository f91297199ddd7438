"""The sentence-transformers adapter: any SentenceTransformer folder behind the ``Embedder`` port."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from ragbot.embedders._counting import tokenizer_counter
from ragbot.embedders.onnx_query import OnnxQueryEncoder
from ragbot.errors import EmbeddingError
from ragbot.inference.device import resolve_device
from ragbot.inference.precision import Precision, cast_model, embedder_precision
from ragbot.ports import Vector

logger = logging.getLogger(__name__)

Device = Literal["auto", "cpu", "cuda"]


def l2_normalise(matrix: Any) -> Vector:
    """Rows as float32 unit vectors (fp16 models and custom heads are not trusted to normalise)."""
    out = np.asarray(matrix, dtype=np.float32)
    if out.ndim == 1:
        out = out.reshape(1, -1)
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    np.maximum(norms, 1e-12, out=norms)
    result: Vector = np.ascontiguousarray(out / norms, dtype=np.float32)
    return result


class SentenceTransformerEmbedder:
    """A SentenceTransformer model; construction only stores configuration, ``warm_up`` loads it.

    ``count_tokens`` counts what the model is fed for a passage: the passage prefix, the text and
    the special tokens ([CLS]/[SEP]) once, without truncation. Packing code that sums several
    pieces must subtract the fixed overhead (``count_tokens`` of an empty input's specials) so the
    special tokens are not counted twice; ``ragbot.indexing.paragraphs`` does.
    """

    def __init__(
        self,
        name: str,
        path: Path | str,
        *,
        device: Device = "auto",
        batch_size: int = 32,
        query_prefix: str = "",
        passage_prefix: str = "",
        precision: Precision = "auto",
        batched: bool = True,
        query_runtime: Literal["auto", "torch", "onnx"] = "auto",
    ) -> None:
        self.name = name
        self.path = Path(path)
        self.device: Device = device
        self.batch_size = batch_size
        self.query_prefix = query_prefix
        self.passage_prefix = passage_prefix
        self.precision: Precision = precision
        # False for a process that embeds one query at a time (the retriever): "auto" then keeps
        # float32 on a CPU, where bfloat16 only pays off for batches (ragbot.inference.precision).
        self.batched = batched
        # "auto": a one-query-at-a-time process on a CPU runs queries through ONNX Runtime
        # (ragbot.embedders.onnx_query, several times faster per query); "torch" never does.
        self.query_runtime = query_runtime
        self._onnx: OnnxQueryEncoder | None = None
        self._model: Any = None
        self._counter: Callable[[str], int] | None = None
        self._dimension = 0
        self._max_tokens = 0
        self._resolved_device = ""
        self._resolved_precision = ""
        self._load_lock = threading.Lock()
        self._encode_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"SentenceTransformerEmbedder(name={self.name!r}, path={str(self.path)!r})"

    @property
    def loaded(self) -> bool:
        """True once ``warm_up`` has loaded the model."""
        return self._model is not None

    @property
    def resolved_device(self) -> str:
        """The device the model runs on ("cpu" or "cuda"), once loaded."""
        return self._resolved_device

    @property
    def resolved_precision(self) -> str:
        """The precision the model runs in ("float32", "bfloat16", "float16"), once loaded."""
        return self._resolved_precision

    @property
    def dimension(self) -> int:
        """Vector size, read from the model; 0 until ``warm_up`` (so ``isinstance`` checks never load)."""
        return self._dimension if self._model is not None else 0

    @property
    def max_tokens(self) -> int:
        """The model's ``max_seq_length`` (longer inputs are truncated); 0 until ``warm_up``."""
        return self._max_tokens if self._model is not None else 0

    def warm_up(self) -> None:
        """Load the model once per process: CUDA with fp16 when present (device "auto"), else CPU
        (bfloat16 there when the CPU has AVX-512 BF16 and the work is batched:
        ``ragbot.inference.precision``)."""
        if self._model is not None:
            return
        with self._load_lock:
            if self._model is not None:
                return
            try:
                import torch
                from sentence_transformers import SentenceTransformer

                device = resolve_device(self.device)
                model = SentenceTransformer(str(self.path), device=device, local_files_only=True)
                precision = embedder_precision(self.precision, device=device, batched=self.batched)
                cast_model(model, precision)
                dimension = _dimension_of(model)
                max_tokens = int(model.max_seq_length or model.tokenizer.model_max_length)
                counter = _token_counter(model.tokenizer, self.passage_prefix)
                onnx = None
                if device == "cpu" and (
                    self.query_runtime == "onnx" or (self.query_runtime == "auto" and not self.batched)
                ):
                    onnx = OnnxQueryEncoder.build(model, threads=torch.get_num_threads())
            except EmbeddingError:
                raise
            except ImportError as exc:  # an image without torch (deploy/Dockerfile's CPU variant)
                raise EmbeddingError(
                    f"model {self.name!r} at {self.path} is a sentence-transformers folder and needs "
                    f"torch and sentence-transformers, which this installation lacks ({exc}); export it "
                    "to ONNX with `ragbot export-onnx` into RAGBOT_MODELS_LOCATION, or use an image "
                    "with torch (the CUDA variant)"
                ) from exc
            except Exception as exc:  # vendor errors of every kind (OSError, ValueError, RuntimeError)
                raise EmbeddingError(f"could not load model {self.name!r} from {self.path}: {exc}") from exc
            self._dimension, self._max_tokens, self._counter = dimension, max_tokens, counter
            self._resolved_device, self._resolved_precision = device, precision
            self._model, self._onnx = model, onnx
            logger.info(
                "embedding model loaded",
                extra={
                    "model": self.name,
                    "device": device,
                    "precision": precision,
                    "query_runtime": "onnx" if onnx is not None else "torch",
                    "dimension": dimension,
                    "max_len": max_tokens,
                },
            )

    def count_tokens(self, text: str) -> int:
        """Tokens the model is fed for ``text`` as a passage (prefix and specials included once)."""
        self._require_loaded()
        assert self._counter is not None
        return self._counter(text)

    def embed_queries(self, texts: Sequence[str]) -> Vector:
        """L2-normalised query vectors (query prefix applied), shape (n, dimension)."""
        if self._onnx is not None and texts and not isinstance(texts, str):
            try:
                return l2_normalise(self._onnx.encode([self.query_prefix + t for t in texts]))
            except Exception as exc:  # onnxruntime errors become ours
                raise EmbeddingError(
                    f"model {self.name!r} failed to encode {len(texts)} queries: {exc}"
                ) from exc
        return self._encode(texts, self.query_prefix)

    def embed_passages(self, texts: Sequence[str]) -> Vector:
        """L2-normalised passage vectors (passage prefix applied), shape (n, dimension)."""
        return self._encode(texts, self.passage_prefix)

    def close(self) -> None:
        """Free the model (and the GPU memory it held)."""
        with self._load_lock:
            model, self._model, self._counter, self._onnx = self._model, None, None, None
        if model is not None and self._resolved_device == "cuda":
            import torch

            del model
            torch.cuda.empty_cache()

    def _encode(self, texts: Sequence[str], prefix: str) -> Vector:
        self._require_loaded()
        if isinstance(texts, str):
            raise TypeError("pass a sequence of texts, not a single string")
        if not texts:
            return np.zeros((0, self._dimension), dtype=np.float32)
        try:
            with self._encode_lock:
                raw = self._encode_by_length(list(texts), prefix)
        except Exception as exc:  # torch/tokenizer errors become ours
            raise EmbeddingError(f"model {self.name!r} failed to encode {len(texts)} texts: {exc}") from exc
        return l2_normalise(raw)

    def _encode_by_length(self, texts: list[str], prefix: str) -> np.ndarray[Any, Any]:
        """The model's vectors for ``texts``, fed in batches of texts of similar token counts.

        ``SentenceTransformer.encode`` sorts a call's texts by characters, not tokens: over SciFact's
        paragraphs its batches of 32 carry 20% padding, token-sorted batches 3% (docs/benchmarks.md,
        issue 31). The counter that splits pages counts the tokens (cached per word; the prefix adds
        the same to every text and truncation the same cap, so neither changes the order), and each
        batch is one ``encode`` call.
        """
        if len(texts) <= self.batch_size:
            return self._encode_batch(texts, prefix)
        count = self._counter
        assert count is not None
        order = sorted(range(len(texts)), key=lambda i: -count(texts[i]))
        out = np.empty((len(texts), self._dimension), dtype=np.float32)
        for start in range(0, len(order), self.batch_size):
            rows = order[start : start + self.batch_size]
            out[rows] = self._encode_batch([texts[i] for i in rows], prefix)
        return out

    def _encode_batch(self, texts: list[str], prefix: str) -> np.ndarray[Any, Any]:
        """One batch of the model, as many texts as given."""
        result: np.ndarray[Any, Any] = self._model.encode(
            texts,
            prompt=prefix,
            batch_size=len(texts),
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return result

    def _require_loaded(self) -> None:
        if self._model is None:
            raise EmbeddingError(f"model {self.name!r} is not loaded: call warm_up() first")


def _dimension_of(model: Any) -> int:
    getter = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
    dimension = getter()
    if not dimension:
        raise EmbeddingError(f"the model at {model} does not report its embedding dimension")
    return int(dimension)


def _token_counter(tokenizer: Any, prefix: str) -> Callable[[str], int]:
    """A counter on a private copy of the fast tokenizer (no truncation, no padding, no shared state).

    The transformers wrapper keeps truncation/padding state in its backend tokenizer (MiniLM's ships
    with truncation at 128 and padding to 128), so counting through it would be wrong and not
    thread-safe. Whitespace-splitting tokenizers count word by word (see ``_counting``).
    """
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:  # a slow (pure Python) tokenizer: exact but slower

        def count_slow(text: str) -> int:
            ids = tokenizer(prefix + text, add_special_tokens=True, truncation=False, verbose=False)
            return len(ids["input_ids"])

        return count_slow

    return tokenizer_counter(backend, prefix)
