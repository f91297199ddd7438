"""Language routing: keep the dense branches whose model serves the question's language, say why for each.

Pure: it reads the question's ``LanguageGuess`` and each dense branch's declared languages (the
definition file's ``languages``) and never touches a model or a store. It never leaves a question
with nothing to search: when no dense branch serves the language, every dense branch is kept.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ragbot.retrieval.results import Branch
from ragbot.text.language import ANY_LANGUAGE, LanguageGuess, serves


@dataclass(frozen=True, slots=True)
class BranchRoute:
    """One branch's routing decision: whether it runs and why."""

    name: str
    kind: str
    languages: tuple[str, ...]
    ran: bool
    reason: str


@dataclass(frozen=True, slots=True)
class Routing:
    """The routing of one request: the detected language, every branch's decision, the kept branches."""

    enabled: bool
    guess: LanguageGuess | None
    routes: tuple[BranchRoute, ...]
    kept: tuple[Branch, ...]
    skipped: tuple[Branch, ...]
    fallback: bool = False

    def as_debug(self) -> dict[str, Any]:
        """The retriever's debug view of the routing."""
        detected: dict[str, Any] | None = None
        if self.guess is not None:
            detected = {
                "script": self.guess.script,
                "languages": sorted(self.guess.languages),
                "share": self.guess.share,
                "letters": self.guess.letters,
            }
        return {
            "enabled": self.enabled,
            "detected": detected,
            "fallback": self.fallback,
            "ran": [r.name for r in self.routes if r.ran],
            "skipped": {r.name: r.reason for r in self.routes if not r.ran},
            "branches": {
                r.name: {"kind": r.kind, "languages": list(r.languages), "ran": r.ran, "reason": r.reason}
                for r in self.routes
            },
        }


def _describe(guess: LanguageGuess) -> str:
    share = f"{round(guess.share * 100)}% of {guess.letters} letters"
    return f"{guess.script} ({share})"


def _langs(languages: tuple[str, ...]) -> str:
    return "any language" if ANY_LANGUAGE in languages else ", ".join(languages)


def route_branches(
    branches: Sequence[Branch],
    *,
    languages_of: Callable[[Branch], tuple[str, ...]],
    guess: LanguageGuess | None,
    enabled: bool = True,
    why_off: str = "language routing is off",
) -> Routing:
    """Keep the branches that serve ``guess``; BM25 serves every language; see the module doc."""
    dense = [b for b in branches if b.kind == "dense"]
    langs = {b.name: languages_of(b) if b.kind == "dense" else (ANY_LANGUAGE,) for b in branches}

    def all_run(reason: str, *, fallback: bool = False) -> Routing:
        routes = tuple(
            BranchRoute(
                b.name,
                b.kind,
                langs[b.name],
                True,
                reason if b.kind == "dense" else "BM25 serves every language",
            )
            for b in branches
        )
        return Routing(enabled, guess, routes, tuple(branches), (), fallback)

    if not enabled or guess is None:
        return all_run(why_off)
    if not guess.known:
        return all_run(f"language not detected ({guess.script}, {guess.letters} letters): every branch runs")
    detected = _describe(guess)
    serving = {b.name for b in dense if serves(langs[b.name], guess)}
    if dense and not serving:
        return all_run(
            f"no dense branch serves {detected}: all kept, so the question is still searched", fallback=True
        )
    routes: list[BranchRoute] = []
    kept: list[Branch] = []
    skipped: list[Branch] = []
    for b in branches:
        if b.kind != "dense":
            routes.append(BranchRoute(b.name, b.kind, langs[b.name], True, "BM25 serves every language"))
            kept.append(b)
        else:
            ran = b.name in serving
            only = "" if ran else " only"
            reason = f"serves {_langs(langs[b.name])}{only}; question: {detected}"
            routes.append(BranchRoute(b.name, b.kind, langs[b.name], ran, reason))
            (kept if ran else skipped).append(b)
    return Routing(enabled, guess, tuple(routes), tuple(kept), tuple(skipped))
