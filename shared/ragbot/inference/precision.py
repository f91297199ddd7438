"""Which floating-point precision a torch model runs in, and casting it there.

``ModelSettings.precision`` ("auto" by default) is resolved per model when it loads:

* ``float16`` on CUDA (as before: half the memory, tensor cores);
* ``bfloat16`` on a CPU with AMX tiles and AVX-512 BF16 (Intel Sapphire Rapids and newer), for
  batched work (indexing passages, reranking 20 pairs): oneDNN runs the matrix products on the AMX
  units, about 2.5x the float32 throughput, and the vectors differ from float32's by a cosine of
  about 1e-5 (measured: ``docs/benchmarks.md``);
* ``bfloat16`` for the embedders' passage batches (``embedder_precision``) on a CPU with AVX-512 BF16
  but no AMX (AMD Zen 4 and newer, Intel Cooper Lake): oneDNN's bfloat16 dot products there run
  MiniLM's batches about 1.75x faster than float32 and e5's about 1.4x, vectors within a cosine of
  0.998 of float32's (measured on an AMD EPYC: ``docs/benchmarks.md``, issue 31). The reranker keeps
  float32 there: its 20 pairs were not measured to gain;
* ``float32`` everywhere else, and for short inputs one at a time (a single query), where the
  model's cost is dispatch, not arithmetic, and bfloat16 only adds casts.

An explicit "float32", "bfloat16" or "float16" is used as given (float16 on a CPU is slow in most
kernels; it is allowed because someone may measure otherwise on their hardware).
"""

from __future__ import annotations

import functools
from typing import Any, Literal

from ragbot.settings import Precision

Resolved = Literal["float32", "bfloat16", "float16"]

__all__ = [
    "Precision",
    "Resolved",
    "cast_model",
    "cpu_has_bfloat16_dot",
    "cpu_has_fast_bfloat16",
    "embedder_precision",
    "resolve_precision",
]


@functools.cache
def cpu_has_fast_bfloat16() -> bool:
    """True when this CPU has AMX tiles and AVX-512 BF16 (torch reports both)."""
    import torch  # heavy: only when a model is about to load

    cpu: Any = torch.cpu
    try:
        return bool(cpu._is_amx_tile_supported() and cpu._is_avx512_bf16_supported())
    except AttributeError:  # an older torch without the probes: assume not
        return False


@functools.cache
def cpu_has_bfloat16_dot() -> bool:
    """True when this CPU has AVX-512 BF16 (bfloat16 dot products), with or without AMX."""
    import torch

    cpu: Any = torch.cpu
    try:
        return bool(cpu._is_avx512_bf16_supported())
    except AttributeError:
        return False


def resolve_precision(setting: Precision, *, device: str, batched: bool = True) -> Resolved:
    """The precision a model on ``device`` runs in for the configured ``setting``."""
    if setting != "auto":
        return setting
    if device.startswith("cuda"):
        return "float16"
    if batched and cpu_has_fast_bfloat16():
        return "bfloat16"
    return "float32"


def embedder_precision(setting: Precision, *, device: str, batched: bool) -> Resolved:
    """``resolve_precision`` for an embedding model: bfloat16 for batches on any CPU with bfloat16
    dot products too (AVX-512 BF16 with or without AMX)."""
    resolved = resolve_precision(setting, device=device, batched=batched)
    if setting == "auto" and resolved == "float32" and batched and device == "cpu" and cpu_has_bfloat16_dot():
        return "bfloat16"
    return resolved


def cast_model(model: Any, precision: Resolved) -> None:
    """Cast a torch module (a SentenceTransformer, a CrossEncoder's model) in place.

    float32 casts too: transformers 5 loads a checkpoint in the dtype it was saved in, so a folder
    saved in float16 would otherwise run float16 on a CPU while ragbot reports float32 (``.to`` is a
    no-op for a module already in the dtype).
    """
    import torch

    dtypes = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    model.to(dtypes[precision])
