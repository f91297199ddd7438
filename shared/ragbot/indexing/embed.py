"""The pipeline's split and embed stages: a page's paragraphs with their fields, and their vectors.

``ragbot.indexing.pipeline`` runs these stages and writes the result; nothing else writes to a store.

Every (model, field) pair of the definition is embedded over the page's distinct texts for that
field: ``content`` differs per paragraph, page-level fields such as ``title`` are the same text in
every paragraph and are embedded once and shared. Calls take at most ``EMBED_CALL_TEXTS`` texts (or
two of the model's batches) and, between calls, freed memory goes back to the OS: glibc otherwise
keeps the allocator's high-water mark growing with every thousand texts of one call
(docs/benchmarks.md, "Design figures"), and a 5 MB page would peak far above a short one.

Pages that arrive together (a bulk reindex batch, a folder) are embedded together:
``build_pages_paragraphs`` splits every page first (``prepare_paragraphs``), then embeds the
distinct texts of all of them together per (model, field) (``embed_prepared``), so a batch of short
pages fills the model's batches as well as one long page does. ``group_by_size`` cuts a long list of pages
into groups of at most N paragraphs, which bounds memory and the time until the first write.

A field embeds only the texts in a language its model serves (``ragbot.indexing.languages``): the
English-only MiniLM gets no Hebrew paragraph, which routing would never search with it.

Contextual retrieval (``ragbot.indexing.contextual``) hands ``embed_prepared`` a context per doc id; it is
prepended to the ``content`` text that is embedded, never to the stored text.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import numpy as np

from ragbot.definition import DocumentDefinition
from ragbot.errors import ConfigurationError, EmbeddingError
from ragbot.indexing.languages import LanguageFilter
from ragbot.indexing.paragraphs import DEFAULT_LINK_TARGETS, LinkTargets, ParagraphText, Strategy, split_page
from ragbot.inference.memory import release_memory
from ragbot.ports import Embedder, StoredParagraph, Vector
from ragbot.schemas.pages import Page
from ragbot.stores import doc_id

__all__ = [
    "CONTEXT_FIELD",
    "EMBED_CALL_TEXTS",
    "build_pages_paragraphs",
    "build_stored_paragraphs",
    "doc_id",
    "effective_max_tokens",
    "embed_distinct",
    "embed_prepared",
    "group_by_size",
    "page_fields",
    "prepare_paragraphs",
    "release_memory",
]

# Page attributes a definition's saved_fields may name (anything else comes from ``page.extra``).
_PAGE_FIELDS = ("title", "url", "summary", "revision_date", "namespace", "categories", "page_id")
# The paragraph field contextual retrieval adds its context to (before embedding only).
CONTEXT_FIELD = "content"
# Most texts per embedding call (see the module docstring).
EMBED_CALL_TEXTS = 64


def effective_max_tokens(settings_max: int, embedders: Iterable[Embedder]) -> int:
    """The paragraph budget: the configured size, never above any model's own input limit."""
    return min([settings_max, *(e.max_tokens for e in embedders)])


def build_stored_paragraphs(
    page: Page,
    *,
    definition: DocumentDefinition,
    embedders: Mapping[str, Embedder],
    max_tokens: int,
    strategy: Strategy = "structure",
    link_targets: LinkTargets = DEFAULT_LINK_TARGETS,
    now: datetime | None = None,
    contexts: Mapping[str, str] | None = None,
) -> list[StoredParagraph]:
    """The page's paragraphs with saved fields, core fields and one vector per (model, field)."""
    [stored] = build_pages_paragraphs(
        [page],
        definition=definition,
        embedders=embedders,
        max_tokens=max_tokens,
        strategy=strategy,
        link_targets=link_targets,
        now=now,
        contexts=contexts,
    )
    return stored


def build_pages_paragraphs(
    pages: Sequence[Page],
    *,
    definition: DocumentDefinition,
    embedders: Mapping[str, Embedder],
    max_tokens: int,
    strategy: Strategy = "structure",
    link_targets: LinkTargets = DEFAULT_LINK_TARGETS,
    now: datetime | None = None,
    contexts: Mapping[str, str] | None = None,
) -> list[list[StoredParagraph]]:
    """Every page's paragraphs, embedded together: one call per (model, field) for all the pages."""
    prepared = [
        prepare_paragraphs(
            page,
            definition=definition,
            embedders=embedders,
            max_tokens=max_tokens,
            strategy=strategy,
            link_targets=link_targets,
            now=now,
        )
        for page in pages
    ]
    embed_prepared(prepared, definition=definition, embedders=embedders, contexts=contexts)
    return prepared


def prepare_paragraphs(
    page: Page,
    *,
    definition: DocumentDefinition,
    embedders: Mapping[str, Embedder],
    max_tokens: int,
    strategy: Strategy = "structure",
    link_targets: LinkTargets = DEFAULT_LINK_TARGETS,
    now: datetime | None = None,
) -> list[StoredParagraph]:
    """The page split into paragraphs with their saved and core fields, not yet embedded."""
    missing = [m for m in definition.model_names if m not in embedders]
    if missing:
        raise ConfigurationError(f"no embedder for model(s) {missing} named in the document definition")
    models = [embedders[m] for m in definition.model_names]
    paragraphs = split_page(
        page,
        token_counters=[e.count_tokens for e in models],
        max_tokens=effective_max_tokens(max_tokens, models),
        strategy=strategy,
        link_targets=link_targets,
    )
    stamp = (now or datetime.now(UTC)).isoformat()
    base = page_fields(page, definition)
    return [
        StoredParagraph(
            doc_id=doc_id(page.page_id, page.revision_id, p.index),
            page_id=page.page_id,
            revision_id=page.revision_id,
            paragraph=p.index,
            fields=_paragraph_fields(base, p, page=page, definition=definition, stamp=stamp),
        )
        for p in paragraphs
    ]


