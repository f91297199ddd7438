"""A drop-in for kolzchut-ragbot's library API: consumers switch by changing an import.

    # before
    from kolzchut_ragbot.engine import engine_factory
    # after
    from ragbot.compat.kolzchut import engine_factory

Same calls, same return shapes (``retrieve_documents`` -> ``(top_k_documents, all_docs_and_scores,
retrieval_time)``), same default semantics (dense search per model, page-level RRF with k = number of
pages asked, ``paragraphs_per_page`` trimming, ``paragraph_relevance_threshold`` on the cosine + 1
scale), without kolzchut-ragbot's flaws: nothing loads at import, the factory builds lazily and never
ignores new arguments, tests can build engines freely. Every difference is listed in
``docs/migrating-from-kolzchut-ragbot.md``.

The API is synchronous, like kolzchut-ragbot's. The async engine and store run on a private event-loop
thread owned by each ``Engine`` (``Engine.close()`` stops it), so the API may be called from plain
code, from worker threads, or from ``asyncio.to_thread`` inside an async app.
"""

from __future__ import annotations

from ragbot.compat.kolzchut.engine import Engine, strip_vector_fields
from ragbot.compat.kolzchut.factory import Model, clear_engine_cache, engine_factory, es_client_factory

__all__ = [
    "Engine",
    "Model",
    "clear_engine_cache",
    "engine_factory",
    "es_client_factory",
    "strip_vector_fields",
]
