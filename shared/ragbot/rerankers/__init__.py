"""Rerankers behind the ``Reranker`` port: a cross-encoder adapter and the training that builds one.

``build_reranker`` is the one place that turns settings into an adapter: a configured folder gives a
``CrossEncoderReranker`` (not loaded; call ``warm_up``), no folder gives None (no rerank stage). The
folder is a cross-encoder (torch) or its ONNX export (``ragbot export-onnx --reranker``: no torch).
Training (``ragbot.rerankers.training``) imports torch lazily and is not re-exported here.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ragbot.errors import RerankError
from ragbot.inference.precision import Precision
from ragbot.rerankers.cross_encoder import CrossEncoderReranker, Device

if TYPE_CHECKING:
    from ragbot.settings import ModelSettings, RetrieverSettings

__all__ = ["CrossEncoderReranker", "RerankError", "build_reranker", "configured_reranker"]


def build_reranker(
    path: Path | None,
    *,
    device: Device = "auto",
    batch_size: int = 32,
    max_length: int | None = None,
    quantize: bool = False,
    precision: Precision = "auto",
    threads: int = 0,
) -> CrossEncoderReranker | None:
    """The configured cross-encoder, not loaded, or None when no reranker is configured."""
    if path is None:
        return None
    return CrossEncoderReranker(
        path,
        device=device,
        batch_size=batch_size,
        max_length=max_length,
        quantize=quantize,
        precision=precision,
        threads=threads,
    )


def configured_reranker(
    retriever: RetrieverSettings, models: ModelSettings, *, path: Path | None = None
) -> CrossEncoderReranker | None:
    """``build_reranker`` from settings: ``path`` (default ``retriever.reranker_path``), the models'
    device and precision, the retriever's max length and int8 switch."""
    return build_reranker(
        path if path is not None else retriever.reranker_path,
        device=models.device,
        max_length=retriever.reranker_max_length,
        quantize=retriever.reranker_quantize,
        precision=models.precision,
        threads=models.torch_threads,
    )
