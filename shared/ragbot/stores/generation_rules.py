"""The rules every store's generations share: a generation's id, its ES index prefix or SQLite file,
and whether it stores what a definition asks for. Store adapters import these; nothing here imports
an adapter (``ragbot.stores.generations`` picks the adapter and builds on both).
"""

from __future__ import annotations

from pathlib import Path

from ragbot.definition import DocumentDefinition, parse_definition, stored_form
from ragbot.errors import ConfigurationError
from ragbot.ports import Generation

LEGACY = "legacy"
_ID_CHARS = frozenset("0123456789abcdef")


def generation_id(fingerprint: str) -> str:
    """The generation a fingerprint names: ``g<first 8 hex digits>``."""
    head = fingerprint[:8].lower()
    if len(head) != 8 or not set(head) <= _ID_CHARS:
        raise ConfigurationError(f"not a sha256 fingerprint: {fingerprint!r}")
    return f"g{head}"


def check_generation_id(value: str) -> str:
    """A generation id from outside (a message, the pointer file), refused unless well formed."""
    if value == LEGACY or (len(value) == 9 and value[0] == "g" and set(value[1:]) <= _ID_CHARS):
        return value
    raise ConfigurationError(f"not a generation id: {value!r}")


def es_prefix(prefix: str, generation: str) -> str:
    """The index prefix of a generation: ``<prefix>-g<fp8>`` (its indices are ``<that>_<bucket>``)."""
    return prefix if check_generation_id(generation) == LEGACY else f"{prefix}-{generation}"


def embedded_file(path: Path, generation: str) -> Path:
    """The SQLite file of a generation, beside the configured one: ``<stem>.g<fp8><suffix>``."""
    if check_generation_id(generation) == LEGACY:
        return path
    return path.with_name(f"{path.stem}.{generation}{path.suffix}")


def stores_what(generation: Generation, definition: DocumentDefinition) -> bool:
    """True when ``generation`` stores the fields and models ``definition`` says (languages and weights
    aside), or was made before generations recorded a definition."""
    if generation.definition is None:
        return True
    own = parse_definition(dict(generation.definition), origin=f"generation {generation.generation_id}")
    return stored_form(own) == stored_form(definition)
