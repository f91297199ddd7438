"""The question memory: a wiki's answered questions, each with the pages that answer it, vote for pages.

A new question's nearest remembered questions (cosine of one model's question vectors) vote for their
pages, each vote weighted ``exp((cosine - best cosine) / temperature)``. The votes then raise the
fused score of the retrieved paragraphs of those pages (``with_votes``), by more when the nearest
remembered question is very near (``vote_weight``): a page the search did not find
is never added, so the memory reorders what was retrieved and cannot make an answer from nothing.
Questions asked in one language match earlier questions in the same language better than they match
pages written in another: on a Hebrew wiki, English questions gain most (docs/benchmarks.md).

The memory may also hold questions the wiki did not answer (``unanswered``): they vote for nothing, but
the nearest one's cosine (``Votes.unanswered``) tells the chat's abstention rule that a question like
this one went unanswered before (``ragbot.chat.answerability``'s ``memory_unanswered``).

``ragbot remember-questions`` writes the file (``ragbot.evaluation.question_memory``); the retriever
loads it when ``RAGBOT_RETRIEVER_QUESTION_MEMORY_PATH`` names it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ragbot.errors import ConfigurationError
from ragbot.retrieval.fusion import FusedHit, page_order
from ragbot.schemas.retrieval import MEMORY_KEY

FORMAT = "ragbot-question-memory/1"
DEFAULT_NEIGHBOURS = 10
DEFAULT_TEMPERATURE = 0.02


@dataclass(frozen=True, slots=True)
class Neighbour:
    """A remembered question near the new one: its text, its pages and its cosine to the new one."""

    question: str
    pages: tuple[int, ...]
    cosine: float
    weight: float


@dataclass(frozen=True, slots=True)
class Votes:
    """What the memory says about one question: its neighbours and each page's share of the best vote."""

    neighbours: list[Neighbour]
    shares: dict[int, float] = field(default_factory=dict)
    unanswered: Neighbour | None = None

    def as_debug(self) -> dict[str, Any]:
        """The retriever's debug view of the votes (``unanswered`` only when the memory holds such)."""
        out: dict[str, Any] = {
            "neighbours": [
                {"question": n.question, "pages": list(n.pages), "cosine": round(n.cosine, 6)}
                for n in self.neighbours
            ],
            "shares": {str(page): round(share, 6) for page, share in self.shares.items()},
        }
        if self.unanswered is not None:
            out["unanswered"] = {
                "question": self.unanswered.question,
                "cosine": round(self.unanswered.cosine, 6),
            }
        return out


def _unit(vectors: NDArray[np.float32]) -> NDArray[np.float32]:
    norms = np.linalg.norm(vectors, axis=1, keepdims=True) if len(vectors) else np.ones((0, 1))
    return np.asarray(vectors / np.maximum(norms, 1e-12), dtype=np.float32)


