"""The Elasticsearch store (official async client, 8.x).

* One index per bucket of page ids, ``<prefix>_<page_id // 1000>`` (kolzchut-ragbot used
  ``round(page_id / 1000)``; see ``ragbot.stores.mapping``); reads go to ``<prefix>_*``, and "no index
  yet" is simply an empty result.
* The index template (``mapping.index_template``) is generated from the definition: one
  ``dense_vector`` per vector field with the model's dimension and cosine similarity, ``flat`` (exact
  brute force, kolzchut-ragbot's ranking) or ``hnsw`` (approximate) by ``StoreSettings.vector_search``.
  Text fields keep their original and an analyzed copy ``<field>__bm25`` holding
  ``ragbot.text.analyze`` tokens under the ``whitespace`` analyzer, so BM25 sees the same tokens as
  the embedded store.
* kNN (``queries``): the ``knn`` query, so each shard does one query phase. ``exact`` (``flat``) and
  ``quantized`` (``int8_flat``: the scan reads int8 copies, then the best k x ``quantized_oversample``
  per shard are rescored on the float vectors) return exact cosine scores; ``approximate`` is HNSW.
  Elasticsearch reports ``(1 + cos) / 2`` for cosine; we return ``cos + 1`` (0..2).
* BM25 (``queries``): BM25F, the formula the embedded store computes, with ``dfs_query_then_fetch``
  so that term statistics are global across bucket indices. The default fields (title and content,
  weight 1) are also indexed back to back in one field (``DEFAULT_BM25_FIELD``), where BM25 is that
  same BM25F and a plain term query lets Lucene skip what cannot reach the top k; other field
  choices, and indices made before that field existed, use ``combined_fields`` over the per-field
  ``__bm25`` copies.
* Page replace (``bulk``): bulk-index the new revision (ids ``page-revision-paragraph``), bulk-delete
  the page's other documents, then refresh the touched indices, so the page is searchable when the
  call returns. One explicit refresh instead of ``refresh=wait_for`` on each bulk: ``wait_for`` waits
  for the next periodic refresh (every second), which would cap one worker at about a page a second;
  the explicit refresh costs milliseconds. Until it runs, readers see the old revision; a periodic
  refresh between the two bulks can show both revisions briefly, never neither. This distribution
  has no ``_delete_by_query`` (no reindex module), so deletes are a search of ids followed by a bulk
  delete, which works on every distribution.
* ``replace_pages`` does the same for many pages with one id lookup, one bulk of new documents, one
  bulk of deletes and one refresh (the cost against page by page: docs/benchmarks.md). A page whose
  documents fail in the bulk has its new documents removed again and is reported; the other pages
  complete. ``replace_page`` is ``replace_pages`` with one page.
* Page state (``pages``): aggregations over a page's documents, and a composite aggregation for the
  pages list.
* Vendor errors become ``StoreUnavailable`` (connection, timeout, 429, 5xx) or ``RagbotError``
  (a request Elasticsearch refused); every request carries ``StoreSettings.es_timeout_s``.
"""

from ragbot.stores.elasticsearch.store import ElasticsearchStore

__all__ = ["ElasticsearchStore"]
