"""``free_port`` hands out listenable ports below the kernel's ephemeral range, each one once."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from ragbot.dev import servers
from ragbot.dev.servers import free_port


def _ephemeral_range() -> tuple[int, int]:
    low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
    return int(low), int(high)


def test_ports_are_distinct_outside_the_ephemeral_range_and_bindable() -> None:
    low, high = _ephemeral_range()
    ports = [free_port() for _ in range(200)]
    assert len(set(ports)) == len(ports)
    assert all(not low <= port <= high for port in ports)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", ports[-1]))


def test_a_port_someone_listens_on_is_never_handed_out(monkeypatch: pytest.MonkeyPatch) -> None:
    start = free_port()
    while True:  # ten ports in a row that nobody holds
        block = range(start, start + 10)
        if all(_bindable(port) for port in block):
            break
        start = free_port()
    monkeypatch.setattr(servers, "_PORT_RANGE", block)
    monkeypatch.setattr(servers, "_handed_out", set())
    held = []
    for port in block[::2]:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", port))
        sock.listen()
        held.append(sock)
    try:
        assert sorted(free_port() for _ in range(5)) == list(block[1::2])
        with pytest.raises(RuntimeError, match="no free TCP port"):
            free_port()
    finally:
        for sock in held:
            sock.close()


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True
