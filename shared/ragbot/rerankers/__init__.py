"""Rerankers behind the ``Reranker`` port: a cross-encoder adapter and the training that builds one.

``build_reranker`` is the one place that turns settings into an adapter: a configured folder gives a
``CrossEncoderReranker`` (not loaded; call ``warm_up``), no folder gives None (no rerank stage).
Training (``ragbot.rerankers.training``) imports torch lazily and is not re-exported here.
"""

from __future__ import annotations

from pathlib import Path

from ragbot.rerankers.cross_encoder import CrossEncoderReranker, Device, RerankError

__all__ = ["CrossEncoderReranker", "RerankError", "build_reranker"]


def build_reranker(
    path: Path | None,
    *,
    device: Device = "auto",
    batch_size: int = 32,
    max_length: int | None = None,
    quantize: bool = False,
) -> CrossEncoderReranker | None:
    """The configured cross-encoder, not loaded, or None when no reranker is configured."""
    if path is None:
        return None
    return CrossEncoderReranker(
        path, device=device, batch_size=batch_size, max_length=max_length, quantize=quantize
    )
