"""ragbot.dev.services starts, reuses and stops a real Redis on a free port, as `make test` does."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from ragbot.dev.servers import free_port
from ragbot.dev.services import ServicesConfig
from ragbot.dev.services.host import pid_alive
from ragbot.dev.services.redis_server import RedisServer, answers_ping

pytestmark = pytest.mark.integration


def _config(tmp_path: Path, port: int, owner: str) -> ServicesConfig:
    env = {
        **os.environ,
        "RAGBOT_SERVICES": "redis",
        "REDIS_PORT": str(port),
        "RAGBOT_RUN_DIR": str(tmp_path),
        "RAGBOT_SERVICES_OWNER": owner,
    }
    return ServicesConfig.from_environ(env)


def test_start_reuse_and_stop_a_redis_through_the_module(tmp_path: Path) -> None:
    port = free_port()
    mine = RedisServer(_config(tmp_path, port, f"pytest-{uuid.uuid4().hex[:8]}"))
    theirs = RedisServer(_config(tmp_path, port, "someone-else"))
    assert not mine.ready()
    try:
        mine.start()
        assert mine.ready() and answers_ping(port)
        pid = mine.state.pid()
        assert pid is not None and pid_alive(pid)
        assert mine.state.owner() == mine.config.owner
        assert f"started by up (pid {pid}, owner {mine.config.owner})" in mine.status()

        theirs.start()  # a second `up` reuses what answers and tags nothing
        theirs.stop()  # and its `down` leaves what another owner started
        assert mine.ready() and mine.state.pid() == pid and mine.state.owner() == mine.config.owner
    finally:
        mine.stop()
    assert not mine.ready()
    assert not pid_alive(pid)
    assert not mine.state.started() and mine.state.owner() is None
    assert (tmp_path / f"redis-{port}" / "redis.log").is_file()  # the log stays for post-mortems


def test_the_command_line_brings_redis_up_and_down(tmp_path: Path) -> None:
    port = free_port()
    env = {
        **os.environ,
        "RAGBOT_SERVICES": "redis",
        "REDIS_PORT": str(port),
        "RAGBOT_RUN_DIR": str(tmp_path),
        "RAGBOT_SERVICES_OWNER": f"pytest-{uuid.uuid4().hex[:8]}",
    }

    def services(command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "ragbot.dev.services", command],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    try:
        up = services("up")
        assert up.returncode == 0, up.stderr
        status = services("status")
        assert status.returncode == 0, status.stderr
        assert status.stdout.startswith(f"redis  127.0.0.1:{port}  answers  started by up (pid ")
    finally:
        down = services("down")
    assert down.returncode == 0, down.stderr
    assert "redis: stopped" in down.stderr
    status = services("status")
    assert (status.returncode, status.stdout) == (1, f"redis  127.0.0.1:{port}  not answering\n")
