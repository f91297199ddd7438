"""Boot the shipped compose.yaml with Docker on a machine without an image registry, and smoke-test it.

``make test-compose`` runs ``all``: install Debian's Docker Engine and a compose v2 binary (built once from
the Go module proxy, cached outside the clone), start a private dockerd with host networking only, build
the local base images (a debootstrap Debian, the host's uv, Elasticsearch's integ-test zip, Debian's
Redis and Prometheus), build ragbot's four images, boot ``compose.yaml`` with
``deploy/compose/test-local.yaml``, run ``tests/compose`` through it, and remove what it built unless
``RAGBOT_COMPOSE_KEEP=1``. Figures go to ``bench/results/containers.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from ragbot.dev.services.docker_engine import DockerEngine

ROOT = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "ragbot"
STATE = Path(os.environ.get("RAGBOT_COMPOSE_STATE", "/var/cache/ragbot/compose"))
# Debian's dockerd, private to this script (ragbot.dev.services.docker_engine): its own socket and data.
ENGINE = DockerEngine(state_dir=STATE, cache_dir=CACHE)
ES_VERSION = "8.19.21"
PROJECT = "ragbot-compose-test"
BASE = "ragbot-local/debian:bookworm"
UV = "ragbot-local/uv:host"
STAND_INS = {
    "ragbot-local/elasticsearch:8.19.21": "elasticsearch.Dockerfile",
    "ragbot-local/redis:bookworm": "redis.Dockerfile",
    "ragbot-local/prometheus:bookworm": "prometheus.Dockerfile",
}
ROLES = ("ingest", "embedder", "retriever", "chat")
PORTS = {"ingest": 18001, "retriever": 18002, "chat": 18003, "embedder": 19101, "prometheus": 19090}
RESULTS = ROOT / "bench" / "results" / "containers.json"


def log(message: str) -> None:
    """One progress line on stderr."""
    sys.stderr.write(f"compose-stack: {message}\n")
    sys.stderr.flush()


def run(*args: str, env: dict[str, str] | None = None, quiet: bool = False, check: bool = True) -> str:
    """Run a command; its output is returned (and echoed unless ``quiet``)."""
    result = subprocess.run(args, env=env, capture_output=True, text=True, check=False)
    if not quiet and result.stdout.strip():
        sys.stderr.write(result.stdout[-4000:])
    if check and result.returncode != 0:
        raise SystemExit(f"{' '.join(args[:4])} ... failed ({result.returncode}):\n{result.stderr[-4000:]}")
    return result.stdout


def succeeds(*args: str) -> bool:
    """Whether a docker command exits 0 against the private engine."""
    return subprocess.run(args, env=docker_env(), capture_output=True, check=False).returncode == 0


def docker_env() -> dict[str, str]:
    """The environment that points docker and compose at the private engine."""
    return ENGINE.env()


def docker(*args: str, quiet: bool = False, check: bool = True) -> str:
    """Debian's docker client (the one in /usr/local/bin lacks the build and compose plugins)."""
    return run("/usr/bin/docker", *args, env=docker_env(), quiet=quiet, check=check)


# As Debian's official slim images: no documentation, manual pages or translations, apt leaves no caches.
DPKG_EXCLUDES = """path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
"""
APT_CLEAN = """DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache ""; Dir::Cache::srcpkgcache "";
"""


def slim(rootfs: Path) -> None:
    """Trim a debootstrap tree the way the official slim images are trimmed."""
    (rootfs / "etc" / "dpkg" / "dpkg.cfg.d" / "docker").write_text(DPKG_EXCLUDES)
    (rootfs / "etc" / "apt" / "apt.conf.d" / "docker-clean").write_text(APT_CLEAN)
    for folder in (
        "usr/share/man",
        "usr/share/info",
        "usr/share/locale",
        "var/lib/apt/lists",
        "var/cache/apt",
    ):
        shutil.rmtree(rootfs / folder, ignore_errors=True)
        (rootfs / folder).mkdir(parents=True, exist_ok=True)
    for section in range(1, 9):  # JDK and other postinst scripts link their man pages into these
        (rootfs / "usr" / "share" / "man" / f"man{section}").mkdir()
    (rootfs / "var" / "cache" / "apt" / "archives" / "partial").mkdir(parents=True)
    (rootfs / "var" / "lib" / "apt" / "lists" / "partial").mkdir(parents=True)
    for doc in (rootfs / "usr" / "share" / "doc").glob("*"):
        for path in doc.rglob("*"):
            if path.is_file() and path.name != "copyright":
                path.unlink()


