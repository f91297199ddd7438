"""Retrieval: quality on BEIR and HeQ, latency at 100k paragraphs, the stores, fusion, reranking, e5."""
