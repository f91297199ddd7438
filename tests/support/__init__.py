"""Test helpers shared by the integration and end-to-end suites (and the `make run` launcher)."""