class Bases:
    """The local images that stand in for registry images (base, uv, Elasticsearch, Redis, Prometheus)."""

    rootfs_tar = CACHE / "images" / "debian-bookworm-rootfs.tar"

    def build(self) -> None:
        """Import or build each base image that the engine does not hold yet."""
        if not self._has(BASE):
            self._import_base()
        if not self._has(UV):
            with tempfile.TemporaryDirectory() as tmp:
                uv = shutil.which("uv") or str(Path(sys.executable).parent / "uv")
                shutil.copy2(uv, Path(tmp) / "uv")
                shutil.copy2(
                    ROOT / "deploy" / "compose" / "local" / "uv.Dockerfile", Path(tmp) / "Dockerfile"
                )
                docker("build", "-q", "-t", UV, tmp, quiet=True)
        for image, dockerfile in STAND_INS.items():
            if self._has(image):
                continue
            log(f"building {image}")
            with tempfile.TemporaryDirectory() as tmp:
                shutil.copy2(ROOT / "deploy" / "compose" / "local" / dockerfile, Path(tmp) / "Dockerfile")
                if "elasticsearch" in image:
                    zip_path = CACHE / f"elasticsearch-{ES_VERSION}.zip"
                    if not zip_path.exists():
                        run(sys.executable, "-m", "ragbot.dev.services", "es-env", quiet=True)
                    os.link(zip_path, Path(tmp) / zip_path.name)
                docker("build", "-q", "--network=host", "--build-arg", f"BASE_IMAGE={BASE}", "-t", image, tmp)

    def _has(self, image: str) -> bool:
        return succeeds("/usr/bin/docker", "image", "inspect", image)

    def _import_base(self) -> None:
        """Debian bookworm by debootstrap (cached as a tarball), with the host's CA certificates."""
        if not self.rootfs_tar.exists():
            log("debootstrap: Debian bookworm (about 2 minutes, once)")
            with tempfile.TemporaryDirectory() as tmp:
                rootfs = Path(tmp) / "rootfs"
                include = "ca-certificates,python3,libgomp1"
                run(
                    "debootstrap",
                    "--variant=minbase",
                    f"--include={include}",
                    "bookworm",
                    str(rootfs),
                    "http://deb.debian.org/debian",
                    quiet=True,
                )
                for cert in Path("/usr/local/share/ca-certificates").glob("*.crt"):
                    shutil.copy2(cert, rootfs / "usr" / "local" / "share" / "ca-certificates" / cert.name)
                run("chroot", str(rootfs), "update-ca-certificates", quiet=True)
                slim(rootfs)
                self.rootfs_tar.parent.mkdir(parents=True, exist_ok=True)
                run("tar", "-C", str(rootfs), "-cf", str(self.rootfs_tar), ".", quiet=True)
        changes = [
            "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt",
            "ENV LANG=C.UTF-8",
            'CMD ["python3"]',
        ]
        args = [a for change in changes for a in ("--change", change)]
        docker("import", *args, str(self.rootfs_tar), BASE, quiet=True)


class Stack:
    """compose.yaml plus the test override, under one project name, with throwaway secrets."""

    def __init__(self) -> None:
        self.prometheus_dir = STATE / "prometheus"
        self.secrets_file = STATE / "secrets.json"

    def secrets(self) -> dict[str, str]:
        """The required variables of compose.yaml, random and kept for the stack's lifetime."""
        if self.secrets_file.exists():
            loaded: dict[str, str] = json.loads(self.secrets_file.read_text())
            return loaded
        names = [
            "ELASTIC_PASSWORD",
            "REDIS_PASSWORD",
            "GRAFANA_ADMIN_PASSWORD",
            "WIKI_API_KEY",
            "KZCHATBOT_API_KEY",
            "ADMIN_API_KEY",
            "SERVICE_API_KEY",
            "METRICS_API_KEY",
            "UI_SESSION_SECRET",
        ]
        values = {name: secrets.token_urlsafe(24) for name in names}
        values["RAGBOT_INGEST_ALLOWED_CALLBACK_HOSTS"] = '["127.0.0.1", "127.0.0.1:18080"]'
        STATE.mkdir(parents=True, exist_ok=True)
        self.secrets_file.write_text(json.dumps(values))
        self.secrets_file.chmod(0o600)
        return values

    def env(self) -> dict[str, str]:
        """compose's environment: the private engine, local bases, secrets and the Prometheus copy."""
        return {
            **docker_env(),
            **self.secrets(),
            "PYTHON_IMAGE": BASE,
            "UV_IMAGE": UV,
            "RAGBOT_COMPOSE_PROMETHEUS_DIR": str(self.prometheus_dir),
            "COMPOSE_PROJECT_NAME": PROJECT,
            # The crash test waits for the killed worker's message to come back: a minute, not an hour.
            "RAGBOT_WORKER_VISIBILITY_TIMEOUT_S": "60",
        }

    def command(self) -> list[str]:
        """The compose command line every caller (this script, tests/compose) uses."""
        return [
            str(ENGINE.compose_binary),
            "--project-directory",
            str(ROOT),
            "-f",
            str(ROOT / "compose.yaml"),
            "-f",
            str(ROOT / "deploy" / "compose" / "test-local.yaml"),
        ]

    def compose(self, *args: str, quiet: bool = False) -> str:
        return run(*self.command(), *args, env=self.env(), quiet=quiet)

    def write_prometheus(self) -> None:
        """deploy/prometheus with every DNS lookup of a compose service replaced by its loopback port."""
        config = yaml.safe_load((ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text())
        for job in config["scrape_configs"]:
            lookups = job.pop("dns_sd_configs", None)
            if lookups:
                names = [n for lookup in lookups for n in lookup["names"]]
                # The GPU and beat variants are other embedder workers (not started here): the same port.
                base = {n.removesuffix("-gpu").removesuffix("-beat") for n in names}
                targets = sorted({f"127.0.0.1:{PORTS[n]}" for n in base})
                job["static_configs"] = [{"targets": targets}]
            for static in job.get("static_configs", []):
                static["targets"] = [
                    t.replace("localhost:9090", "127.0.0.1:19090") for t in static["targets"]
                ]
        self.prometheus_dir.mkdir(parents=True, exist_ok=True)
        (self.prometheus_dir / "prometheus.yml").write_text(yaml.safe_dump(config, sort_keys=False))
        shutil.copy2(ROOT / "deploy" / "prometheus" / "rules.yml", self.prometheus_dir / "rules.yml")
        (self.prometheus_dir / "metrics_key").write_text(self.secrets()["METRICS_API_KEY"])
        for path in self.prometheus_dir.iterdir():
            path.chmod(0o644)
        self.prometheus_dir.chmod(0o755)

    def image_sizes(self) -> dict[str, float]:
        """Each role's image size in MB (10^6 bytes, as docker reports it)."""
        sizes: dict[str, float] = {}
        for role in ROLES:
            out = docker("image", "inspect", "--format", "{{.Size}}", f"ragbot-{role}:latest", quiet=True)
            sizes[f"image_mb_{role}"] = round(int(out.strip()) / 1e6, 1)
        return sizes


def record(figures: dict[str, Any]) -> None:
    """Merge figures into bench/results/containers.json."""
    current: dict[str, Any] = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    current.update(figures)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(current, indent=2, sort_keys=True) + "\n")


