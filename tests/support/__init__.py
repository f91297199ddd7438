"""Test helpers shared by every suite: one fake per port (``support.fakes``), local servers, stacks."""
