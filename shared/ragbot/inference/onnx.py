"""ONNX Runtime on the CPU: export a torch model in memory and open a session for it.

The retriever's query encoder (``ragbot.embedders.onnx_query``) and the int8 reranker
(``ragbot.rerankers.onnx``) both export local weights at ``warm_up``; nothing is written to disk or
downloaded. ``ragbot export-onnx`` (``ragbot.embedders.onnx_folder``) writes the same graphs to files
for images without torch, which open them with ``cpu_session`` too. torch and onnxruntime are imported
only when called.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

__all__ = ["cpu_session", "export_graph"]


def export_graph(
    model: Any,
    call: Callable[..., Any],
    sample: Mapping[str, Any],
    *,
    output: str,
    output_axes: Mapping[int, str],
) -> bytes:
    """The ONNX graph of ``call(model, **inputs)`` traced on ``sample`` (input tensors by name); every
    input has dynamic batch and token axes, the output the axes named in ``output_axes``."""
    import torch

    names = list(sample)

    class _Graph(torch.nn.Module):
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner  # registered, so its weights are the graph's initialisers

        def forward(self, *tensors: Any) -> Any:
            return call(self.inner, **dict(zip(names, tensors, strict=True)))

    buffer = io.BytesIO()
    axes: dict[str, Mapping[int, str]] = {n: {0: "batch", 1: "tokens"} for n in names}
    export: Any = torch.onnx.export  # typed for paths; a buffer works too
    with torch.inference_mode():
        export(
            _Graph(model),
            tuple(sample[n] for n in names),
            buffer,
            input_names=names,
            output_names=[output],
            dynamic_axes={**axes, output: dict(output_axes)},
            opset_version=17,
            dynamo=False,
        )
    return buffer.getvalue()


def sentence_transformer_graph(model: Any) -> bytes:
    """A SentenceTransformer's transformer module as ONNX: token ids and mask in, the last hidden state
    out (pooling stays with the caller), batch and token axes dynamic."""
    sample = model.tokenizer(["a question", "a longer sample question"], return_tensors="pt", padding=True)
    return export_graph(
        model[0].auto_model.eval(),
        lambda inner, **inputs: inner(**inputs).last_hidden_state,
        {"input_ids": sample["input_ids"], "attention_mask": sample["attention_mask"]},
        output="last_hidden_state",
        output_axes={0: "batch", 1: "tokens"},
    )


def cpu_session(graph: bytes | Path, *, threads: int = 0) -> Any:
    """An ONNX Runtime CPU session for a serialized graph or a ``.onnx`` file (``threads`` 0: one per
    core)."""
    import onnxruntime as ort  # type: ignore[import-untyped]

    options = ort.SessionOptions()
    if threads > 0:
        options.intra_op_num_threads = threads
    options.log_severity_level = 3
    # No busy-waiting between runs: on a small box the spinning threads took the CPU that
    # BM25, the dense search and the reranker needed (docs/benchmarks.md, "Design figures").
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.add_session_config_entry("session.inter_op.allow_spinning", "0")
    source = str(graph) if isinstance(graph, Path) else graph
    return ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
