"""Elasticsearch's integ-test zip from Maven Central as one throwaway single-node cluster on ES_PORT.

The zip is checked against Maven's ``.sha1`` and cached in ``<cache>/elasticsearch-<version>.zip``;
it is unpacked once into ``<base>/elasticsearch-<version>``. Each start gets a private config dir and a
fresh data dir under ``<run dir>/es-<port>``. Elasticsearch refuses to run as root: as root the node runs
as the system user ``ragbot-es``.
"""

from __future__ import annotations

import hashlib
import json
import pwd
import re
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from ragbot.dev.services.base import RunState, Stopping, stop_started
from ragbot.dev.services.config import ES_USER, ServicesConfig
from ragbot.dev.services.host import (
    ServiceError,
    WaitTimeout,
    apt_install,
    chown_to,
    http_get,
    log,
    need_command,
    pid_alive,
    pid_runs,
    port_open,
    tail,
    terminate,
    wait_until,
)

JVM_DIR = Path("/usr/lib/jvm")
STOPPING = Stopping(pattern="org.elasticsearch", within_s=60, throwaway=("data",))
DOWNLOAD_TRIES = 3


def java_major(version: str) -> int | None:
    """A Java version's major number: "17.0.13" -> 17, "1.8.0_392" -> 8, "21" -> 21."""
    version = version.removeprefix("1.") if version.startswith("1.") else version
    found = re.match(r"[0-9]+", version)
    return int(found.group()) if found else None


def jdk_major(home: Path) -> int | None:
    """The major version of the JDK at ``home``, from its ``release`` file, else ``java -version``."""
    try:
        release = (home / "release").read_text()
    except OSError:
        release = ""
    found = re.search(r'^JAVA_VERSION="([^"]*)"', release, re.MULTILINE)
    if not found:
        done = subprocess.run(
            [str(home / "bin" / "java"), "-version"], capture_output=True, text=True, check=False
        )
        found = re.search(r'version "([^"]*)"', done.stderr)
    return java_major(found.group(1)) if found else None


def newest_jdk(candidates: Iterable[tuple[Path, int | None]], *, minimum: int) -> Path | None:
    """The JDK with the highest major version at or above ``minimum`` (the first of equals wins)."""
    best: tuple[int, Path] | None = None
    for home, major in candidates:
        if major is not None and major >= minimum and (best is None or major > best[0]):
            best = (major, home)
    return best[1] if best else None


def minimum_java(es_version: str) -> int:
    """Elasticsearch 9 needs JDK 21; 8.x runs on 17.

    Lucene's SIMD vector code (Panama) and Elasticsearch's native vector library need 21+: on 17 the dense
    searches run scalar, measured 1.6x slower at 100k paragraphs (docs/benchmarks.md), so the newest wins.
    """
    return 21 if int(es_version.split(".")[0]) >= 9 else 17


def node_config(*, port: int, transport_port: int, folder: Path) -> str:
    """The elasticsearch.yml of a throwaway single test node."""
    return f"""\
# Written by ragbot.dev.services for a throwaway test node; every start gets a fresh data dir.
cluster.name: ragbot-{port}
node.name: ragbot-{port}
network.host: 127.0.0.1
http.port: {port}
transport.port: {transport_port}
discovery.type: single-node
path.data: {folder}/data
path.logs: {folder}/logs
xpack.security.enabled: false
cluster.routing.allocation.disk.threshold_enabled: false
"""


def health_status(body: str | None) -> str | None:
    """The colour in a ``_cluster/health`` answer, or None."""
    if not body:
        return None
    try:
        status = json.loads(body).get("status")
    except (ValueError, AttributeError):
        return None
    return status if isinstance(status, str) else None


def sha1_of(path: Path) -> str:
    digest = hashlib.sha1()  # Maven Central publishes .sha1 files
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def download(url: str, target: Path) -> None:
    """Fetch ``url`` into ``target`` through a ``.part`` file, trying a few times."""
    part = target.with_name(target.name + ".part")
    for attempt in range(1, DOWNLOAD_TRIES + 1):
        try:
            with urllib.request.urlopen(url, timeout=60) as response, part.open("wb") as out:
                shutil.copyfileobj(response, out, 1 << 20)
        except (OSError, urllib.error.URLError) as exc:
            if attempt == DOWNLOAD_TRIES:
                part.unlink(missing_ok=True)
                raise ServiceError(f"cannot download {url}: {exc}") from None
            time.sleep(attempt)
            continue
        part.replace(target)
        return