class QuestionMemory:
    """Remembered questions with their pages and one model's unit question vectors, and the questions the
    wiki did not answer with theirs."""

    def __init__(
        self,
        *,
        model: str,
        questions: Sequence[str],
        pages: Sequence[Sequence[int]],
        vectors: NDArray[np.float32],
        neighbours: int = DEFAULT_NEIGHBOURS,
        temperature: float = DEFAULT_TEMPERATURE,
        about: dict[str, Any] | None = None,
        unanswered: Sequence[str] = (),
        unanswered_vectors: NDArray[np.float32] | None = None,
    ) -> None:
        if len(questions) != len(pages) or len(questions) != len(vectors):
            counts = f"{len(questions)} questions, {len(pages)} page lists, {len(vectors)} vectors"
            raise ConfigurationError(f"question memory: {counts}")
        width = vectors.shape[1] if vectors.ndim == 2 else 0
        others = np.zeros((0, width), dtype=np.float32) if unanswered_vectors is None else unanswered_vectors
        if len(unanswered) != len(others):
            raise ConfigurationError(
                f"question memory: {len(unanswered)} unanswered questions, {len(others)} vectors"
            )
        if len(unanswered) and len(questions) and others.shape[1] != vectors.shape[1]:
            raise ConfigurationError("question memory: unanswered questions' vectors of another dimension")
        if any(not p for p in pages):
            raise ConfigurationError("question memory: every question needs at least one page")
        if neighbours < 1 or not (math.isfinite(temperature) and temperature > 0):
            raise ConfigurationError("question memory: neighbours must be >= 1 and temperature > 0")
        self.model = model
        self.questions = list(questions)
        self.pages = [tuple(int(p) for p in row) for row in pages]
        self.vectors = _unit(vectors)
        self.unanswered = list(unanswered)
        self.unanswered_vectors = _unit(others)
        self.neighbours = neighbours
        self.temperature = temperature
        self.about = dict(about or {})

    def __len__(self) -> int:
        return len(self.questions)

    @property
    def dimension(self) -> int:
        """The question vectors' dimension (0 for an empty memory)."""
        return int(self.vectors.shape[1]) if self.vectors.ndim == 2 and len(self.vectors) else 0

    def votes(self, vector: NDArray[np.float32]) -> Votes:
        """The nearest remembered questions to ``vector`` and their pages' vote shares (best page 1.0)."""
        if not len(self):
            return Votes(neighbours=[])
        if vector.shape[-1] != self.dimension:
            raise ConfigurationError(
                f"question memory holds {self.dimension}-d vectors of {self.model}; "
                f"the question's vector has {vector.shape[-1]}"
            )
        query = vector / max(float(np.linalg.norm(vector)), 1e-12)
        cosines = self.vectors @ query.astype(np.float32)
        unanswered = self._nearest_unanswered(query)
        order = np.argsort(-cosines, kind="stable")[: self.neighbours]
        best = float(cosines[order[0]])
        neighbours: list[Neighbour] = []
        totals: dict[int, float] = {}
        for row in order:
            cosine = float(cosines[row])
            weight = math.exp((cosine - best) / self.temperature)
            neighbours.append(Neighbour(self.questions[row], self.pages[row], cosine, weight))
            for page in self.pages[row]:
                totals[page] = totals.get(page, 0.0) + weight
        top = max(totals.values())
        shares = {page: total / top for page, total in sorted(totals.items(), key=lambda kv: -kv[1])}
        return Votes(neighbours=neighbours, shares=shares, unanswered=unanswered)

    def _nearest_unanswered(self, query: NDArray[np.float32]) -> Neighbour | None:
        """The remembered unanswered question nearest ``query`` (a unit vector); None when none is held."""
        if not self.unanswered:
            return None
        cosines = self.unanswered_vectors @ query.astype(np.float32)
        row = int(np.argmax(cosines))
        return Neighbour(self.unanswered[row], (), float(cosines[row]), 1.0)

    def save(self, path: Path) -> None:
        """Write the memory as one ``.npz`` file (questions and pages in its JSON header)."""
        header = {
            "format": FORMAT,
            "model": self.model,
            "neighbours": self.neighbours,
            "temperature": self.temperature,
            "questions": self.questions,
            "pages": [list(p) for p in self.pages],
            "about": self.about,
            "unanswered": self.unanswered,
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("wb") as handle:
            np.savez_compressed(
                handle,
                header=np.frombuffer(json.dumps(header, ensure_ascii=False).encode("utf-8"), dtype=np.uint8),
                vectors=self.vectors.astype(np.float16),
                unanswered_vectors=self.unanswered_vectors.astype(np.float16),
            )

    @classmethod
    def load(cls, path: Path) -> QuestionMemory:
        """Read a file ``save`` wrote; a missing or foreign file is a ``ConfigurationError``."""
        try:
            with np.load(path, allow_pickle=False) as data:
                header = json.loads(bytes(data["header"]).decode("utf-8"))
                vectors = np.asarray(data["vectors"], dtype=np.float32)
                others = (
                    np.asarray(data["unanswered_vectors"], dtype=np.float32)
                    if "unanswered_vectors" in data.files
                    else None
                )
        except (OSError, KeyError, ValueError) as exc:
            raise ConfigurationError(f"cannot read the question memory {path}: {exc}") from None
        if not isinstance(header, dict) or header.get("format") != FORMAT:
            raise ConfigurationError(
                f"{path} is not a question memory ({FORMAT}); write it with ragbot remember-questions"
            )
        return cls(
            model=str(header["model"]),
            questions=[str(q) for q in header["questions"]],
            pages=[[int(p) for p in row] for row in header["pages"]],
            vectors=vectors.reshape(len(header["questions"]), -1),
            neighbours=int(header["neighbours"]),
            temperature=float(header["temperature"]),
            about=dict(header.get("about") or {}),
            unanswered=[str(q) for q in header.get("unanswered") or []],
            unanswered_vectors=others,
        )


def check_loaded(memory: QuestionMemory, dimensions: Mapping[str, int]) -> None:
    """Refuse ``memory`` unless its model is among those loaded (``dimensions``: model -> dimension)
    with the dimension of its vectors."""
    if len(memory) and dimensions.get(memory.model) != memory.dimension:
        raise ConfigurationError(
            f"the question memory holds {memory.dimension}-d vectors of {memory.model}; the models loaded: "
            f"{sorted(dimensions)} (write it again with ragbot remember-questions)"
        )


def vote_weight(votes: Votes, weight: float, near: float, near_weight: float) -> float:
    """How much ``votes`` add, in units of the best fused score: ``weight``, plus ``near_weight`` x how
    far the nearest remembered question's cosine passes ``near`` (a near neighbour is surer evidence)."""
    if weight <= 0 or not votes.neighbours:
        return weight
    return weight + near_weight * max(0.0, votes.neighbours[0].cosine - near)


def with_votes(fused: Sequence[FusedHit], votes: Votes, weight: float) -> list[FusedHit]:
    """``fused`` re-sorted after adding ``weight`` x the best fused score x its page's vote share (relative
    to the best retrieved page's) to each paragraph's score, and noting the addition in its
    ``raw_scores`` (``MEMORY_KEY``); unvoted paragraphs keep their order."""
    movable = set(page_order(fused, lambda h: h.page_id)) & set(votes.shares)
    found = [votes.shares[page] for page in movable]
    if not found or weight <= 0:
        return list(fused)
    # shares are taken relative to the best retrieved page, so its paragraphs gain the whole weight
    scale = weight * max(h.score for h in fused) / max(found)
    for hit in fused:
        if hit.page_id in movable:
            bonus = scale * votes.shares[hit.page_id]
            hit.score += bonus
            hit.raw_scores[MEMORY_KEY] = bonus  # the debug view's fused list shows what the votes added
    return sorted(fused, key=lambda h: h.score, reverse=True)
