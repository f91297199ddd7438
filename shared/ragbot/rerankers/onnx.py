"""A cross-encoder through ONNX Runtime with int8 weights: the reranker's fast path on CPUs without AMX.

On a CPU with only AVX2 (no AVX-512, no AMX) torch has no fast low-precision kernel for a
cross-encoder: bfloat16 is emulated and torch's dynamic int8 quantization gains little. ONNX
Runtime's dynamic quantization (int8 weights, activations quantized per call) runs the matrix products
on its integer kernels. The model is exported in memory at ``warm_up`` from the local folder:
nothing is downloaded. Scores are the sigmoid of the logit, as ``CrossEncoder.predict`` returns.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ragbot.inference.onnx import cpu_session, export_graph

logger = logging.getLogger(__name__)

__all__ = ["OnnxCrossEncoder"]


class OnnxCrossEncoder:
    """(query, passage) -> relevance 0..1 of a one-logit sequence-classification model, on ONNX Runtime."""

    def __init__(self, session: Any, tokenizer: Any, *, max_length: int, inputs: Sequence[str]) -> None:
        self._session = session
        self._tokenizer = tokenizer
        self.max_length = max_length
        self._inputs = tuple(inputs)

    @classmethod
    def build(cls, model: Any, *, threads: int = 0) -> OnnxCrossEncoder | None:
        """Export a sentence-transformers ``CrossEncoder`` (CPU, one label) with int8 weights; None
        when that fails."""
        try:
            tokenizer = model.tokenizer
            sample = tokenizer(
                ["a question", "another"], ["a passage", "a longer passage"], return_tensors="pt"
            )
            names = [n for n in ("input_ids", "attention_mask", "token_type_ids") if n in sample]
            graph = _quantized(
                export_graph(
                    model.model.eval(),
                    lambda inner, **inputs: inner(**inputs).logits,
                    {n: sample[n] for n in names},
                    output="logits",
                    output_axes={0: "batch"},
                )
            )
            session = cpu_session(graph, threads=threads)
        except Exception as exc:  # an exporter or quantizer that cannot handle the model: torch still works
            logger.warning("reranker stays on torch: ONNX export failed: %s", exc)
            return None
        return cls(session, tokenizer, max_length=int(model.max_length or 512), inputs=names)

    def score(self, query: str, passages: Sequence[str]) -> list[float]:
        """Sigmoid relevance per passage, truncated as ``CrossEncoder`` truncates (longest first)."""
        features = self._tokenizer(
            [query] * len(passages),
            list(passages),
            padding=True,
            truncation="longest_first",
            max_length=self.max_length,
            return_tensors="np",
        )
        feed = {n: np.asarray(features[n], dtype=np.int64) for n in self._inputs}
        logits = np.asarray(self._session.run(None, feed)[0], dtype=np.float64).reshape(-1)
        return [float(s) for s in 1.0 / (1.0 + np.exp(-logits))]


def _quantized(graph: bytes) -> bytes:
    """The graph with int8 weights (ONNX Runtime dynamic quantization of MatMul and Gemm)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic  # type: ignore[import-untyped]

    root = logging.getLogger()
    hint = _DropHint()  # the quantizer logs a pre-processing suggestion on the root logger each time
    root.addFilter(hint)
    try:
        with tempfile.TemporaryDirectory(prefix="ragbot-reranker-") as tmp:
            source, target = Path(tmp) / "model.onnx", Path(tmp) / "model.int8.onnx"
            source.write_bytes(graph)
            quantize_dynamic(
                source, target, weight_type=QuantType.QInt8, op_types_to_quantize=["MatMul", "Gemm"]
            )
            return target.read_bytes()
    finally:
        root.removeFilter(hint)


class _DropHint(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "pre-processing before quantization" not in record.getMessage()
