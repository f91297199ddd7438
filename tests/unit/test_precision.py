"""``cast_model``: a module ends in the resolved precision whatever dtype its checkpoint was saved in."""

from __future__ import annotations

import pytest
import torch

from ragbot.inference import precision
from ragbot.inference.precision import cast_model, resolve_precision


@pytest.mark.parametrize("saved", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("wanted", ["float32", "bfloat16", "float16"])
def test_cast_model_ends_in_the_resolved_dtype(saved: str, wanted: str) -> None:
    module = torch.nn.Linear(4, 3).to(getattr(torch, saved))
    cast_model(module, wanted)  # type: ignore[arg-type]
    assert {p.dtype for p in module.parameters()} == {getattr(torch, wanted)}


def test_auto_is_float16_on_cuda_and_explicit_settings_are_kept() -> None:
    assert resolve_precision("auto", device="cuda") == "float16"
    assert resolve_precision("float32", device="cuda") == "float32"
    assert resolve_precision("auto", device="cpu", batched=False) == "float32"


@pytest.mark.parametrize(
    ("amx", "dot", "wanted"), [(True, True, "bfloat16"), (False, True, "bfloat16"), (False, False, "float32")]
)
def test_embedders_batch_in_bfloat16_wherever_the_cpu_has_bfloat16_dot_products(
    monkeypatch: pytest.MonkeyPatch, amx: bool, dot: bool, wanted: str
) -> None:
    monkeypatch.setattr(precision, "cpu_has_fast_bfloat16", lambda: amx)
    monkeypatch.setattr(precision, "cpu_has_bfloat16_dot", lambda: dot)
    assert precision.embedder_precision("auto", device="cpu", batched=True) == wanted
    # one query at a time stays float32, an explicit setting is kept, and CUDA stays float16
    assert precision.embedder_precision("auto", device="cpu", batched=False) == "float32"
    assert precision.embedder_precision("float32", device="cpu", batched=True) == "float32"
    assert precision.embedder_precision("auto", device="cuda", batched=True) == "float16"
    # the reranker keeps the AMX-only rule
    assert precision.resolve_precision("auto", device="cpu") == ("bfloat16" if amx else "float32")
