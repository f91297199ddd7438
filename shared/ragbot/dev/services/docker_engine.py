"""Debian's Docker Engine as a private dockerd for ``make test-compose``: its own socket and data dir,
host networking only (no bridge, no NAT, no iptables rules; CONTAINERS.md), and a compose v2 binary built
once from the Go module proxy into ``<cache>/bin``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ragbot.dev.services.host import (
    ServiceError,
    WaitTimeout,
    apt_install,
    log,
    pid_alive,
    read_pid,
    terminate,
    wait_until,
)

COMPOSE_VERSION = "v2.40.3"
DOCKERD = Path("/usr/sbin/dockerd")
DOCKER = Path("/usr/bin/docker")  # Debian's client: the one in /usr/local/bin lacks build and compose
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0


def dockerd_command(state_dir: Path) -> list[str]:
    """The private engine's command line: nothing outside ``state_dir`` and no network plumbing."""
    run = state_dir / "run"
    return [
        str(DOCKERD),
        "--iptables=false",
        "--ip-masq=false",
        "--ip-forward=false",
        "--bridge=none",
        f"--host=unix://{run / 'docker.sock'}",
        f"--data-root={state_dir / 'data'}",
        f"--exec-root={run / 'exec'}",
        f"--pidfile={run / 'dockerd.pid'}",
    ]


@dataclass
class DockerEngine:
    """The private dockerd under ``state_dir`` (RAGBOT_COMPOSE_STATE, default /var/cache/ragbot/compose)."""

    state_dir: Path
    cache_dir: Path
    compose_version: str = COMPOSE_VERSION
    name: str = "docker"

    @property
    def socket(self) -> Path:
        return self.state_dir / "run" / "docker.sock"

    @property
    def pid_file(self) -> Path:
        return self.state_dir / "run" / "dockerd.pid"

    @property
    def compose_binary(self) -> Path:
        return self.cache_dir / "bin" / f"docker-compose-{self.compose_version}"

    def env(self) -> dict[str, str]:
        """The environment that points docker and compose at the private engine."""
        return {**os.environ, "DOCKER_HOST": f"unix://{self.socket}", "DOCKER_BUILDKIT": "1"}

    def install(self) -> None:
        """docker.io and debootstrap from Debian, compose v2 built from the Go module proxy once."""
        if not DOCKERD.exists() or not shutil.which("debootstrap"):
            apt_install("docker.io", "debootstrap")
        if not self.compose_binary.exists():
            log(f"docker: building docker compose {self.compose_version} (about 10 minutes, once)")
            self._build_compose()

    def _build_compose(self) -> None:
        module = f"github.com/docker/compose/v2@{self.compose_version}"
        found = subprocess.run(["go", "mod", "download", "-json", module], capture_output=True, text=True)
        if found.returncode != 0:
            raise ServiceError(f"go mod download {module} failed:\n{found.stderr[-4000:]}")
        with tempfile.TemporaryDirectory() as tmp:
            source = Path(tmp) / "compose"
            shutil.copytree(json.loads(found.stdout)["Dir"], source)
            for path in source.rglob("*"):
                path.chmod(path.stat().st_mode | 0o200)
            self.compose_binary.parent.mkdir(parents=True, exist_ok=True)
            flags = f"-s -w -X github.com/docker/compose/v2/internal.Version={self.compose_version}"
            subprocess.run(
                ["go", "build", "-trimpath", "-ldflags", flags, "-o", str(self.compose_binary), "./cmd"],
                cwd=source,
                env={**os.environ, "CGO_ENABLED": "0"},
                check=True,
            )

    def ready(self) -> bool:
        """The engine answers on its socket."""
        if not self.socket.exists():
            return False
        done = subprocess.run([str(DOCKER), "info"], env=self.env(), capture_output=True, check=False)
        return done.returncode == 0

    def start(self) -> None:
        """dockerd in its own session, so it outlives the command that started it."""
        if self.ready():
            return
        (self.state_dir / "run").mkdir(parents=True, exist_ok=True)
        (self.state_dir / "data").mkdir(parents=True, exist_ok=True)
        log_file = self.state_dir / "dockerd.log"
        with log_file.open("ab") as out:
            subprocess.Popen(
                dockerd_command(self.state_dir),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            wait_until("dockerd did not answer", self.ready, timeout_s=START_TIMEOUT_S, every_s=0.5)
        except WaitTimeout as exc:
            raise ServiceError(f"{exc}; see {log_file}") from None
        log("docker: dockerd is up")

    def stop(self) -> None:
        """Stop dockerd and unmount what it leaves behind."""
        pid = read_pid(self.pid_file)
        if pid_alive(pid) and pid is not None:
            terminate(pid, within_s=STOP_TIMEOUT_S)
        netns = self.state_dir / "run" / "exec" / "netns" / "default"
        if netns.exists():
            subprocess.run(["umount", str(netns)], capture_output=True, check=False)

    def status(self) -> str:
        return f"{self.name:<6} unix://{self.socket}  {'answers' if self.ready() else 'not answering'}"
