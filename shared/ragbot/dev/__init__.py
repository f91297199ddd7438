"""Local development servers used by ``make run`` and the e2e tests."""
