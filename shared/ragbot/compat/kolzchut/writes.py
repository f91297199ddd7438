"""kolzchut-ragbot's ``update_docs``: pages' documents, embedded together and written by the pipeline."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import numpy as np

from ragbot.indexing.pipeline import IndexingPipeline
from ragbot.ports import PageWrite, SearchStore, StoredParagraph, Vector
from ragbot.retrieval import strip_vector_fields as _strip

# Keys ragbot derives itself; a document's own values for them are not stored as fields.
_IDS = frozenset({"_id", "doc_id", "page_id", "revision_id", "paragraph"})


async def update_pages(
    *,
    store: SearchStore,
    pipeline: IndexingPipeline,
    pages: Sequence[tuple[int, Sequence[Mapping[str, Any]]]],
    wanted: set[str] | None,
    delete_existing: bool,
) -> None:
    """Embed every page's documents together, then replace each page atomically (old copy or new).

    One pipeline call for all the pages: their texts share the model's batches (a paragraph's vectors
    do not depend on its batch), and the store writes them a group at a time.

    ``delete_existing=False`` appends, as kolzchut-ragbot did: the page's indexed paragraphs are
    read back, re-embedded (the store never returns vectors) and written again with the new ones
    numbered after them. A ``revision_id`` or ``paragraph`` key on the documents is used for the
    ids; otherwise the indexed revision is kept (0 for a new page). Fields in ``wanted`` (None: all)
    are embedded; vectors the caller computed are kept for the others.
    """
    writes: list[PageWrite] = []
    new_ids: set[str] = set()
    for page_id, docs in pages:
        write, kept = await _page_write(
            store=store, pipeline=pipeline, page_id=page_id, docs=docs, delete_existing=delete_existing
        )
        writes.append(write)
        new_ids.update(sp.doc_id for sp in write.paragraphs[kept:])
    chosen: Collection[str] | None = (
        None
        if wanted is None
        else {vf.name for vf in pipeline.definition.vector_fields if vf.field in wanted}
    )

    def select(sp: StoredParagraph) -> Collection[str] | None:
        return chosen if sp.doc_id in new_ids else None  # read-back paragraphs: every field again

    await pipeline.write_paragraphs(writes, store=store, select=select)


async def _page_write(
    *,
    store: SearchStore,
    pipeline: IndexingPipeline,
    page_id: int,
    docs: Sequence[Mapping[str, Any]],
    delete_existing: bool,
) -> tuple[PageWrite, int]:
    """One page's paragraphs (read-back ones first, when appending) and how many were read back."""
    state = await store.page_state(page_id=page_id)
    given = docs[0].get("revision_id")
    revision_id = int(given) if given is not None else (state.revision_id if state else 0)
    kept: list[tuple[int, Mapping[str, Any]]] = []
    if not delete_existing and state is not None:
        for hit in await store.page_paragraphs(page_id=page_id):
            kept.append((int(hit.source.get("paragraph", len(kept))), hit.source))
    first = max((n for n, _ in kept), default=-1) + 1
    new = [(int(doc.get("paragraph", first + i)), doc) for i, doc in enumerate(docs)]
    now = datetime.now(UTC).isoformat()
    paragraphs: list[StoredParagraph] = []
    for number, doc in kept + new:
        fields = {k: v for k, v in _strip(doc).items() if k not in _IDS}
        fields.setdefault("last_update", now)
        paragraphs.append(
            StoredParagraph(
                doc_id=f"{page_id}-{revision_id}-{number}",
                page_id=page_id,
                revision_id=revision_id,
                paragraph=number,
                fields=fields,
                vectors=_given_vectors(doc, pipeline),
            )
        )
    return PageWrite(page_id, revision_id, paragraphs), len(kept)


def _given_vectors(doc: Mapping[str, Any], pipeline: IndexingPipeline) -> dict[str, Vector]:
    """The vectors a document carries under the definition's vector-field names."""
    return {
        vf.name: np.asarray(doc[vf.name], dtype=np.float32)
        for vf in pipeline.definition.vector_fields
        if doc.get(vf.name) is not None
    }
