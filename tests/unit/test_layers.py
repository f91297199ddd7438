"""The import layers in pyproject.toml hold: core < adapters < domain < compat, evaluation < cli, dev."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_import_contracts_are_kept() -> None:
    script = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run(
        [str(script), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "0 broken" in result.stdout
