"""What every settings module shares: how a class reads the environment, and the torch precisions."""

from __future__ import annotations

from typing import Literal

from pydantic_settings import SettingsConfigDict

# The precision a torch model runs in (``ragbot.inference.precision`` resolves "auto").
Precision = Literal["auto", "float32", "bfloat16", "float16"]


def settings_config(prefix: str) -> SettingsConfigDict:
    """Read ``<prefix>NAME`` variables (and ``.env``); nested fields as ``<prefix>A__B``; the value
    ``null`` sets an optional field to None (a rule or a file turned off)."""
    return SettingsConfigDict(
        env_prefix=prefix,
        env_file=".env",
        extra="ignore",
        env_nested_delimiter="__",
        env_parse_none_str="null",
    )
