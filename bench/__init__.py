"""ragbot's benchmarks by subject; ``python -m bench.run`` (``make bench``) runs them."""
