"""Which dense lists a question searches with a tuned query encoder, and which encoder embeds it.

A wiki's own questions tune a model's query side (``ragbot.embedders.query_tuning``: e5's bias terms
fitted on the wiki's questions and the pages that answer them). For a question in one of the configured
scripts (Latin by default), each dense branch of such a model is searched twice: with the tuned
encoder, at the branch's weight, and with the shipped one at weight 0. The fusion then ranks with the
tuned list, while the untuned list's cosines stay in the debug view, where the answerability rule
reads the scale it was fitted on.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace

from ragbot.retrieval.results import TUNED_SUFFIX, Branch
from ragbot.settings.retrieval import QUERY_TUNING_SCRIPTS
from ragbot.text.language import detect_language


def with_tuned(
    query: str,
    branches: list[Branch],
    tuned_models: Collection[str],
    scripts: Collection[str] = QUERY_TUNING_SCRIPTS,
) -> list[Branch]:
    """``branches`` with each dense branch of a tuned model doubled for a ``query`` written in one of
    ``scripts`` (Latin only by default)."""
    if not tuned_models or detect_language(query).script not in scripts:
        return branches
    out: list[Branch] = []
    for b in branches:
        if b.kind == "dense" and b.model in tuned_models and b.weight > 0:
            out.append(replace(b, weight=0.0))
            out.append(replace(b, name=b.name + TUNED_SUFFIX, tuned=True))
        else:
            out.append(b)
    return out


def query_model(branch: Branch) -> str:
    """The key of the encoder that embeds the question for ``branch``: its model's, tuned or not."""
    model = branch.model or ""
    return model + TUNED_SUFFIX if branch.tuned else model


def searched_field(branch: Branch) -> str:
    """The stored vector field ``branch`` searches: its own name, or its untuned twin's."""
    return branch.name.removesuffix(TUNED_SUFFIX) if branch.tuned else branch.name
