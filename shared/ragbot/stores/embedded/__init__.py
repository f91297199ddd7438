"""The embedded store: one SQLite file (stdlib sqlite3, WAL) for one machine and no server.

* Source of truth, all in SQLite (``schema``): ``paragraphs`` (ids, page, revision, paragraph number,
  JSON source, and the paragraph's lexical data: term ids, per-field term frequencies and field
  lengths of its ``ragbot.text.analyze`` tokens), ``terms`` (term -> id), ``vectors`` (one float32
  BLOB per paragraph and vector field) and ``filter_values`` (the filterable fields, indexed).
* Searches run on indices derived in-process from those rows (``catchup``): an L2-normalised float32
  matrix per vector field, with a float16 copy (exact cosine top-k: screened in float16, rescored in
  float32, ``stores.dense``; ``matrix``) and a BM25 inverted index (``stores.lexical``).
  They load lazily on the first search of their kind. Every write bumps a generation counter in the
  same transaction; a search that finds a newer generation first catches up: rows with ids above
  the last one it holds are appended (ids come from AUTOINCREMENT, so they only grow) and the ids
  the writes removed, logged in ``removed_log`` by generation, are marked dead. This is how the
  writes of another process (the embedder worker) reach a reader (the retriever) without a reload;
  a full reload happens only when dead rows or patches pile up, or a reader fell too far behind.
* A page replace is one transaction (``writes``: delete the page's rows, insert the revision's), so a
  reader, or a crash (kill -9), sees the old or the new revision, never a mix or a gap.
* Blocking SQLite work runs in threads (``asyncio.to_thread``), one connection per thread.

Why not FTS5 for BM25: FTS5's ``bm25()`` scores every matching row through a callback, so queries
with common words were slow; the numpy index scores the same postings with vectorised array
operations and uses Lucene's BM25 formula, as Elasticsearch does. The figures are in
docs/decisions/0001-embedded-store.md and docs/benchmarks.md.
"""

from ragbot.stores.embedded.store import EmbeddedStore

__all__ = ["EmbeddedStore"]
