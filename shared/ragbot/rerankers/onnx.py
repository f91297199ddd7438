"""A cross-encoder through ONNX Runtime with int8 weights: the reranker's fast path on CPUs without AMX.

On a CPU with only AVX2 (no AVX-512, no AMX) torch has no fast low-precision kernel for a
cross-encoder: bfloat16 is emulated and torch's dynamic int8 quantization gains little. ONNX
Runtime's dynamic quantization (int8 weights, activations quantized per call) runs the matrix products
on its integer kernels. The model is exported in memory at ``warm_up`` from the local folder:
nothing is downloaded. Scores are the sigmoid of the logit, as ``CrossEncoder.predict`` returns.

For a host without torch (the CPU images), ``ragbot export-onnx --reranker FOLDER`` writes the same
graph to a folder (``export_cross_encoder``: ``model.onnx``, ``tokenizer.json``, ``ragbot-onnx.json``;
float32, or int8 with ``--int8``) and ``OnnxCrossEncoder.from_folder`` runs it with the ``tokenizers``
library alone.
"""

from __future__ import annotations

import json
import logging
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ragbot.errors import ConfigurationError
from ragbot.inference.onnx import cpu_session, export_graph

logger = logging.getLogger(__name__)

__all__ = ["MANIFEST", "OnnxCrossEncoder", "export_cross_encoder", "is_exported_reranker"]

MANIFEST = "ragbot-onnx.json"  # as ragbot.embedders.onnx_folder's, with "kind": "cross-encoder"


class OnnxCrossEncoder:
    """(query, passage) -> relevance 0..1 of a one-logit sequence-classification model, on ONNX Runtime."""

    def __init__(
        self,
        session: Any,
        tokenizer: Any,
        *,
        max_length: int,
        inputs: Sequence[str],
        precision: str = "int8",
    ) -> None:
        self._session = session
        self._tokenizer = tokenizer
        self.max_length = max_length
        self._inputs = tuple(inputs)
        self.precision = precision  # of the weights: "int8" (quantized) or "float32"

    @classmethod
    def build(cls, model: Any, *, threads: int = 0) -> OnnxCrossEncoder | None:
        """Export a sentence-transformers ``CrossEncoder`` (CPU, one label) with int8 weights; None
        when that fails."""
        try:
            graph, names = _graph(model)
            session = cpu_session(_quantized(graph), threads=threads)
        except Exception as exc:  # an exporter or quantizer that cannot handle the model: torch still works
            logger.warning("reranker stays on torch: ONNX export failed: %s", exc)
            return None
        return cls(session, model.tokenizer, max_length=int(model.max_length or 512), inputs=names)

    @classmethod
    def from_folder(cls, folder: Path, *, threads: int = 0) -> OnnxCrossEncoder:
        """The export ``export_cross_encoder`` wrote (no torch needed)."""
        path = folder / MANIFEST
        try:
            manifest = json.loads(path.read_text(encoding="utf-8"))
            if manifest.get("kind") != "cross-encoder":
                raise ValueError(f"kind {manifest.get('kind')!r}, not a cross-encoder")
            max_length, inputs = int(manifest["max_length"]), [str(n) for n in manifest["inputs"]]
            pad_id, precision = int(manifest["pad_id"]), str(manifest.get("precision", "float32"))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ConfigurationError(f"cannot read the reranker export manifest {path}: {exc}") from None
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        tokenizer.enable_truncation(max_length=max_length, strategy="longest_first")
        tokenizer.enable_padding(pad_id=pad_id)
        session = cpu_session(folder / "model.onnx", threads=threads)
        return cls(
            session, _PairTokenizer(tokenizer), max_length=max_length, inputs=inputs, precision=precision
        )

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


def is_exported_reranker(folder: Path) -> bool:
    """True when ``folder`` holds an ONNX export of a cross-encoder (``export_cross_encoder``)."""
    return (folder / MANIFEST).is_file()


def export_cross_encoder(
    source: Path, target: Path, *, int8: bool = False, max_length: int | None = None
) -> int:
    """Export the cross-encoder folder ``source`` into ``target`` (needs torch); the token limit
    (``max_length``, else the model's) is returned."""
    from sentence_transformers import CrossEncoder

    model: Any = CrossEncoder(str(source), device="cpu", local_files_only=True, max_length=max_length)
    backend = getattr(model.tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise ConfigurationError(f"{source}: only a fast tokenizer (tokenizer.json) can be exported")
    graph, names = _graph(model)
    limit = int(model.max_length or 512)
    target.mkdir(parents=True, exist_ok=True)
    (target / "model.onnx").write_bytes(_quantized(graph) if int8 else graph)
    backend.save(str(target / "tokenizer.json"))
    manifest = {
        "kind": "cross-encoder",
        "format": 1,
        "max_length": limit,
        "inputs": names,
        "pad_id": int(model.tokenizer.pad_token_id or 0),
        "precision": "int8" if int8 else "float32",
        "source": str(source),
    }
    (target / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return limit


def _graph(model: Any) -> tuple[bytes, list[str]]:
    """The float32 graph of a ``CrossEncoder`` (logits out) and the names of its inputs."""
    sample = model.tokenizer(
        ["a question", "another"], ["a passage", "a longer passage"], return_tensors="pt"
    )
    names = [n for n in ("input_ids", "attention_mask", "token_type_ids") if n in sample]
    graph = export_graph(
        model.model.eval(),
        lambda inner, **inputs: inner(**inputs).logits,
        {n: sample[n] for n in names},
        output="logits",
        output_axes={0: "batch"},
    )
    return graph, names


class _PairTokenizer:
    """A ``tokenizers.Tokenizer`` called as ``OnnxCrossEncoder.score`` calls a transformers one."""

    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer

    def __call__(self, queries: list[str], passages: list[str], **_: Any) -> dict[str, Any]:
        encodings = self._tokenizer.encode_batch(list(zip(queries, passages, strict=True)))
        return {
            "input_ids": np.asarray([e.ids for e in encodings], dtype=np.int64),
            "attention_mask": np.asarray([e.attention_mask for e in encodings], dtype=np.int64),
            "token_type_ids": np.asarray([e.type_ids for e in encodings], dtype=np.int64),
        }


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
