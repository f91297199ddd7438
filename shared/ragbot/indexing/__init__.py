"""Indexing: from a page to stored paragraphs (split, contextual text, embed, write)."""
