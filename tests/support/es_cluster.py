"""A throwaway two-node Elasticsearch cluster of the integ-test distribution ``ragbot.dev.services`` installs.

``node-1`` is the only master-eligible node (with two master-eligible nodes, losing either one loses the
quorum: Elasticsearch's voting-configuration docs), and holds data; ``node-2`` holds data only. So
``kill_node("node-2")`` is the survivable loss a deployment of this shape sees: its primaries are
promoted on ``node-1`` and, with one replica per index, nothing is lost. Each node has its own ports,
config and data dir under the services run dir; ``stop()`` removes them.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from ragbot.dev.servers import free_port
from ragbot.dev.services import ServicesConfig
from ragbot.dev.services.elasticsearch_node import ElasticsearchNode

HEAP = "512m"
START_TIMEOUT_S = 240.0


@dataclass
class Node:
    """One node: its name, ports, directory and (while it runs) pid."""

    name: str
    http_port: int
    transport_port: int
    directory: Path
    master: bool
    pid: int | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"


def es_environment() -> dict[str, str]:
    """``python -m ragbot.dev.services es-env``: where the distribution, its JDK and the run dir are."""
    return ElasticsearchNode(ServicesConfig.from_environ()).environment()


@dataclass
class EsCluster:
    """Two local nodes of one cluster; start, kill -9 and restart nodes, wait for a health colour."""

    env: dict[str, str] = field(default_factory=es_environment)
    cluster_name: str = field(default_factory=lambda: f"ragbot-faults-{uuid.uuid4().hex[:8]}")
    nodes: dict[str, Node] = field(default_factory=dict)

    def __post_init__(self) -> None:
        base = Path(self.env["ES_RUN_DIR"]) / self.cluster_name
        for n, master in ((1, True), (2, False)):
            name = f"node-{n}"
            self.nodes[name] = Node(name, free_port(), free_port(), base / name, master)

    @property
    def urls(self) -> str:
        """Every node's HTTP URL, comma-separated: what ``RAGBOT_STORE_ES_URL`` takes for a cluster."""
        return ",".join(node.url for node in self.nodes.values())

    @property
    def master_url(self) -> str:
        return self.nodes["node-1"].url

    def _write_config(self, node: Node) -> None:
        home = Path(self.env["ES_HOME"])
        config = node.directory / "config"
        (config / "jvm.options.d").mkdir(parents=True, exist_ok=True)
        for name in ("jvm.options", "log4j2.properties"):
            shutil.copy(home / "config" / name, config / name)
        seeds = ", ".join(f'"127.0.0.1:{n.transport_port}"' for n in self.nodes.values())
        lines = [
            f"cluster.name: {self.cluster_name}",
            f"node.name: {node.name}",
            f"node.roles: [{'master, data, ingest' if node.master else 'data, ingest'}]",
            "network.host: 127.0.0.1",
            f"http.port: {node.http_port}",
            f"transport.port: {node.transport_port}",
            f"discovery.seed_hosts: [{seeds}]",
            f"path.data: {node.directory / 'data'}",
            f"path.logs: {node.directory / 'logs'}",
            "xpack.security.enabled: false",
            "cluster.routing.allocation.disk.threshold_enabled: false",
        ]
        if node.master:
            lines.append(f'cluster.initial_master_nodes: ["{node.name}"]')
        (config / "elasticsearch.yml").write_text("\n".join(lines) + "\n", encoding="utf-8")
        (node.directory / "data").mkdir(exist_ok=True)
        (node.directory / "logs").mkdir(exist_ok=True)
        user = self.env.get("ES_USER")
        if user:
            shutil.chown(node.directory.parent, user)
            for path in [node.directory, *node.directory.rglob("*")]:
                shutil.chown(path, user)

    def _launch(self, node: Node) -> subprocess.Popen[bytes]:
        """Start the launcher daemonized (``-d -p``): it exits once the node runs, the pid file stays."""
        if not (node.directory / "config").exists():
            self._write_config(node)
        pid_file = node.directory / "es.pid"
        pid_file.unlink(missing_ok=True)
        command = [
            "env",
            f"ES_JAVA_HOME={self.env['ES_JAVA_HOME']}",
            f"ES_JAVA_OPTS=-Xms{HEAP} -Xmx{HEAP}",
            f"ES_PATH_CONF={node.directory / 'config'}",
            str(Path(self.env["ES_HOME"]) / "bin" / "elasticsearch"),
            "-d",
            "-p",
            str(pid_file),
        ]
        if self.env.get("ES_USER"):
            command = ["runuser", "-u", self.env["ES_USER"], "--", *command]
        log = (node.directory / "launcher.log").open("ab")
        return subprocess.Popen(command, cwd=node.directory, stdout=log, stderr=subprocess.STDOUT)

    def _await_launch(self, node: Node, launcher: subprocess.Popen[bytes]) -> None:
        try:
            code = launcher.wait(timeout=START_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            launcher.kill()
            raise RuntimeError(
                f"{node.name} did not start in {START_TIMEOUT_S:.0f} s:\n{self.log(node)}"
            ) from None
        text = (node.directory / "es.pid").read_text() if (node.directory / "es.pid").exists() else ""
        if code != 0 or not text.strip():
            raise RuntimeError(f"{node.name} launcher exited with {code}:\n{self.log(node)}")
        node.pid = int(text)

    def launch(self) -> dict[str, subprocess.Popen[bytes]]:
        """Start both nodes at once without waiting (the caller does other work meanwhile)."""
        return {name: self._launch(node) for name, node in self.nodes.items()}

    def await_launch(self, launchers: dict[str, subprocess.Popen[bytes]]) -> None:
        """Wait for ``launch()``'s nodes to run, then for green (an empty cluster is green)."""
        for name, launcher in launchers.items():
            self._await_launch(self.nodes[name], launcher)
        self.wait_status("green", nodes=2)

    def start(self) -> EsCluster:
        """Start both nodes and wait for green."""
        self.await_launch(self.launch())
        return self

    def kill_node(self, name: str) -> None:
        """``kill -9`` a node's JVM, as a crash or an OOM kill would."""
        node = self.nodes[name]
        assert node.pid is not None, f"{name} is not running"
        os.kill(node.pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while _alive(node.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        node.pid = None

    def restart_node(self, name: str) -> None:
        """Start a killed node again on its own data dir (its shard copies recover from the others)."""
        node = self.nodes[name]
        self._await_launch(node, self._launch(node))

    def health(self, **params: str) -> dict[str, Any]:
        response = httpx.get(f"{self.master_url}/_cluster/health", params=params, timeout=70)
        body: dict[str, Any] = response.json()
        return body

    def wait_status(self, status: str, *, nodes: int, timeout_s: float = 180.0) -> dict[str, Any]:
        """Bounded wait for a health colour with ``nodes`` nodes in the cluster."""
        deadline = time.monotonic() + timeout_s
        body: dict[str, Any] = {}
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError, ValueError):
                body = self.health(wait_for_status=status, wait_for_nodes=str(nodes), timeout="5s")
                if not body.get("timed_out", True) and body.get("number_of_nodes") == nodes:
                    return body
            time.sleep(0.5)
        raise RuntimeError(f"cluster not {status} with {nodes} nodes in {timeout_s:.0f} s: {body}")

    def node_names_by_id(self) -> dict[str, str]:
        nodes = httpx.get(f"{self.master_url}/_nodes/_all/none", timeout=30).json()["nodes"]
        return {node_id: info["name"] for node_id, info in nodes.items()}

    def log(self, node: Node, lines: int = 30) -> str:
        texts = []
        for path in (node.directory / "launcher.log", node.directory / "logs" / f"{self.cluster_name}.log"):
            with contextlib.suppress(OSError):
                texts.append("\n".join(path.read_text(errors="replace").splitlines()[-lines:]))
        return "\n".join(texts)

    def stop(self) -> None:
        """Stop every node still running and delete the cluster's directories."""
        for node in self.nodes.values():
            if node.pid is not None and _alive(node.pid):
                os.kill(node.pid, signal.SIGTERM)
                deadline = time.monotonic() + 30
                while _alive(node.pid) and time.monotonic() < deadline:
                    time.sleep(0.1)
                if _alive(node.pid):
                    os.kill(node.pid, signal.SIGKILL)
            node.pid = None
        shutil.rmtree(next(iter(self.nodes.values())).directory.parent, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie still answers kill 0; daemonized nodes are not our children, so they are reaped by init.
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return False
    return state != "Z"