def embed_prepared(
    groups: Sequence[Sequence[StoredParagraph]],
    *,
    definition: DocumentDefinition,
    embedders: Mapping[str, Embedder],
    contexts: Mapping[str, str] | None = None,
    select: Callable[[StoredParagraph], Collection[str] | None] | None = None,
) -> None:
    """Fill the vectors of every paragraph of every group: one embedding call per (model, field).

    ``select`` (default: all) names the vector fields to embed for a paragraph; the others keep the
    vectors the caller set (the kolzchut-ragbot drop-in re-embeds only the fields it was asked to).
    """
    chosen = [(sp, None if select is None else select(sp)) for group in groups for sp in group]
    if not chosen:
        return
    languages = LanguageFilter(definition)
    for vector_field in definition.vector_fields:
        stored = [sp for sp, names in chosen if names is None or vector_field.name in names]
        if not stored:
            continue
        texts = [_as_text(sp.fields.get(vector_field.field)) for sp in stored]
        if contexts and vector_field.field == CONTEXT_FIELD:
            texts = [
                f"{contexts[sp.doc_id]}\n\n{text}" if text.strip() and contexts.get(sp.doc_id) else text
                for sp, text in zip(stored, texts, strict=True)
            ]
        vectors = embed_distinct(embedders[vector_field.model], languages.kept(vector_field, texts))
        for sp, vector in zip(stored, vectors, strict=True):
            if vector is not None:
                sp.vectors[vector_field.name] = vector
            else:  # a blank text, or one this field does not serve: no vector, not a stale one
                sp.vectors.pop(vector_field.name, None)


def group_by_size(sizes: Sequence[int], *, max_items: int) -> list[list[int]]:
    """Consecutive indices of ``sizes`` grouped so each group holds at most ``max_items`` (a single
    item larger than that gets a group of its own)."""
    groups: list[list[int]] = []
    current: list[int] = []
    filled = 0
    for index, size in enumerate(sizes):
        if current and filled + size > max_items:
            groups.append(current)
            current, filled = [], 0
        current.append(index)
        filled += size
    if current:
        groups.append(current)
    return groups


def page_fields(page: Page, definition: DocumentDefinition) -> dict[str, Any]:
    """The definition's saved fields that come from the page itself (not from the paragraph)."""
    fields: dict[str, Any] = {}
    for name in definition.saved_fields:
        if name == "content":
            continue
        value: Any
        if name in _PAGE_FIELDS:
            value = getattr(page, name)
            if isinstance(value, datetime):
                value = value.isoformat()
            elif isinstance(value, list):
                value = list(value)
        else:
            value = page.extra.get(name)
        if value is not None:
            fields[name] = value
    return fields


def embed_distinct(embedder: Embedder, texts: Sequence[str]) -> list[Vector | None]:
    """One vector per text from batched calls over the distinct non-blank texts; None for blank.

    A blank field (no summary, an empty title) gets no vector rather than the embedding of nothing,
    which would sit close to every query.
    """
    distinct = list(dict.fromkeys(t for t in texts if t.strip()))
    if not distinct:
        return [None] * len(texts)
    size = max(EMBED_CALL_TEXTS, 2 * int(getattr(embedder, "batch_size", 0) or 0))
    if len(distinct) > size:
        # Most tokens first, as the adapters batch within a call: each call then holds texts of
        # similar length, so cutting the list into calls adds no padding. By characters, SciFact's
        # paragraphs padded about 9% more.
        distinct.sort(key=embedder.count_tokens, reverse=True)
    rows: dict[str, Vector] = {}
    for start in range(0, len(distinct), size):
        chunk = distinct[start : start + size]
        matrix = embedder.embed_passages(chunk)
        if matrix.shape[0] != len(chunk):
            raise EmbeddingError(
                f"model {embedder.name!r} returned {matrix.shape[0]} vectors for {len(chunk)} texts"
            )
        rows.update((t, np.asarray(matrix[i], dtype=np.float32)) for i, t in enumerate(chunk))
        if len(distinct) > size:
            release_memory()
    return [rows.get(t) if t.strip() else None for t in texts]


def _paragraph_fields(
    base: Mapping[str, Any],
    paragraph: ParagraphText,
    *,
    page: Page,
    definition: DocumentDefinition,
    stamp: str,
) -> dict[str, Any]:
    fields = dict(base)
    if "content" in definition.saved_fields:
        fields["content"] = paragraph.text
    if "location" in definition.saved_fields and paragraph.location is not None:
        fields["location"] = paragraph.location
    fields.update(
        doc_id=doc_id(page.page_id, page.revision_id, paragraph.index),
        page_id=page.page_id,
        revision_id=page.revision_id,
        paragraph=paragraph.index,
        heading=paragraph.heading,
        source=page.source,
        last_update=stamp,
    )
    return fields


def _as_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, list):
        return "\n".join(str(v) for v in value)
    return str(value)
