"""``RAGBOT_TORCH_THREADS`` reaches torch when the embedders are built."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from ragbot.definition import parse_definition
from ragbot.embedders import build_embedders, set_torch_threads
from ragbot.settings import ModelSettings

DEFINITION = parse_definition(
    {
        "identifier_field": "page_id",
        "saved_fields": {"page_id": "integer", "content": "text"},
        "field_for_llm": "content",
        "models": {"all-MiniLM-L6-v2": "content"},
    }
)


@pytest.fixture
def restore_threads() -> Iterator[int]:
    before = torch.get_num_threads()
    yield before
    torch.set_num_threads(before)


def test_the_setting_sets_torch_threads(restore_threads: int) -> None:
    build_embedders(settings=ModelSettings(torch_threads=1), definition=DEFINITION)
    assert torch.get_num_threads() == 1


def test_zero_leaves_torch_alone(restore_threads: int) -> None:
    torch.set_num_threads(1)
    set_torch_threads(0)
    assert torch.get_num_threads() == 1
    build_embedders(settings=ModelSettings(torch_threads=0), definition=DEFINITION)
    assert torch.get_num_threads() == 1


def test_negative_is_refused() -> None:
    with pytest.raises(ValueError, match="torch_threads"):
        ModelSettings(torch_threads=-1)
