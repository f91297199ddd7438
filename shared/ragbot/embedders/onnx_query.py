"""One query at a time through ONNX Runtime: the retriever's query embedding without torch's overhead.

A single short question costs MiniLM little arithmetic; in torch most of its time is Python
dispatch over about a hundred modules, and more so inside the retriever, beside BM25 and the kNN
searches on the same cores. The same transformer exported to ONNX (in memory, at ``warm_up``, from the
local weights: nothing is downloaded) skips that dispatch, and ONNX Runtime releases the GIL (figures
in docs/benchmarks.md, "Design figures").

Only plain models are exported: a SentenceTransformer of ``Transformer`` + ``Pooling`` (mean or CLS)
[+ ``Normalize``]. Anything else (dense heads, other poolings) stays on torch, as does any model
whose export fails; ``build`` then returns None and says why in the log.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np

from ragbot.inference.onnx import cpu_session, sentence_transformer_graph
from ragbot.ports import Vector

logger = logging.getLogger(__name__)

__all__ = ["OnnxQueryEncoder"]


_POOLINGS = {"mean", "cls"}


class OnnxQueryEncoder:
    """The pooled (not normalised) output of a SentenceTransformer, computed by ONNX Runtime."""

    def __init__(self, session: Any, tokenizer: Any, *, pooling: str, max_tokens: int) -> None:
        self._session = session
        self._tokenizer = tokenizer
        self.pooling = pooling
        self.max_tokens = max_tokens

    @classmethod
    def build(cls, model: Any, *, threads: int = 0) -> OnnxQueryEncoder | None:
        """Export ``model`` (a SentenceTransformer on the CPU); None when it is not a plain model
        or onnxruntime is missing or the export fails."""
        names = [type(m).__name__ for m in model]
        if names not in (["Transformer", "Pooling"], ["Transformer", "Pooling", "Normalize"]):
            logger.info("query encoder stays on torch: modules %s are not exported", names)
            return None
        pooling = str(model[1].get_config_dict().get("pooling_mode", ""))
        if pooling not in _POOLINGS:
            logger.info("query encoder stays on torch: pooling %r is not exported", pooling)
            return None
        try:
            graph = sentence_transformer_graph(model)
            session = cpu_session(graph, threads=threads)
        except Exception as exc:  # a model the exporter cannot trace: torch still works
            logger.warning("query encoder stays on torch: ONNX export failed: %s", exc)
            return None
        max_tokens = int(model.max_seq_length or model.tokenizer.model_max_length)
        return cls(session, model.tokenizer, pooling=pooling, max_tokens=max_tokens)

    def encode(self, texts: Sequence[str]) -> Vector:
        """Pooled vectors, shape (n, dimension), float32, truncated at the model's token limit."""
        features = self._tokenizer(
            list(texts), padding=True, truncation=True, max_length=self.max_tokens, return_tensors="np"
        )
        ids = np.asarray(features["input_ids"], dtype=np.int64)
        mask = np.asarray(features["attention_mask"], dtype=np.int64)
        hidden = self._session.run(None, {"input_ids": ids, "attention_mask": mask})[0]
        if self.pooling == "cls":
            pooled = hidden[:, 0]
        else:
            weights = mask[..., None].astype(np.float32)
            pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
        result: Vector = np.ascontiguousarray(pooled, dtype=np.float32)
        return result
