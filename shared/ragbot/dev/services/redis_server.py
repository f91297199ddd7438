"""Redis from Debian's ``redis-server`` on 127.0.0.1:REDIS_PORT, without persistence (a clean broker)."""

from __future__ import annotations

import socket
import subprocess
from dataclasses import dataclass

from ragbot.dev.services.base import RunState, Stopping, stop_started
from ragbot.dev.services.config import ServicesConfig
from ragbot.dev.services.host import ServiceError, WaitTimeout, log, need_command, port_open, tail, wait_until

START_TIMEOUT_S = 30.0
STOPPING = Stopping(pattern="redis-server", within_s=20)


def answers_ping(port: int, *, timeout_s: float = 2.0) -> bool:
    """Whether 127.0.0.1:port answers ``PING`` with ``+PONG`` (what ``redis-cli ping`` checks)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as conn:
            conn.sendall(b"PING\r\n")
            return conn.recv(64).startswith(b"+PONG")
    except OSError:
        return False


@dataclass
class RedisServer:
    """One throwaway Redis per port; pid, log and owner in ``<run dir>/redis-<port>``."""

    config: ServicesConfig
    name: str = "redis"

    @property
    def port(self) -> int:
        return self.config.redis_port

    @property
    def state(self) -> RunState:
        return RunState(self.config.run_dir / f"redis-{self.port}", "redis.pid")

    def install(self) -> None:
        need_command("redis-server", "redis-server")
        need_command("redis-cli", "redis-tools")

    def ready(self) -> bool:
        return answers_ping(self.port)

    def start(self) -> None:
        self.install()
        if self.ready():
            log(f"redis: 127.0.0.1:{self.port} already answers; reusing it")
            return
        if port_open(self.port):
            raise ServiceError(f"redis: port {self.port} is taken by something that is not Redis")
        folder = self.state.folder
        folder.mkdir(parents=True, exist_ok=True)
        self.state.forget()
        log_file = folder / "redis.log"
        # No persistence: tests and `make run` need a clean broker, not a durable one.
        subprocess.run(
            ["redis-server", "--bind", "127.0.0.1", "--port", str(self.port), "--daemonize", "yes",
             "--pidfile", str(self.state.pid_file), "--logfile", str(log_file), "--dir", str(folder),
             "--save", "", "--appendonly", "no"],
            check=True,
        )  # fmt: skip
        try:
            wait_until(
                f"redis: no PONG on 127.0.0.1:{self.port}", self.ready, timeout_s=START_TIMEOUT_S, every_s=0.1
            )
        except WaitTimeout as exc:
            raise ServiceError(f"{exc} (log: {log_file})\n{tail(log_file)}") from None
        self.state.claim(self.config.owner_tag)
        log(f"redis: started on 127.0.0.1:{self.port} (pid {self.state.pid() or '?'})")

    def stop(self) -> None:
        stop_started("redis", self.port, self.state, STOPPING, caller=self.config.owner)

    def status(self) -> str:
        return self.state.status_line("redis", self.port, "answers" if self.ready() else "not answering")
