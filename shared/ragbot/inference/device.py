"""Which device a model runs on: the ``device`` setting, with "auto" resolved to CUDA when present."""

from __future__ import annotations

from typing import Literal

__all__ = ["resolve_device"]


def resolve_device(setting: str) -> str:
    """``setting`` itself, or for "auto" "cuda" when torch sees a GPU and "cpu" otherwise."""
    if setting != "auto":
        return setting
    try:
        import torch
    except ImportError:  # no torch: nothing but the CPU
        return "cpu"
    device: Literal["cuda", "cpu"] = "cuda" if torch.cuda.is_available() else "cpu"
    return device
