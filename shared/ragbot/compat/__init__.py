"""Compatibility layers for libraries ragbot replaces (``ragbot.compat.kolzchut``)."""
