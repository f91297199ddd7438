"""The services' OpenAPI documents: committed under docs/openapi/ and current, operation ids unique and
readable, the version the installed package's."""

from __future__ import annotations

import importlib.util
import re
from collections import Counter
from importlib.metadata import version
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("openapi_script", ROOT / "scripts" / "openapi.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SCRIPT = _script()
SERVICES: list[str] = list(SCRIPT.SERVICES)
_specs: dict[str, dict[str, Any]] = {}


def served(service: str) -> dict[str, Any]:
    if service not in _specs:
        _specs[service] = SCRIPT.document(service)
    return _specs[service]


def operations(spec: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [(method, path, op) for path, ops in spec["paths"].items() for method, op in ops.items()]


@pytest.mark.parametrize("service", SERVICES)
def test_the_committed_document_is_what_the_service_serves(service: str) -> None:
    path = SCRIPT.path_of(service)
    assert path.exists(), f"{path.relative_to(ROOT)} is missing: run {SCRIPT.COMMAND}"
    committed = path.read_text(encoding="utf-8")
    assert committed == SCRIPT.render(served(service)), (
        f"{path.relative_to(ROOT)} differs from the schema ragbot {service} serves: regenerate it with "
        f"{SCRIPT.COMMAND} and commit it"
    )


@pytest.mark.parametrize("service", SERVICES)
def test_operation_ids_are_unique_and_read_as_method_names(service: str) -> None:
    ids = Counter(op["operationId"] for _, _, op in operations(served(service)))
    assert [i for i, n in ids.items() if n > 1] == []
    for operation_id in ids:
        assert re.fullmatch(r"[a-z][a-z0-9_]*", operation_id), operation_id
        assert not re.search(r"_(get|post|put|delete)$", operation_id), f"{operation_id}: FastAPI's default"


@pytest.mark.parametrize("service", SERVICES)
def test_the_version_is_the_installed_package_version(service: str) -> None:
    assert served(service)["info"]["version"] == version(f"ragbot-{service}")
