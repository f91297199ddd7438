"""The one interface every local service has, and the pid and owner files a started daemon leaves behind.

``up`` writes the caller's owner tag (RAGBOT_SERVICES_OWNER, else ``manual``) next to the pid file of
what it started; something that already answers is reused and never tagged. ``down`` stops only what
``up`` started, and, when the caller sets an owner, only what carries the same tag, so a second ``up``
(a test run beside the shared dev services) never stops the first one's services.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ragbot.dev.services.host import log, need_command, pid_runs, read_pid, terminate


class Service(Protocol):
    """A local dependency: install it, start it (or reuse one that answers), ask if it answers, stop it."""

    name: str

    def install(self) -> None:
        """Install what is missing (Debian packages as root; otherwise say what to install)."""

    def start(self) -> None:
        """Start it unless it already answers; return once it answers."""

    def ready(self) -> bool:
        """Whether it answers now."""

    def stop(self) -> None:
        """Stop it if ``start`` started it for this caller; leave anything else alone."""

    def status(self) -> str:
        """One line: where it is, whether it answers, and who started it."""


@dataclass(frozen=True)
class RunState:
    """A started daemon's folder under the run dir: its pid file and the owner tag ``up`` wrote."""

    folder: Path
    pid_name: str

    @property
    def pid_file(self) -> Path:
        return self.folder / self.pid_name

    @property
    def owner_file(self) -> Path:
        return self.folder / "owner"

    def pid(self) -> int | None:
        return read_pid(self.pid_file)

    def owner(self) -> str | None:
        try:
            return self.owner_file.read_text().strip()
        except OSError:
            return None

    def started(self) -> bool:
        """Whether an ``up`` started something here (its pid file is still there)."""
        return self.pid_file.is_file()

    def claim(self, tag: str) -> None:
        """Tag what was just started as the caller's."""
        self.owner_file.write_text(f"{tag}\n")

    def owned_by(self, caller: str | None) -> bool:
        """A caller without an owner tag may stop anything ``up`` started; one with a tag only its own."""
        return caller is None or self.owner() == caller

    def forget(self, *also: str) -> None:
        """Remove the pid and owner files, and the named entries of the folder (data that is throwaway)."""
        for name in (self.pid_name, "owner", *also):
            path = self.folder / name
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)

    def status_line(self, name: str, port: int, state: str) -> str:
        """``redis  127.0.0.1:6390  answers  started by up (pid 12, owner make-test-3)``."""
        line = f"{name:<6} 127.0.0.1:{port}  {state}"
        if self.started():
            pid = self.pid() or "?"
            line += f"  started by up (pid {pid}, owner {self.owner() or '?'})"
        return line


@dataclass(frozen=True)
class Stopping:
    """How to stop one kind of daemon: what its command line shows, how long it may take, what to wipe."""

    pattern: str
    within_s: float
    group: bool = False
    throwaway: tuple[str, ...] = ()


def stop_started(name: str, port: int, state: RunState, how: Stopping, *, caller: str | None) -> None:
    """``down`` for one daemon: stop it if ``up`` started it for this caller, then forget it."""
    if not state.started():
        log(f"{name}: nothing on port {port} was started by 'up'; leaving it")
        return
    if not state.owned_by(caller):
        log(f"{name}: port {port} was started by another 'up' ({state.owner()}); leaving it")
        return
    pid = state.pid()
    if pid is not None and pid_runs(pid, how.pattern):
        terminate(pid, within_s=how.within_s, group=how.group)
        log(f"{name}: stopped (pid {pid})")
    else:
        log(f"{name}: pid {pid} is not running any more")
    state.forget(*how.throwaway)


@dataclass
class Commands:
    """A service that is only commands on PATH (promtool, the browser): nothing runs between tests.

    ``install`` puts the Debian packages in place, ``start`` is ``install``, ``ready`` says whether every
    command is found and ``stop`` has nothing to stop.
    """

    name: str
    packages: dict[str, str]  # command -> the Debian package that has it

    def install(self) -> None:
        for command, package in self.packages.items():
            need_command(command, package)

    def start(self) -> None:
        self.install()

    def ready(self) -> bool:
        return all(shutil.which(command) for command in self.packages)

    def stop(self) -> None:
        """Nothing runs."""

    def status(self) -> str:
        found = {command: shutil.which(command) for command in self.packages}
        return f"{self.name:<6} " + "  ".join(f"{c}: {path or 'missing'}" for c, path in found.items())
