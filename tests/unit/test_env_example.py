""".env.example documents every setting and every compose variable, and nothing that does not exist."""

from __future__ import annotations

import re
from pathlib import Path

from pydantic_settings import BaseSettings

from ragbot import settings as ragbot_settings

ROOT = Path(__file__).resolve().parents[2]
ENV_EXAMPLE = ROOT / ".env.example"
COMPOSE = ROOT / "compose.yaml"
_DOCUMENTED = re.compile(r"^#?\s*([A-Z][A-Z0-9_]*)=", re.MULTILINE)


def _settings_variables() -> set[str]:
    names: set[str] = set()
    for value in vars(ragbot_settings).values():
        if isinstance(value, type) and issubclass(value, BaseSettings) and value is not BaseSettings:
            prefix = str(value.model_config.get("env_prefix", ""))
            names |= {(prefix + field).upper() for field in value.model_fields}
    return names


def _documented() -> set[str]:
    return set(_DOCUMENTED.findall(ENV_EXAMPLE.read_text(encoding="utf-8")))


def test_every_setting_is_documented() -> None:
    missing = _settings_variables() - _documented()
    assert not missing, f"add these settings to .env.example, with a comment: {sorted(missing)}"


def test_no_documented_ragbot_variable_is_unknown() -> None:
    unknown = {name for name in _documented() if name.startswith("RAGBOT_")} - _settings_variables()
    assert not unknown, f".env.example documents variables no settings class reads: {sorted(unknown)}"


def test_every_compose_variable_is_documented() -> None:
    used = set(re.findall(r"\$\{([A-Za-z_][A-Za-z0-9_]*)", COMPOSE.read_text(encoding="utf-8")))
    missing = used - _documented()
    assert not missing, f"compose.yaml reads variables .env.example does not document: {sorted(missing)}"


def test_copying_the_example_changes_no_ragbot_setting() -> None:
    """Settings also read ./.env, so the RAGBOT_* lines stay commented: defaults live in settings.py."""
    active = re.findall(r"^(RAGBOT_[A-Z0-9_]*)=", ENV_EXAMPLE.read_text(encoding="utf-8"), re.MULTILINE)
    assert active == []


def test_every_variable_has_a_comment() -> None:
    lines = ENV_EXAMPLE.read_text(encoding="utf-8").splitlines()
    for index, line in enumerate(lines):
        if not _DOCUMENTED.match(line):
            continue
        above = index - 1
        while above >= 0 and _DOCUMENTED.match(lines[above]):
            above -= 1
        assert above >= 0 and lines[above].startswith("# "), f"{line!r} has no comment above it"