def build_images(stack: Stack) -> float:
    """Build ragbot's four images; the seconds it took."""
    started = time.monotonic()
    stack.compose("build", "ingest", "embedder", "retriever", "chat", quiet=True)
    return round(time.monotonic() - started, 1)


def smoke(stack: Stack) -> int:
    """tests/compose against the running stack; pytest's exit status."""
    env = {
        **os.environ,
        **stack.secrets(),
        "RAGBOT_TEST_COMPOSE": "1",
        "RAGBOT_COMPOSE_COMMAND": json.dumps(stack.command()),
        "RAGBOT_COMPOSE_ENV": json.dumps(stack.env()),
        "RAGBOT_COMPOSE_RESULTS": str(RESULTS),
    }
    return subprocess.run(
        [sys.executable, "-m", "pytest", "tests/compose", "-v", "-p", "no:cacheprovider"],
        cwd=ROOT,
        env=env,
        check=False,
    ).returncode


def clean(stack: Stack, engine: DockerEngine) -> None:
    """Remove the stack, its volumes, ragbot's images and the build cache, then stop dockerd."""
    if engine.ready():
        run(
            *stack.command(),
            "down",
            "--volumes",
            "--remove-orphans",
            env=stack.env(),
            quiet=True,
            check=False,
        )
        for role in ROLES:
            docker("image", "rm", "-f", f"ragbot-{role}:latest", quiet=True, check=False)
        docker("builder", "prune", "-af", quiet=True, check=False)
        docker("image", "prune", "-f", quiet=True, check=False)
    engine.stop()
    shutil.rmtree(STATE / "prometheus", ignore_errors=True)
    (STATE / "secrets.json").unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("step", choices=["all", "engine", "bases", "build", "up", "smoke", "down", "clean"])
    step = parser.parse_args(argv).step
    engine, bases, stack = ENGINE, Bases(), Stack()
    if step in ("all", "engine", "bases", "build", "up"):
        engine.install()
        engine.start()
    if step in ("all", "bases", "build", "up"):
        bases.build()
    if step == "build":
        log(f"images built in {build_images(stack)} s")
    if step in ("all", "up"):
        figures: dict[str, Any] = {"build_cold_s": build_images(stack)} if step == "all" else {}
        if step == "all":
            figures["build_warm_s"] = build_images(stack)
            figures.update(stack.image_sizes())
        stack.write_prometheus()
        started = time.monotonic()
        stack.compose("up", "-d", "--wait", "--wait-timeout", "600", quiet=True)
        figures["compose_up_to_healthy_s"] = round(time.monotonic() - started, 1)
        record(figures)
        log(f"stack healthy: {figures}")
    if step == "smoke":
        return smoke(stack)
    if step == "down":
        stack.compose("down", "--volumes", quiet=True)
    if step == "clean":
        clean(stack, engine)
    if step == "all":
        try:
            status = smoke(stack)
        finally:
            if os.environ.get("RAGBOT_COMPOSE_KEEP") != "1":
                clean(stack, engine)
        return status
    return 0


if __name__ == "__main__":
    sys.exit(main())
