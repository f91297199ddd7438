"""multilingual-e5-small's query side tuned on a wiki's own questions: its bias terms, fitted and served.

An English question over Hebrew pages is where e5-small is weakest: the gold page of an English
question comes first far less often than for the same question in Hebrew. ``fit_biases`` fits only
the encoder's bias terms (BitFit, about 50,000 numbers) on (question, pages that answer it) pairs:
each question's softmax over the e5 passage vectors of every paragraph of the pages (temperature
``TuningOptions.temperature``), its gold pages' paragraphs as the positives. The passage vectors stay
as indexed, so nothing is re-embedded. ``save_biases`` writes them to a ``.npz`` file (the
``ragbot tune-queries`` command), and ``TunedE5Queries`` is the ``Embedder`` that embeds questions
with them (the retriever, ``RAGBOT_RETRIEVER_QUERY_TUNING_PATH``, for Latin-script questions only:
``ragbot.retrieval.tuned``).
"""

from __future__ import annotations

import json
import random
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ragbot.embedders.e5_torch import QUERY_PREFIX, TorchE5, _pad, packaged_e5_file
from ragbot.errors import ConfigurationError
from ragbot.ports import Vector

__all__ = [
    "TunedE5Queries",
    "TuningOptions",
    "configured_tuned",
    "fit_biases",
    "load_biases",
    "save_biases",
    "shipped_e5",
]

_ABOUT = "__about__"
_QUERY_TOKENS = 126  # a question's tokens fed in training (questions are short; e5 takes 510)


@dataclass(frozen=True, slots=True)
class TuningOptions:
    """How the biases are fitted (the values measured in docs/benchmarks.md, "query tuning")."""

    temperature: float = 0.02
    epochs: int = 3
    batch: int = 16
    learning_rate: float = 1e-3
    seed: int = 0


def shipped_e5() -> TorchE5:
    """The dequantized multilingual-e5-small on the CPU in float32, with the weights as shipped."""
    return TorchE5(packaged_e5_file(), device="cpu", precision="float32", onnx_queries=False)


def _query_vectors(e5: TorchE5, texts: Sequence[str]) -> Any:
    """Unit query vectors with gradients (``TorchE5.encode`` runs without them): mean-pooled, as e5."""
    import torch

    tok = e5.tokenizer
    rows = [
        [tok.bos, *ids[:_QUERY_TOKENS], tok.eos] for ids in tok.content_ids([QUERY_PREFIX + t for t in texts])
    ]
    ids, padding = _pad(rows)
    mask = torch.from_numpy(padding)
    hidden = e5._model(
        inputs_embeds=torch.from_numpy(e5._embeddings(ids)), attention_mask=mask
    ).last_hidden_state
    weights = mask.unsqueeze(-1).float()
    return torch.nn.functional.normalize((hidden * weights).sum(1) / weights.sum(1), dim=-1)


def fit_biases(
    e5: TorchE5,
    pairs: Sequence[tuple[str, set[int]]],
    passages: np.ndarray[Any, Any],
    pages: np.ndarray[Any, Any],
    options: TuningOptions | None = None,
) -> dict[str, np.ndarray[Any, Any]]:
    """Fit ``e5``'s bias terms in place on (question, gold page ids) ``pairs`` against ``passages``
    (unit passage vectors, one row per paragraph) whose pages are ``pages``; the fitted biases."""
    import torch

    o = options or TuningOptions()
    if not pairs:
        raise ConfigurationError("no (question, page) pair to tune on: give questions with a gold page")
    torch.manual_seed(o.seed)
    order = random.Random(o.seed)
    model = e5._model
    model.train()
    biases = [p for n, p in model.named_parameters() if n.endswith("bias")]
    optimiser = torch.optim.AdamW(biases, lr=o.learning_rate, weight_decay=0.0)
    matrix = torch.from_numpy(np.asarray(passages, dtype=np.float32))
    shuffled = list(pairs)
    for _ in range(o.epochs):
        order.shuffle(shuffled)
        for i in range(0, len(shuffled), o.batch):
            batch = shuffled[i : i + o.batch]
            logits = _query_vectors(e5, [q for q, _ in batch]) @ matrix.T / o.temperature
            positive = torch.from_numpy(np.array([np.isin(pages, sorted(gold)) for _, gold in batch]))
            loss = -(
                torch.logsumexp(logits.masked_fill(~positive, -1e9), 1) - torch.logsumexp(logits, 1)
            ).mean()
            optimiser.zero_grad()
            loss.backward()  # type: ignore[no-untyped-call]
            optimiser.step()
    model.eval()
    return {n: p.detach().cpu().numpy().copy() for n, p in model.named_parameters() if n.endswith("bias")}


