"""Security: auth, rate limits, hostile inputs, fuzzing, faults (the ``security`` report)."""