@dataclass
class ElasticsearchNode:
    """The single test node on ES_PORT; pid, owner, config, data and logs in ``<run dir>/es-<port>``."""

    config: ServicesConfig
    name: str = "es"

    @property
    def port(self) -> int:
        return self.config.es_port

    @property
    def state(self) -> RunState:
        return RunState(self.config.run_dir / f"es-{self.port}", "es.pid")

    # --- installing ------------------------------------------------------------------------------

    def java_home(self) -> Path:
        """ES_JAVA_HOME, else the newest JDK under /usr/lib/jvm that is new enough (installed if none)."""
        if self.config.es_java_home is not None:
            if not (self.config.es_java_home / "bin" / "java").exists():
                raise ServiceError(f"ES_JAVA_HOME={self.config.es_java_home} has no bin/java")
            return self.config.es_java_home
        minimum = minimum_java(self.config.es_version)
        found = self._find_jdk(minimum)
        if found is None:
            apt_install(f"openjdk-{minimum}-jre-headless")
            found = self._find_jdk(minimum)
        if found is None:
            raise ServiceError(f"no JDK >= {minimum} under {JVM_DIR}; set ES_JAVA_HOME")
        return found

    def _find_jdk(self, minimum: int) -> Path | None:
        homes = sorted(JVM_DIR.iterdir()) if JVM_DIR.is_dir() else []
        real = [h for h in homes if not h.is_symlink() and (h / "bin" / "java").exists()]
        return newest_jdk(((h, jdk_major(h)) for h in real), minimum=minimum)

    def _ensure_user(self) -> None:
        if not self.config.root:
            return
        try:
            pwd.getpwnam(ES_USER)
        except KeyError:
            subprocess.run(
                ["useradd", "--system", "--no-create-home", "--home-dir", "/nonexistent",
                 "--shell", "/usr/sbin/nologin", ES_USER],
                check=True,
            )  # fmt: skip
            log(f"elasticsearch: created system user {ES_USER}")

    def _download(self) -> None:
        """The integ-test zip, verified against Maven's .sha1; cached outside the clone."""
        zip_path, url = self.config.es_zip, self.config.es_zip_url
        zip_path.parent.mkdir(parents=True, exist_ok=True)
        sha1_file = zip_path.with_name(zip_path.name + ".sha1")
        if not sha1_file.is_file() or sha1_file.stat().st_size == 0:
            download(url + ".sha1", sha1_file)
        want = sha1_file.read_text()[:40]
        if zip_path.is_file() and sha1_of(zip_path) == want:
            return
        log(f"elasticsearch: downloading {url}")
        part = zip_path.with_name(zip_path.name + ".download")
        download(url, part)
        if sha1_of(part) != want:
            part.unlink(missing_ok=True)
            raise ServiceError(f"elasticsearch: {url} does not match its .sha1")
        part.replace(zip_path)

    def _unpack(self) -> None:
        home, base = self.config.es_home, self.config.base_dir
        if (home / "bin" / "elasticsearch").exists():
            return
        need_command("unzip", "unzip")
        self._download()
        base.mkdir(parents=True, exist_ok=True)
        base.chmod(0o755)
        with tempfile.TemporaryDirectory(prefix=".unpack.", dir=base) as tmp:
            # unzip keeps the launchers' exec bits (Python's zipfile does not).
            subprocess.run(["unzip", "-q", str(self.config.es_zip), "-d", tmp], check=True)
            unpacked = Path(tmp) / f"elasticsearch-{self.config.es_version}"
            if not unpacked.is_dir():
                raise ServiceError(f"elasticsearch: unexpected zip layout in {tmp}")
            unpacked.rename(home)
        if self.config.root:
            chown_to(ES_USER, home)
        log(f"elasticsearch: unpacked into {home}")

    def install(self) -> None:
        need_command("curl", "curl")
        self._ensure_user()
        self.java_home()
        self._unpack()

    def environment(self) -> dict[str, str]:
        """``es-env``: where the distribution, its JDK and a run dir the node user can write are.

        For callers that start nodes of their own (tests/support/es_cluster.py); installs what is missing.
        """
        need_command("curl", "curl")
        self._ensure_user()
        java = self.java_home()
        self._unpack()
        self._make_run_dir()
        return {
            "ES_HOME": str(self.config.es_home),
            "ES_JAVA_HOME": str(java),
            "ES_RUN_DIR": str(self.config.run_dir),
            "ES_USER": ES_USER if self.config.root else "",
        }

    def _make_run_dir(self) -> None:
        self.config.run_dir.mkdir(parents=True, exist_ok=True)
        self.config.run_dir.chmod(0o755)

    # --- running ---------------------------------------------------------------------------------

    def _health(self, query: str = "", *, timeout_s: float = 5.0) -> str | None:
        return http_get(f"http://127.0.0.1:{self.port}/_cluster/health{query}", timeout_s=timeout_s)

    def ready(self) -> bool:
        return '"cluster_name"' in (self._health() or "")

    def start(self) -> None:
        need_command("curl", "curl")
        if self.ready():
            log(f"elasticsearch: 127.0.0.1:{self.port} already answers; reusing it")
            return
        if port_open(self.port):
            raise ServiceError(
                f"elasticsearch: port {self.port} is taken by something that is not Elasticsearch"
            )
        transport = self.config.es_transport_port
        if port_open(transport):
            raise ServiceError(f"elasticsearch: transport port {transport} is taken (set ES_TRANSPORT_PORT)")
        state = self.state
        pid = state.pid()
        if pid_runs(pid, STOPPING.pattern):
            raise ServiceError(
                f"elasticsearch: pid {pid} from an earlier 'up' runs but does not answer; run 'down' first"
            )
        self._ensure_user()
        java = self.java_home()
        self._unpack()
        self._make_run_dir()
        self._prepare(state.folder)
        self._launch(state, java)
        state.claim(self.config.owner_tag)
        log(f"elasticsearch: started on http://127.0.0.1:{self.port} (pid {state.pid()})")

    def _prepare(self, folder: Path) -> None:
        """A private config dir per node, so nodes never share or rewrite the distribution's config."""
        shutil.rmtree(folder, ignore_errors=True)
        (folder / "config" / "jvm.options.d").mkdir(parents=True)
        (folder / "data").mkdir()
        (folder / "logs").mkdir()
        for name in ("jvm.options", "log4j2.properties"):
            shutil.copy2(self.config.es_home / "config" / name, folder / "config" / name)
        (folder / "config" / "elasticsearch.yml").write_text(
            node_config(port=self.port, transport_port=self.config.es_transport_port, folder=folder)
        )
        if self.config.root:
            chown_to(ES_USER, folder)

    def _launch(self, state: RunState, java: Path) -> None:
        folder, heap = state.folder, self.config.es_heap
        version = self.config.es_version
        log(f"elasticsearch: starting {version} on 127.0.0.1:{self.port} (java {java}, heap {heap})")
        command = [
            "env", f"ES_JAVA_HOME={java}", f"ES_JAVA_OPTS=-Xms{heap} -Xmx{heap}",
            f"ES_PATH_CONF={folder / 'config'}",
            str(self.config.es_home / "bin" / "elasticsearch"), "-d", "-p", str(state.pid_file),
        ]  # fmt: skip
        if self.config.root:
            command = ["runuser", "-u", ES_USER, "--", *command]
        with (folder / "stdout.log").open("wb") as out:
            rc = subprocess.run(
                command, cwd=folder, stdout=out, stderr=subprocess.STDOUT, check=False
            ).returncode
        if rc != 0:
            self._fail(state, f"the launcher exited with {rc}")

        def yellow() -> bool:
            pid = state.pid()
            if pid is not None and not pid_alive(pid):
                self._fail(state, f"the node (pid {pid}) exited")
            body = self._health("?wait_for_status=yellow&timeout=5s", timeout_s=10)
            return health_status(body) in ("yellow", "green")

        try:
            wait_until("no yellow health", yellow, timeout_s=self.config.es_start_timeout_s, every_s=0.5)
        except WaitTimeout as exc:
            self._fail(state, str(exc))

    def _fail(self, state: RunState, why: str) -> NoReturn:
        folder = state.folder
        logs = tail(folder / "logs" / f"ragbot-{self.port}.log", folder / "stdout.log", lines=40)
        pid = state.pid()
        if pid is not None and pid_runs(pid, STOPPING.pattern):
            terminate(pid, within_s=30)
        state.forget()
        raise ServiceError(
            f"elasticsearch: {why}\n{logs}\nelasticsearch did not start on 127.0.0.1:{self.port} "
            f"(logs: {folder / 'logs'})"
        )

    def stop(self) -> None:
        # The data dir is throwaway (the next `up` starts fresh); logs stay for post-mortems.
        stop_started("elasticsearch", self.port, self.state, STOPPING, caller=self.config.owner)

    def status(self) -> str:
        body = self._health() or ""
        state = f"answers ({health_status(body) or ''})" if '"cluster_name"' in body else "not answering"
        return self.state.status_line("es", self.port, state)
