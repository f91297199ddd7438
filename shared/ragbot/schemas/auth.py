"""API key and ping-token entries of ``AuthSettings``: a name, scopes, and the SHA-256 of the secret
(a plain secret is hashed as the entry is read and never kept)."""

from __future__ import annotations

import hashlib
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

AuthScope = Literal["ingest", "admin", "chat", "retrieve", "metrics"]
AUTH_SCOPES: tuple[AuthScope, ...] = ("ingest", "admin", "chat", "retrieve", "metrics")


def _hashed(data: Any, *, plain: str) -> Any:
    """Replace a plain secret (``plain``) by its SHA-256 before anything else sees or keeps it."""
    if isinstance(data, dict) and data.get(plain) is not None:
        data = dict(data)
        secret = data.pop(plain)
        value = secret.get_secret_value() if isinstance(secret, SecretStr) else str(secret)
        if len(value) < 16:
            raise ValueError(f"a {plain} must be at least 16 characters (ragbot auth hash-key makes one)")
        data["sha256"] = hashlib.sha256(value.encode()).hexdigest()
    return data


class ApiKeyEntry(BaseModel):
    """One API key: a name (logged, never the key), its scopes, and the SHA-256 of the key (hex).

    ``{"name", "scopes", "key"}`` is accepted too: the plain key is hashed at load and not kept.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9._-]+$")
    scopes: frozenset[AuthScope] = Field(min_length=1)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")

    @model_validator(mode="before")
    @classmethod
    def _hash_plain_key(cls, data: Any) -> Any:
        return _hashed(data, plain="key")


class PingTokenEntry(BaseModel):
    """A wiki's ping token (``?token=`` on ``POST /v1/pages/changed`` only), stored as its SHA-256."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9._-]+$")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")

    @model_validator(mode="before")
    @classmethod
    def _hash_plain_token(cls, data: Any) -> Any:
        return _hashed(data, plain="token")
