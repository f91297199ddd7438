"""ragbot ingest: wiki change pings, page pushes and deletes, uploads, bulk reindex, jobs and retries.

A request enters at ``routes`` (streamed bodies read by ``multipart``), is decided in ``service`` (one
module per kind of request, no HTTP, no vendor types) and reaches Redis through the adapters the
composition root in ``app`` picks: ``upload_ids`` here, the job records and the command queue from
``ragbot.messaging``.
"""
