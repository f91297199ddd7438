"""Operations: reconcile, re-embed, tracing, workers, make run's footprint (the ``operations`` report)."""
