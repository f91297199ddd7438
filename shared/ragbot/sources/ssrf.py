"""Server-side request forgery guard for URLs a ping names: the host allow-list, an address policy, and a
transport that connects only to the address it checked.

Entries of ``RAGBOT_INGEST_ALLOWED_CALLBACK_HOSTS`` are host names (``wiki.example.org``), ``*.domain``
wildcards, ``*`` (any host), IP addresses (``127.0.0.1``) or networks (``10.0.0.0/8``), each optionally
with a port (``wiki.example.org:8080``, ``[::1]:8480``, or ``:*`` for any port). Without a port an entry
allows only the scheme's default port (80, 443), so a listed host's other services (Redis on 6379) stay
out of reach. A URL's host and port must match one entry; then every address the host stands for is
checked:

- an address inside a listed address or network is allowed;
- ``0.0.0.0``/``::``, multicast, link-local (``169.254.0.0/16``, the cloud metadata service, ``fe80::/10``)
  and reserved addresses are refused unless listed as an address or network;
- loopback and private (RFC 1918, ULA, CGNAT) addresses are allowed only for a host listed by its exact
  name (``localhost``, ``wiki.internal``), never through ``*`` or ``*.domain``;
- anything else (a public address) is allowed.

IP literals must be written canonically: decimal (``2130706433``), octal (``0177.0.0.1``), hex
(``0x7f.0.0.1``), shortened (``127.1``) and IPv4-mapped IPv6 (``[::ffff:127.0.0.1]``) forms are refused,
since resolvers read them as addresses the name list never meant. ``PinnedTransport`` resolves a name
once per connection, checks every address, and connects to the checked one (TLS keeps the URL's host for
SNI and certificate checks, and ``Host`` is unchanged), so a name cannot be re-pointed between check and
connect (DNS rebinding).
"""

from __future__ import annotations

import asyncio
import dataclasses
import ipaddress
import re
import socket
import ssl
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

import httpcore
import httpx

from ragbot.errors import SourceRefused
from ragbot.settings.indexing import PortRule, split_port

__all__ = ["AllowList", "PinnedTransport", "Resolver", "check_host", "check_url", "system_resolver"]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
Match = Literal["exact", "wildcard", "address"]
Resolver = Callable[[str, int], Awaitable[list[str]]]
DEFAULT_PORTS = {"http": 80, "https": 443}

SETTING = "RAGBOT_INGEST_ALLOWED_CALLBACK_HOSTS"
# Hosts that every resolver reads as IPv4: dotted parts in decimal, octal or hex, one to four of them.
_NUMERIC_HOST = re.compile(r"^(?:0x[0-9a-f]*|[0-9]+)(?:\.(?:0x[0-9a-f]*|[0-9]+)){0,3}\.?$", re.IGNORECASE)
_CGNAT = ipaddress.IPv4Network("100.64.0.0/10")


def _ip(text: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(text.strip("[]"))
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class AllowList:
    """The parsed allow-list: exact names, ``*.domain`` suffixes, ``*``, and addresses or networks."""

    names: frozenset[str]
    suffixes: tuple[str, ...]
    any_host: bool
    networks: tuple[IPNetwork, ...]
    # Each entry alone with its port rule: which ports a host may be reached on.
    ports: tuple[tuple[AllowList, PortRule], ...] = ()

    @classmethod
    def from_entries(cls, entries: Iterable[str]) -> AllowList:
        """Parse the setting's entries (case and a trailing dot do not matter)."""
        hosts: list[str] = []
        rules: list[tuple[AllowList, PortRule]] = []
        for raw in entries:
            host, port = split_port(raw.strip().lower())
            host = host.rstrip(".")
            if host:
                hosts.append(host)
                rules.append((cls._of_hosts([host]), port))
        return dataclasses.replace(cls._of_hosts(hosts), ports=tuple(rules))

    @classmethod
    def _of_hosts(cls, entries: Iterable[str]) -> AllowList:
        names: set[str] = set()
        suffixes: list[str] = []
        networks: list[IPNetwork] = []
        any_host = False
        for raw in entries:
            entry = raw.strip().lower().rstrip(".")
            if not entry:
                continue
            if entry == "*":
                any_host = True
            elif entry.startswith("*."):
                suffixes.append(entry[1:])
            elif "/" in entry:
                try:
                    networks.append(ipaddress.ip_network(entry.strip("[]"), strict=False))
                except ValueError:
                    names.add(entry)
            else:
                ip = _ip(entry)
                if ip is not None:
                    networks.append(ipaddress.ip_network(ip))
                names.add(entry)
        return cls(frozenset(names), tuple(suffixes), any_host, tuple(networks))

    def match(self, host: str) -> Match | None:
        """How ``host`` is allowed: by its exact name, by a wildcard, as a listed address; or None."""
        host = host.lower().rstrip(".").strip("[]")
        ip = _ip(host)
        if ip is not None and self.covers(ip):
            return "address"
        if host in self.names:
            return "exact"
        if self.any_host or any(host.endswith(s) for s in self.suffixes):
            return "wildcard"
        return None

    def port_allowed(self, host: str, port: int, *, default_ports: Iterable[int]) -> bool:
        """True when an entry that matches ``host`` allows ``port`` (an entry without a port allows
        ``default_ports``: the scheme's)."""
        defaults = set(default_ports)
        for rule, allowed in self.ports:
            if rule.match(host) is None:
                continue
            if allowed == "any" or allowed == port or (allowed == "default" and port in defaults):
                return True
        return False

    def covers(self, ip: IPAddress) -> bool:
        """True when a listed address or network holds ``ip``."""
        return any(ip.version == n.version and ip in n for n in self.networks)

    def refusal(self, *, host: str, ip: IPAddress, match: Match) -> str | None:
        """Why ``host`` may not be reached at ``ip`` (None when it may)."""
        if self.covers(ip) and not ip.is_unspecified:
            return None
        if ip.is_unspecified:
            kind = "the unspecified address"
        elif ip.is_multicast:
            kind = "a multicast address"
        elif ip.is_link_local:
            kind = "a link-local address (cloud metadata lives there)"
        elif ip.is_loopback:
            kind = "a loopback address"
        elif ip.is_reserved:
            kind = "a reserved address"
        elif ip.is_private or (isinstance(ip, ipaddress.IPv4Address) and ip in _CGNAT):
            kind = "a private address"
        else:
            return None
        if kind in ("a loopback address", "a private address") and match == "exact":
            return None
        what = f"it is {kind}" if _ip(host) == ip else f"it resolves to {ip}, {kind}"
        return (
            f"callback_url host {host!r} is not allowed: {what} that the allow-list does not cover; "
            f"list the host by its exact name, or the address or its network (CIDR), in {SETTING}"
        )


def check_url(url: str, allow: AllowList) -> tuple[httpx.URL, Match]:
    """Parse a URL and refuse it unless it is http(s), without credentials, to an allowed host."""
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, ValueError) as exc:
        raise SourceRefused(f"callback_url is not a valid URL: {exc}") from None
    if parsed.scheme not in ("http", "https"):
        raise SourceRefused("callback_url must be an http(s) URL")
    host = parsed.host
    if not host:
        raise SourceRefused("callback_url has no host")
    if parsed.userinfo:
        raise SourceRefused("callback_url must not carry credentials")
    match = check_host(host, allow)
    default = DEFAULT_PORTS[parsed.scheme]
    port = parsed.port or default
    if not allow.port_allowed(host, port, default_ports=(default,)):
        shown = f"[{host}]" if ":" in host else host
        raise SourceRefused(
            f"callback_url port {port} is not allowed for {host!r}: an entry without a port allows only "
            f"{default}; add '{shown}:{port}' to {SETTING} to accept pings from that wiki"
        )
    return parsed, match


