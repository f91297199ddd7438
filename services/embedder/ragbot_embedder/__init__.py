"""ragbot embedder: the Celery worker that fetches pages, embeds paragraphs and writes them to the store."""
