"""Indexing: from a page to stored paragraphs, through one pipeline.

``pipeline`` (the one path into a store: split, contextual text, embed, write, hooks) runs the
stages in ``paragraphs`` (split, within ``budget``), ``contextual`` (optional LLM context) and
``embed`` (fields and vectors); ``folder`` keeps a folder of files (``ragbot index``) in the index.
"""
