"""The cross-encoder adapter: a sentence-transformers ``CrossEncoder`` folder behind the ``Reranker`` port.

The folder is any sequence-classification model with one output (``ragbot train-reranker`` writes
one). Scores are the model's sigmoid outputs, 0..1, so a score floor and a gap ratio
(``RetrieverSettings.rerank_min_score`` / ``rerank_gap_ratio``) read as probabilities.

A cross-encoder reads every (query, paragraph) pair whole, so its cost grows with candidates x
tokens x layers (timings per size in docs/benchmarks.md). ``precision`` "auto" runs it in bfloat16
on a CPU with AMX (scores close to float32's: ``ragbot.inference.precision``) and float16 on CUDA.
``quantize=True`` (int8 dynamic quantization of the linear layers, CPU only, wins over ``precision``)
is faster than float32 on a CPU; ``max_length`` caps the tokens per pair.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from ragbot.errors import ConfigurationError, RerankError
from ragbot.inference.device import resolve_device
from ragbot.inference.precision import Precision, cast_model, resolve_precision
from ragbot.rerankers.onnx import OnnxCrossEncoder, is_exported_reranker

logger = logging.getLogger(__name__)

Device = Literal["auto", "cpu", "cuda"]


class CrossEncoderReranker:
    """A cross-encoder loaded from a folder; construction only stores configuration, ``warm_up`` loads."""

    def __init__(
        self,
        path: Path | str,
        *,
        device: Device = "auto",
        batch_size: int = 32,
        max_length: int | None = None,
        quantize: bool = False,
        precision: Precision = "auto",
        threads: int = 0,
    ) -> None:
        self.path = Path(path)
        self.threads = threads  # an ONNX export's session threads (0: one per core)
        self.name = self.path.name
        self.device: Device = device
        self.batch_size = batch_size
        self.max_length = max_length
        self.quantize = quantize
        self.precision: Precision = precision
        self.resolved_precision = ""
        self.runtime = ""
        self._model: Any = None
        self._onnx: OnnxCrossEncoder | None = None
        self._load_lock = threading.Lock()
        self._score_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"CrossEncoderReranker(path={str(self.path)!r})"

    @property
    def loaded(self) -> bool:
        """True once ``warm_up`` has loaded the model."""
        return self._model is not None

    def warm_up(self) -> None:
        """Load the model once (CUDA in fp16 when present and device is "auto"; int8 when ``quantize``,
        else ``precision``); idempotent."""
        if self._model is not None:
            return
        with self._load_lock:
            if self._model is not None:
                return
            if is_exported_reranker(self.path):
                self._warm_up_export()
                return
            if not (self.path / "config.json").is_file():
                raise ConfigurationError(
                    f"reranker folder {self.path} has no config.json (train one with `ragbot train-reranker`)"
                )
            try:
                import torch
                from sentence_transformers import CrossEncoder

                device = resolve_device(self.device)
                model = CrossEncoder(
                    str(self.path), device=device, local_files_only=True, max_length=self.max_length
                )
                onnx: OnnxCrossEncoder | None = None
                if self.quantize and device == "cpu":
                    # int8 through ONNX Runtime's integer kernels; torch's dynamic quantization if the
                    # export fails (docs/benchmarks.md compares the two).
                    onnx = OnnxCrossEncoder.build(model, threads=torch.get_num_threads())
                    if onnx is None:
                        quantize_dynamic: Any = torch.ao.quantization.quantize_dynamic  # untyped in torch
                        quantize_dynamic(model.model, {torch.nn.Linear}, dtype=torch.qint8, inplace=True)
                    precision = "int8"
                else:
                    resolved = resolve_precision(self.precision, device=device)
                    cast_model(model.model, resolved)
                    precision = resolved
                model.eval()
            except ImportError as exc:  # an image without torch (deploy/Dockerfile's CPU variants)
                raise RerankError(
                    f"reranker {self.path} is a cross-encoder folder and needs torch and "
                    f"sentence-transformers, which this installation lacks ({exc}); export it with "
                    "`ragbot export-onnx --reranker FOLDER --out DIR` and point "
                    "RAGBOT_RETRIEVER_RERANKER_PATH at the export, or install ragbot-retriever[torch]"
                ) from exc
            except Exception as exc:  # vendor errors of every kind (OSError, ValueError, RuntimeError)
                raise RerankError(f"could not load reranker from {self.path}: {exc}") from exc
            self._model, self._onnx, self.resolved_precision = model, onnx, precision
            self.runtime = "onnxruntime" if onnx is not None else "torch"
            logger.info(
                "reranker loaded",
                extra={
                    "path": str(self.path),
                    "device": device,
                    "precision": precision,
                    "runtime": self.runtime,
                },
            )

    def _warm_up_export(self) -> None:
        """An ONNX export (``ragbot export-onnx --reranker``): ONNX Runtime on the CPU, no torch."""
        try:
            onnx = OnnxCrossEncoder.from_folder(self.path, threads=self.threads)
        except ConfigurationError:
            raise
        except Exception as exc:  # ImportError, onnxruntime and tokenizers errors
            raise RerankError(f"could not load the reranker export {self.path}: {exc}") from exc
        self._model, self._onnx, self.resolved_precision = onnx, onnx, onnx.precision
        self.runtime = "onnxruntime"
        logger.info(
            "reranker loaded",
            extra={
                "path": str(self.path),
                "device": "cpu",
                "precision": onnx.precision,
                "runtime": "onnxruntime",
            },
        )

    def score(self, query: str, passages: Sequence[str]) -> list[float]:
        """One relevance score (0..1) per passage, in the order given."""
        if self._model is None:
            raise RerankError(f"reranker {self.path} is not loaded: call warm_up() first")
        if isinstance(passages, str):
            raise TypeError("pass a sequence of passages, not a single string")
        if not passages:
            return []
        try:
            with self._score_lock:
                if self._onnx is not None:
                    return self._onnx.score(query, passages)
                raw = self._model.predict(
                    [(query, p) for p in passages],
                    batch_size=self.batch_size,
                    show_progress_bar=False,
                    convert_to_numpy=True,
                )
        except Exception as exc:  # torch/tokenizer errors become ours
            raise RerankError(f"reranker {self.path} failed on {len(passages)} pairs: {exc}") from exc
        return [float(s) for s in raw.reshape(-1)]

    def close(self) -> None:
        """Free the model (and the GPU memory it held)."""
        with self._load_lock:
            model, self._model, self._onnx = self._model, None, None
        if model is not None and str(getattr(model, "device", "")).startswith("cuda"):
            import torch

            del model
            torch.cuda.empty_cache()
