"""The retrieval configurations ``ragbot eval`` compares, and the definition it indexes with."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ragbot.definition import DocumentDefinition, parse_definition
from ragbot.errors import ConfigurationError, ValidationFailed
from ragbot.schemas.retrieval import FusionMethod, RetrieveRequest, SearchMode

MAX_PAGES = 100  # RetrieveRequest allows 100 entries in paragraphs_per_page


@dataclass(frozen=True, slots=True)
class EvalConfig:
    """One way of retrieving: what the request sets; None leaves a knob to the engine's default."""

    name: str
    mode: SearchMode | None
    models: dict[str, float] | None = None
    bm25_weight: float | None = None
    fusion: FusionMethod | None = None
    rrf_k: int | None = None
    rerank: bool | None = False

    def request(self, query: str, *, retrieval_size: int, pages: int) -> RetrieveRequest:
        """The retrieve request for one query: ``pages`` pages, one paragraph each."""
        if not 1 <= pages <= MAX_PAGES:
            raise ValidationFailed(f"pages must be 1..{MAX_PAGES}, got {pages}", field="pages")
        return RetrieveRequest(
            query=query,
            retrieval_size=retrieval_size,
            paragraphs_per_page=[1] * pages,
            mode=self.mode,
            models=self.models,
            bm25_weight=self.bm25_weight,
            fusion=self.fusion,
            rrf_k=self.rrf_k,
            rerank=self.rerank,
        )


def standard_configs(model_names: Sequence[str], *, with_rerank: bool) -> list[EvalConfig]:
    """BM25, each dense model alone, hybrid (every model + BM25), hybrid + rerank, and "default": a
    request that sets nothing, i.e. the configured defaults (with the reranker when one is given)."""
    configs = [EvalConfig("bm25", "lexical")]
    configs += [EvalConfig(f"dense:{m}", "semantic", models={m: 1.0}) for m in model_names]
    configs.append(EvalConfig("hybrid", "hybrid"))
    if with_rerank:
        configs.append(EvalConfig("hybrid+rerank", "hybrid", rerank=True))
    configs.append(EvalConfig("default", None, rerank=None))
    return configs


def eval_definition(base: DocumentDefinition, models: Sequence[str] | None = None) -> DocumentDefinition:
    """The configured definition restricted to ``models`` (all when None); it must save title and content."""
    chosen = list(models) if models else list(base.model_names)
    unknown = [m for m in chosen if m not in base.models]
    if unknown:
        raise ConfigurationError(f"model(s) {unknown} are not in the document definition {list(base.models)}")
    for name in ("title", "content"):
        if base.saved_fields.get(name) != "text":
            raise ConfigurationError(
                f"evaluation needs a text field {name!r} in the definition's saved_fields"
            )
    return parse_definition(
        {
            "identifier_field": base.identifier_field,
            "saved_fields": dict(base.saved_fields),
            "field_for_llm": base.field_for_llm,
            "models": {m: base.model_entry(m) for m in chosen},  # languages kept
        },
        origin="evaluation definition",
    )
