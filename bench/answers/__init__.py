"""Answers: answer quality per answer mode."""
