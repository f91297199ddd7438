"""Indexing: the pipeline's throughput, the default definition, real wiki bodies, a polled MediaWiki."""
