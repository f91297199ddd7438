"""ragbot ingest: wiki change pings, page pushes and deletes, job status and dead-letter retries."""
