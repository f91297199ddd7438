"""Redis-backed messaging: the Celery app, job records, domain events and bulk reindex."""
