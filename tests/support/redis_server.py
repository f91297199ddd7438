"""A dedicated ``redis-server`` with AOF on, in its own directory and port, that a test can restart."""

from __future__ import annotations

import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis

from ragbot.dev.servers import free_port
from support.waits import poll

START_TIMEOUT_S = 60.0


@dataclass
class RedisServer:
    """``redis-server --appendonly yes`` on 127.0.0.1; ``restart()`` stops and starts it on its dir."""

    directory: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = field(default=None, init=False)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        """Start (or start again) and wait for PONG; the AOF in the directory is loaded first."""
        self.directory.mkdir(parents=True, exist_ok=True)
        log = (self.directory / "redis.log").open("ab")
        # appendfsync everysec is Redis's default and what operations.md recommends; a clean SIGTERM
        # (what the test does) fsyncs the AOF before exiting.
        self.process = subprocess.Popen(
            [
                shutil.which("redis-server") or "redis-server",
                "--bind", "127.0.0.1", "--port", str(self.port), "--dir", str(self.directory),
                "--appendonly", "yes", "--appendfsync", "everysec", "--save", "",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        process = self.process

        def pong() -> bool:
            if process.poll() is not None:
                raise RuntimeError(f"redis-server exited with {process.returncode}: {self.log()}")
            client = redis.Redis.from_url(self.url, socket_connect_timeout=1)
            try:
                return bool(client.ping())
            finally:
                client.close()

        poll(
            f"redis-server on {self.port} to answer PONG",
            pong,
            timeout_s=START_TIMEOUT_S,
            every_s=0.05,
            retry_on=(redis.RedisError,),
            detail=self.log,
        )
        return self

    def stop(self) -> None:
        """SIGTERM (Redis writes the AOF out and exits), SIGKILL after 20 s."""
        proc = self.process
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        self.process = None

    def restart(self) -> float:
        """Stop and start on the same directory; returns the seconds Redis was unreachable."""
        began = time.monotonic()
        self.stop()
        self.start()
        return time.monotonic() - began

    def log(self) -> str:
        try:
            return (self.directory / "redis.log").read_text(errors="replace")[-2000:]
        except OSError:
            return ""
