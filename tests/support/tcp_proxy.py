"""A TCP proxy a test can switch off: in front of a real service, it simulates that service going down.

``refuse()`` closes the listening socket and cuts every open connection, so clients see exactly what
they would see if the service stopped (connection refused, reset connections); ``resume()`` listens
again on the same port. The proxy runs its own asyncio loop in a daemon thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Coroutine
from types import TracebackType
from typing import Any


class TcpProxy:
    """Forwards 127.0.0.1:<port> to ``target_host:target_port`` until told to refuse."""

    def __init__(self, target_host: str, target_port: int, *, host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        self.host = host
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind((host, 0))
            self.port = int(probe.getsockname()[1])
        self.connections = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="tcp-proxy", daemon=True)
        self._server: asyncio.base_events.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def url(self) -> str:
        """``http://host:port`` of the proxy."""
        return f"http://{self.host}:{self.port}"

    def start(self) -> TcpProxy:
        """Start the loop and listen."""
        self._thread.start()
        self.resume()
        return self

    def resume(self) -> None:
        """Listen (again) and forward."""
        self._call(self._listen())

    def refuse(self) -> None:
        """Stop listening and cut every open connection."""
        self._call(self._close())

    def stop(self) -> None:
        """Refuse, then stop the loop."""
        self.refuse()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)

    def __enter__(self) -> TcpProxy:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def _call(self, coro: Coroutine[Any, Any, None]) -> None:
        asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=10)

    async def _listen(self) -> None:
        if self._server is None:
            self._server = await asyncio.start_server(self._handle, self.host, self.port, reuse_address=True)

    async def _close(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
        for writer in list(self._writers):
            writer.close()
        self._writers.clear()
        if server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), timeout=5)

    async def _handle(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(*self.target)
        except OSError:
            client_writer.close()
            return
        self._writers.update({client_writer, upstream_writer})

        async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                while data := await reader.read(65536):
                    writer.write(data)
                    await writer.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                writer.close()
                self._writers.discard(writer)

        await asyncio.gather(pipe(client_reader, upstream_writer), pipe(upstream_reader, client_writer))
