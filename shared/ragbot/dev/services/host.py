"""What every service needs from the machine: Debian packages, ports, pids, bounded waits, a log line.

Installing as root goes through apt-get (package scripts may not start system daemons); as anyone else a
missing package is an error that says what to install. Nothing here knows a particular service.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

POLICY_RC = Path("/usr/sbin/policy-rc.d")


class ServiceError(RuntimeError):
    """A service could not be installed, started or stopped; the message says why and where the log is."""


class WaitTimeout(ServiceError):
    """A bounded wait ran out; the message names what was awaited."""


def log(message: str) -> None:
    """One progress line on stderr, as ``services: <message>``."""
    sys.stderr.write(f"services: {message}\n")
    sys.stderr.flush()


def is_root() -> bool:
    return os.geteuid() == 0


@functools.cache
def _apt_update() -> None:
    """``apt-get update`` once per command."""
    log("apt-get update")
    _apt("update", "-qq")


def _apt(*args: str) -> int:
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    return subprocess.run(["apt-get", *args], env=env, stdout=subprocess.DEVNULL, check=False).returncode


def apt_install(*packages: str) -> None:
    """Install Debian packages (root only), keeping their scripts from starting system daemons."""
    wanted = " ".join(packages)
    if not is_root():
        raise ServiceError(
            f"missing: {wanted}. Install it with: sudo apt-get install -y {wanted} (or run this as root)"
        )
    if shutil.which("apt-get") is None:
        raise ServiceError(f"missing: {wanted}, and apt-get is not available: install it by hand")
    own_policy = not POLICY_RC.exists()
    if own_policy:
        POLICY_RC.write_text("#!/bin/sh\nexit 101\n")
        POLICY_RC.chmod(0o755)
    try:
        _apt_update()
        log(f"apt-get install -y {wanted}")
        rc = _apt("install", "-y", "-qq", "--no-install-recommends", *packages)
    finally:
        if own_policy:
            POLICY_RC.unlink(missing_ok=True)
    if rc != 0:
        raise ServiceError(f"apt-get install {wanted} failed (exit {rc})")


def need_command(command: str, package: str) -> None:
    """Make sure ``command`` is on PATH, installing the Debian ``package`` that has it when missing."""
    if shutil.which(command):
        return
    apt_install(package)
    if not shutil.which(command):
        raise ServiceError(f"{package} is installed but {command} is still not on PATH")


def port_open(port: int) -> bool:
    """Whether something accepts TCP connections on 127.0.0.1:port."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            return True
    except OSError:
        return False


def http_get(url: str, *, timeout_s: float = 5.0) -> str | None:
    """The body of a 2xx answer, or None when nothing (good) answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return str(response.read().decode("utf-8", "replace"))
    except (OSError, urllib.error.URLError, ValueError):
        return None


def read_pid(pid_file: Path) -> int | None:
    """The pid in a pid file, or None when there is none (or it holds no number)."""
    try:
        text = pid_file.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def pid_alive(pid: int | None) -> bool:
    """Whether ``pid`` runs; a zombie (exited, not yet reaped by its parent) counts as gone."""
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def pid_runs(pid: int | None, pattern: str) -> bool:
    """Whether ``pid`` still runs the program we started (pids get reused): its command line has it."""
    if not pid_alive(pid):
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        return False
    return pattern in cmdline


def terminate(pid: int, *, within_s: float, group: bool = False) -> None:
    """SIGTERM (to the whole process group when ``group``); SIGKILL to the pid if it outlives ``within_s``."""
    try:
        if group:
            os.killpg(pid, signal.SIGTERM)
        else:
            os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + within_s
    while pid_alive(pid):
        if time.monotonic() >= deadline:
            log(f"pid {pid} did not stop in {within_s:.0f} s; sending SIGKILL")
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            return
        time.sleep(0.2)


def wait_until(what: str, probe: Callable[[], bool], *, timeout_s: float, every_s: float = 0.2) -> None:
    """Poll ``probe`` until it holds; raise WaitTimeout naming ``what`` after ``timeout_s``.

    ``probe`` may raise ServiceError itself (the process died): that ends the wait at once.
    """
    deadline = time.monotonic() + timeout_s
    while not probe():
        if time.monotonic() >= deadline:
            raise WaitTimeout(f"{what} after {timeout_s:.0f} s")
        time.sleep(every_s)


def tail(*paths: Path, lines: int = 30) -> str:
    """The last lines of each log that exists, for a failure message."""
    parts = []
    for path in paths:
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        parts.append(f"==> {path} <==\n" + "\n".join(text.splitlines()[-lines:]))
    return "\n".join(parts)


def chown_to(user: str, path: Path) -> None:
    """Hand a tree to a system user (``chown -R user: path``)."""
    subprocess.run(["chown", "-R", f"{user}:", str(path)], check=True)
