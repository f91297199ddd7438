"""ragbot retriever: the HTTP search service (dense per model, BM25, fusion, page grouping, rerank).

A request enters at ``routes``, is decided by ``ragbot.retrieval.RetrievalEngine`` and reaches the
store and the models that the composition root in ``app`` builds.
"""
