"""Every module of the library and the services imports on its own: no import circle breaks at import time."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ["ragbot", "ragbot_ingest", "ragbot_embedder", "ragbot_retriever", "ragbot_chat"]
LIMIT_LINES = 500


def modules() -> list[str]:
    found: list[str] = []
    for name in PACKAGES:
        package = importlib.import_module(name)
        found.append(name)
        found += [m.name for m in pkgutil.walk_packages(package.__path__, prefix=f"{name}.")]
    return sorted(found)


def test_every_module_imports() -> None:
    # In a fresh interpreter, so what earlier tests imported cannot hide a module that fails on its own.
    names = modules()
    assert len(names) > 150, names
    script = "import importlib, sys\nfor name in sys.argv[1:]:\n    importlib.import_module(name)\n"
    result = subprocess.run(
        [sys.executable, "-c", script, *names], capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode == 0, result.stderr[-3000:]


@pytest.mark.parametrize("folder", ["shared", "services", "bench", "scripts"])
def test_no_module_is_over_500_lines(folder: str) -> None:
    long = {
        str(path.relative_to(ROOT)): count
        for path in (ROOT / folder).rglob("*.py")
        if ".venv" not in path.parts
        and (count := len(path.read_text(encoding="utf-8").splitlines())) > LIMIT_LINES
    }
    assert long == {}, f"split these modules (over {LIMIT_LINES} lines): {long}"
