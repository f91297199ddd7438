"""Who a caller is: API keys and ping tokens checked by hash in constant time, trusted networks, and the
real client address behind trusted proxies.

Nothing here keeps or logs a presented key: it is hashed at once and only the key's *name* travels on
(in ``Principal``, in logs, to the rate limiter).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import secrets
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from ragbot.settings import AUTH_SCOPES, AuthScope, AuthSettings

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
AuthMethod = Literal["bearer", "api_key", "basic", "ping_token", "session", "guest", "network", "disabled"]
LOOPBACK: tuple[IPNetwork, ...] = (ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128"))


@dataclass(frozen=True, slots=True)
class Principal:
    """The caller a request was authenticated as: a key's name (or the network / session it came by),
    the scopes it holds, and how it was recognised.

    A guest of the open chat page (``method == "guest"``, name ``guest:<id>``) holds no scope: it is let
    onto the few routes that admit guests (``RouteAuth.guest``) and nowhere else."""

    name: str
    scopes: frozenset[AuthScope]
    method: AuthMethod


def sha256_hex(secret: str) -> str:
    """The hex SHA-256 that settings store for a key or token."""
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()


def new_key() -> tuple[str, str]:
    """A new random key (43 URL-safe characters) and its SHA-256, for ``ragbot auth hash-key``."""
    key = secrets.token_urlsafe(32)
    return key, sha256_hex(key)


def parse_ip(value: str | None) -> IPAddress | None:
    """The address in ``value`` (an IPv4-mapped IPv6 address counts as its IPv4), or None."""
    if not value:
        return None
    try:
        address = ipaddress.ip_address(value.strip().strip("[]"))
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def in_networks(address: IPAddress, networks: Iterable[IPNetwork]) -> bool:
    """True when ``address`` lies in one of ``networks`` (of its own IP version)."""
    return any(address.version == net.version and address in net for net in networks)


def forwarded_client(peer: str | None, forwarded_for: str | None, proxies: Sequence[IPNetwork]) -> str | None:
    """The real client: the peer, unless the peer is a trusted proxy; then the last address of
    ``X-Forwarded-For`` that is not itself a trusted proxy (the one the proxies actually saw)."""
    peer_ip = parse_ip(peer)
    if peer_ip is None or not proxies or not forwarded_for or not in_networks(peer_ip, proxies):
        return str(peer_ip) if peer_ip is not None else peer
    client: IPAddress = peer_ip
    for hop in reversed(forwarded_for.split(",")[-32:]):
        address = parse_ip(hop)
        if address is None:
            break
        client = address
        if not in_networks(address, proxies):
            break
    return str(client)


class Authenticator:
    """The compiled ``AuthSettings``: key hashes, ping-token hashes, networks per scope, proxies."""

    def __init__(self, settings: AuthSettings) -> None:
        self.enabled = settings.enabled
        self._keys = [(bytes.fromhex(k.sha256), k.name, k.scopes) for k in settings.keys]
        self._tokens = [(bytes.fromhex(t.sha256), t.name) for t in settings.ping_tokens]
        networks: dict[AuthScope, tuple[IPNetwork, ...]] = {
            scope: tuple(nets) for scope, nets in settings.trusted_networks.items()
        }
        self.loopback_default = not self._keys and not self._tokens and not networks
        if self.loopback_default:
            networks = dict.fromkeys(AUTH_SCOPES, LOOPBACK)
        self._networks = networks
        self.proxies: tuple[IPNetwork, ...] = tuple(settings.trusted_proxies)

    @property
    def key_names(self) -> frozenset[str]:
        """The names of the configured keys (a UI session is only as good as its key still is)."""
        return frozenset(name for _, name, _ in self._keys)

    def scopes_of(self, name: str) -> frozenset[AuthScope]:
        """The scopes the key called ``name`` holds now (none when it was removed)."""
        return frozenset().union(*(scopes for _, n, scopes in self._keys if n == name))

    def by_key(self, key: str, method: AuthMethod) -> Principal | None:
        """The key's principal, comparing its hash with every configured one (no early exit)."""
        digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()
        found: tuple[str, frozenset[AuthScope]] | None = None
        for expected, name, scopes in self._keys:
            if hmac.compare_digest(digest, expected) and found is None:
                found = (name, scopes)
        return Principal(name=found[0], scopes=found[1], method=method) if found else None

    def by_ping_token(self, token: str) -> Principal | None:
        """A wiki's ping token: the ``ingest`` scope, honoured on the ping route only."""
        digest = hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()
        found: str | None = None
        for expected, name in self._tokens:
            if hmac.compare_digest(digest, expected) and found is None:
                found = name
        return Principal(name=found, scopes=frozenset({"ingest"}), method="ping_token") if found else None

    def by_network(self, client: str | None, scope: AuthScope) -> Principal | None:
        """A principal for a caller inside one of the scope's trusted networks.

        A peer that is no IP address (a Unix socket, an in-process test client) counts as loopback.
        """
        networks = self._networks.get(scope, ())
        if not networks:
            return None
        address = parse_ip(client)
        if address is None:
            trusted = any(net.is_loopback for net in networks)
        else:
            trusted = in_networks(address, networks)
        if not trusted:
            return None
        return Principal(name=f"network:{client or 'local'}", scopes=frozenset({scope}), method="network")


def _from_headers(headers: Mapping[str, str]) -> tuple[str, AuthMethod] | None:
    """The key a plain HTTP request carries: Bearer, X-API-Key, or HTTP Basic's password."""
    lowered = {k.lower(): v for k, v in headers.items()}
    authorization = lowered.get("authorization", "")
    scheme, _, value = authorization.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip(), "bearer"
    if lowered.get("x-api-key"):
        return lowered["x-api-key"], "api_key"
    if scheme.lower() == "basic" and value.strip():
        try:
            decoded = base64.b64decode(value.strip(), validate=True).decode("utf-8")
        except (ValueError, UnicodeDecodeError):
            return None
        password = decoded.partition(":")[2]
        return (password, "basic") if password else None
    return None


def refusal(
    authn: Authenticator, *, scope: AuthScope, headers: Mapping[str, str], peer: str | None
) -> tuple[int, str] | None:
    """Why a request outside FastAPI (the worker's metrics port) may not use ``scope``: (401 or 403, the
    reason), or None when it may. The same rules as ``require(scope)``: a key with the scope, or a
    network trusted for it (loopback when nothing is configured)."""
    if not authn.enabled:
        return None
    presented = _from_headers(headers)
    if presented is not None:
        principal = authn.by_key(presented[0], presented[1])
        if principal is None:
            if authn.by_network(peer, scope) is not None:
                return None
            return 401, f"the {presented[1]} credential matches no configured key"
        if scope not in principal.scopes:
            return 403, f"the key '{principal.name}' lacks the '{scope}' scope this route needs"
        return None
    if authn.by_network(peer, scope) is not None:
        return None
    return 401, f"this route needs the '{scope}' scope: send a key as 'Authorization: Bearer <key>'"