def check_host(host: str, allow: AllowList) -> Match:
    """How ``host`` is allowed; refuses non-canonical IP literals, unlisted hosts and refused addresses."""
    ip = _ip(host)
    if ip is None and _NUMERIC_HOST.match(host):
        raise SourceRefused(
            f"callback_url host {host!r} is a numeric address in a non-standard form; "
            "write it as a dotted-decimal IPv4 address (e.g. 192.0.2.10) or use the wiki's host name"
        )
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        raise SourceRefused(
            f"callback_url host [{host}] is an IPv4-mapped IPv6 address; write the IPv4 address itself"
        )
    match = allow.match(host)
    if ip is not None:  # an unlisted address is judged as strictly as a wildcard match
        reason = allow.refusal(host=host, ip=ip, match=match or "wildcard")
        if reason:
            raise SourceRefused(reason)
    if match is None:
        raise SourceRefused(
            f"callback_url host {host!r} is not allowed; add it to {SETTING} to accept pings from that wiki"
        )
    return match


async def system_resolver(host: str, port: int) -> list[str]:
    """The host's addresses from the system resolver (one lookup)."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


class _PinnedBackend(httpcore.AsyncNetworkBackend):
    """Resolves once, checks every address against the allow-list, connects to a checked address."""

    def __init__(self, *, allow: AllowList, resolve: Resolver) -> None:
        self.allow = allow
        self.resolve = resolve
        self.inner = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        """A stream to ``host``'s checked address (refused with ``SourceRefused`` before connecting)."""
        match = check_host(host, self.allow)
        if not self.allow.port_allowed(host, port, default_ports=DEFAULT_PORTS.values()):
            raise SourceRefused(f"callback_url port {port} is not allowed for {host!r} ({SETTING})")
        literal = _ip(host)
        if literal is not None:
            addresses: Sequence[str] = [str(literal)]
        else:
            try:
                addresses = await asyncio.wait_for(self.resolve(host, port), timeout)
            except (OSError, TimeoutError) as exc:
                raise httpcore.ConnectError(f"cannot resolve {host}: {exc}") from None
        if not addresses:
            raise httpcore.ConnectError(f"cannot resolve {host}: no addresses")
        for address in addresses:
            ip = _ip(address)
            reason = "not an IP address" if ip is None else self.allow.refusal(host=host, ip=ip, match=match)
            if reason:
                raise SourceRefused(reason)
        error: Exception | None = None
        for address in addresses:
            try:
                return await self.inner.connect_tcp(
                    address, port, timeout=timeout, local_address=local_address, socket_options=socket_options
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                error = exc
        assert error is not None
        raise error

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        """Unix sockets are never a callback target."""
        raise SourceRefused("callback_url must be an http(s) URL")

    async def sleep(self, seconds: float) -> None:
        """Delegate to the default backend."""
        await self.inner.sleep(seconds)


class PinnedTransport(httpx.AsyncHTTPTransport):
    """An httpx transport whose connections go only to addresses the allow-list accepts (no proxy)."""

    def __init__(
        self,
        *,
        allowed_hosts: Sequence[str],
        resolve: Resolver | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        super().__init__(trust_env=False)
        # The pool httpx built, rebuilt with our network backend; everything else is httpx's own. TLS
        # runs over the pinned stream with the URL's host as server name (SNI and certificate check).
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=ssl_context or httpx.create_ssl_context(trust_env=False),
            network_backend=_PinnedBackend(
                allow=AllowList.from_entries(allowed_hosts), resolve=resolve or system_resolver
            ),
        )