def save_biases(path: Path, biases: Mapping[str, np.ndarray[Any, Any]], about: Mapping[str, Any]) -> None:
    """Write the biases and what they were fitted on (``about``, JSON) to a ``.npz`` file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as out:
        arrays: dict[str, Any] = {_ABOUT: np.array(json.dumps(dict(about), ensure_ascii=False)), **biases}
        np.savez(out, **arrays)


def load_biases(path: Path) -> tuple[dict[str, np.ndarray[Any, Any]], dict[str, Any]]:
    """The biases of a file ``save_biases`` wrote, and its ``about``."""
    try:
        with np.load(path, allow_pickle=False) as data:
            about = json.loads(str(data[_ABOUT])) if _ABOUT in data.files else {}
            return {k: data[k] for k in data.files if k != _ABOUT}, about
    except (OSError, ValueError, KeyError) as exc:
        raise ConfigurationError(f"cannot read the query tuning file {path}: {exc}") from exc


def apply_biases(e5: TorchE5, biases: Mapping[str, np.ndarray[Any, Any]]) -> None:
    """Put ``biases`` into ``e5``'s model; a name or shape the model does not have is refused."""
    import torch

    params = dict(e5._model.named_parameters())
    for name, value in biases.items():
        if name not in params or tuple(params[name].shape) != value.shape:
            raise ConfigurationError(f"the query tuning file does not fit multilingual-e5-small: {name}")
    with torch.no_grad():
        for name, value in biases.items():
            params[name].copy_(torch.from_numpy(np.asarray(value, dtype=np.float32)))


class TunedE5Queries:
    """An ``Embedder`` for questions: multilingual-e5-small with the tuned biases of ``path``
    (construction loads nothing; ``warm_up`` does)."""

    def __init__(self, name: str, path: Path) -> None:
        self.name = name
        self.path = path
        self.about: dict[str, Any] = {}
        self._e5: TorchE5 | None = None
        self._lock = threading.Lock()

    @classmethod
    def of(cls, name: str, e5: TorchE5) -> TunedE5Queries:
        """An encoder over a model already tuned in this process (``fit_biases``), with no file."""
        encoder = cls(name, Path("-"))
        encoder._e5 = e5
        return encoder

    def warm_up(self) -> None:
        """Load the model and put the tuned biases in it (once)."""
        with self._lock:
            if self._e5 is not None:
                return
            biases, self.about = load_biases(self.path)
            e5 = shipped_e5()
            apply_biases(e5, biases)
            self._e5 = e5

    def _model(self) -> TorchE5:
        if self._e5 is None:
            self.warm_up()
        assert self._e5 is not None
        return self._e5

    @property
    def dimension(self) -> int:
        """384 once loaded, 0 before."""
        return self._e5.dim if self._e5 is not None else 0

    @property
    def max_tokens(self) -> int:
        """512, e5's position limit."""
        return 512

    def count_tokens(self, text: str) -> int:
        """Tokens fed for ``text`` as a question."""
        return self._model().token_count(text, is_query=True)

    def embed_queries(self, texts: Sequence[str]) -> Vector:
        """Tuned question vectors, unit length."""
        return self._model().encode(list(texts), is_query=True)

    def embed_passages(self, texts: Sequence[str]) -> Vector:
        """Passage vectors (the biases were tuned for questions; the index keeps the shipped ones)."""
        return self._model().encode(list(texts), is_query=False)

    def close(self) -> None:
        """Free the model."""
        with self._lock:
            self._e5 = None


def configured_tuned(path: Path | None, model: str) -> dict[str, TunedE5Queries]:
    """The tuned query encoder ``RAGBOT_RETRIEVER_QUERY_TUNING_PATH`` names, by its model (none: {});
    not loaded yet."""
    return {} if path is None else {model: TunedE5Queries(model, path)}
