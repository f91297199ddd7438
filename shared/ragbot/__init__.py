"""ragbot: the shared library of the ragbot services (settings, schemas, ports, adapters)."""

__version__ = "0.1.0"
