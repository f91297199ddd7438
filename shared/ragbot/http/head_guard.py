"""What every request's head must pass before any route sees it: at most ``RAGBOT_HTTP_MAX_HEADERS``
headers and ``RAGBOT_HTTP_MAX_HEADER_BYTES`` of them (else 431), and a ``Host`` this service answers to
(else 400).

The size of the head (request line and headers together) is bounded earlier, by the server itself
(``ragbot.http.server``): a head over ``RAGBOT_HTTP_MAX_HEADER_BYTES`` is refused with 431 before it
is read in full. The health and metrics routes answer any ``Host`` (probes and scrapers address a pod
by its IP); nothing they return is built from it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from starlette.types import ASGIApp, Receive, Scope, Send

LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")
ANY_HOST_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})


def host_name(value: str) -> str:
    """The name in a ``Host`` header, without its port, lower case (``[::1]:8000`` -> ``::1``)."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1 : value.find("]")] if "]" in value else value[1:]
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


class HostRule:
    """The ``Host`` names a service answers to: exact names, ``*.domain`` wildcards, or ``*``."""

    def __init__(self, hosts: Iterable[str]) -> None:
        names = [host_name(h) if h != "*" else h for h in hosts if h]
        self.any = "*" in names
        self.exact = frozenset(n for n in names if not n.startswith("*."))
        self.suffixes = tuple(n[1:] for n in names if n.startswith("*."))

    def allows(self, host: str) -> bool:
        """True when ``host`` (a ``Host`` header's value) names this service."""
        if self.any:
            return True
        name = host_name(host)
        return name in self.exact or any(name.endswith(s) and len(name) > len(s) for s in self.suffixes)


def trusted_hosts(*, public_url: str | None, extra: Iterable[str]) -> HostRule:
    """Loopback, the public URL's host, and the configured names."""
    hosts = [*LOOPBACK_HOSTS, *extra]
    if public_url:
        hosts.append(public_url.split("://", 1)[-1].split("/", 1)[0])
    return HostRule(hosts)


async def _refuse(send: Send, status: int, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class HeadGuardMiddleware:
    """Refuses a request with too many headers (431) or an unknown ``Host`` (400), saying which."""

    def __init__(self, app: ASGIApp, *, max_headers: int, hosts: HostRule, max_header_bytes: int = 0) -> None:
        self.app = app
        self.max_headers = max_headers
        self.max_header_bytes = max_header_bytes
        self.hosts = hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers: list[tuple[bytes, bytes]] = scope.get("headers", [])
        if len(headers) > self.max_headers:
            await _refuse(
                send,
                431,
                f"the request has {len(headers)} headers; at most {self.max_headers} are accepted "
                "(RAGBOT_HTTP_MAX_HEADERS)",
            )
            return
        # The server stops reading a head over the limit that arrives in pieces; one that arrives whole
        # in a single read is parsed, so its size is checked here too.
        size = sum(len(k) + len(v) + 4 for k, v in headers)
        if self.max_header_bytes and size > self.max_header_bytes:
            await _refuse(
                send,
                431,
                f"the request's headers are {size} bytes; at most {self.max_header_bytes} are accepted "
                "(RAGBOT_HTTP_MAX_HEADER_BYTES)",
            )
            return
        host = next((v.decode("latin-1") for k, v in headers if k == b"host"), None)
        if host is not None and scope.get("path") not in ANY_HOST_PATHS and not self.hosts.allows(host):
            # The Host is not repeated back: nothing a caller sends there comes back in an answer.
            await _refuse(
                send,
                400,
                "this service does not answer to the Host header sent: use its public URL "
                "(RAGBOT_HTTP_PUBLIC_URL) or a name in RAGBOT_HTTP_TRUSTED_HOSTS",
            )
            return
        await self.app(scope, receive, send)
