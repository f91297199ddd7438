"""What the local services run with: ports, versions, folders, the caller's owner tag (from the environment).

Every knob ``scripts/services.sh`` documented keeps its name and default. ``ServicesConfig.from_environ``
reads them when a command runs (never at import), so tests build a config from a plain mapping.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

# Keep equal to compose.yaml's image (tests/unit/test_compose.py checks it) and to the client's major.
ES_VERSION = "8.19.21"
HELM_VERSION = "v3.22.0"
# Services ``up``, ``down`` and ``status`` handle, in start order; ``down`` stops them in reverse.
KNOWN_SERVICES = ("redis", "es", "mediawiki")
DEFAULT_SERVICES = ("redis", "es")
# Elasticsearch refuses to run as root: as root it runs as this system user from /var/cache/ragbot.
ES_USER = "ragbot-es"
ROOT_BASE = Path("/var/cache/ragbot")


class UnknownServiceError(ValueError):
    """RAGBOT_SERVICES names a service this command line does not know."""


@dataclass(frozen=True)
class ServicesConfig:
    """The local services' settings; folders follow from the user (root or not) and the cache dir."""

    cache_dir: Path
    services: tuple[str, ...] = DEFAULT_SERVICES
    owner: str | None = None
    root: bool = False
    run_dir_override: Path | None = None
    redis_port: int = 6390
    es_port: int = 9250
    es_transport_port_override: int | None = None
    es_heap: str = "512m"
    es_version: str = ES_VERSION
    es_java_home: Path | None = None
    es_start_timeout_s: float = 180.0
    mw_port: int = 8480
    mw_admin_user: str = "Admin"
    mw_admin_password: str = "ragbot-test-admin-password"
    mw_bot_app: str = "ragbot"
    mw_bot_password: str = "ragbottestbotpassword0123456789ab"
    mw_workers: int = 4
    helm_version: str = HELM_VERSION

    @classmethod
    def from_environ(
        cls, environ: Mapping[str, str] | None = None, *, root: bool | None = None
    ) -> ServicesConfig:
        """The settings the environment asks for (``os.environ`` and the real user when not given)."""
        env = os.environ if environ is None else environ
        cache_home = env.get("XDG_CACHE_HOME") or str(Path(env.get("HOME") or Path.home()) / ".cache")
        transport = env.get("ES_TRANSPORT_PORT")
        java_home = env.get("ES_JAVA_HOME")
        run_dir = env.get("RAGBOT_RUN_DIR")
        return cls(
            services=parse_services(env.get("RAGBOT_SERVICES")),
            owner=env.get("RAGBOT_SERVICES_OWNER") or None,
            root=os.geteuid() == 0 if root is None else root,
            cache_dir=Path(cache_home) / "ragbot",
            run_dir_override=Path(run_dir) if run_dir else None,
            redis_port=int(env.get("REDIS_PORT") or 6390),
            es_port=int(env.get("ES_PORT") or 9250),
            es_transport_port_override=int(transport) if transport else None,
            es_heap=env.get("ES_HEAP") or "512m",
            es_version=env.get("ES_VERSION") or ES_VERSION,
            es_java_home=Path(java_home) if java_home else None,
            es_start_timeout_s=float(env.get("ES_START_TIMEOUT") or 180),
            mw_port=int(env.get("MW_PORT") or 8480),
            mw_admin_user=env.get("MW_ADMIN_USER") or "Admin",
            mw_admin_password=env.get("MW_ADMIN_PASSWORD") or "ragbot-test-admin-password",
            mw_bot_app=env.get("MW_BOT_APP") or "ragbot",
            mw_bot_password=env.get("MW_BOT_PASSWORD") or "ragbottestbotpassword0123456789ab",
            mw_workers=int(env.get("MW_WORKERS") or 4),
            helm_version=env.get("HELM_VERSION") or HELM_VERSION,
        )

    @property
    def base_dir(self) -> Path:
        """Where Elasticsearch is unpacked and (by default) the run dir lives: root's $HOME is private."""
        return ROOT_BASE if self.root else self.cache_dir

    @property
    def run_dir(self) -> Path:
        """Pid files, owner tags, logs and data, one folder per service and port."""
        return self.run_dir_override or self.base_dir / "run"

    @property
    def es_transport_port(self) -> int:
        return self.es_transport_port_override or self.es_port + 100

    @property
    def es_home(self) -> Path:
        return self.base_dir / f"elasticsearch-{self.es_version}"

    @property
    def es_zip(self) -> Path:
        """The downloaded integ-test zip, cached outside the clone."""
        return self.cache_dir / f"elasticsearch-{self.es_version}.zip"

    @property
    def es_zip_url(self) -> str:
        version = self.es_version
        return (
            "https://repo1.maven.org/maven2/org/elasticsearch/distribution/integ-test-zip/elasticsearch/"
            f"{version}/elasticsearch-{version}.zip"
        )

    @property
    def mw_dir(self) -> Path:
        return self.run_dir / f"mediawiki-{self.mw_port}"

    @property
    def mw_config_file(self) -> Path:
        """This run's LocalSettings.php (for maintenance scripts: MW_CONFIG_FILE=<it> php ...)."""
        return self.mw_dir / "LocalSettings.php"

    @property
    def owner_tag(self) -> str:
        """What ``up`` writes into a service's owner file."""
        return self.owner or "manual"


def parse_services(value: str | None) -> tuple[str, ...]:
    """RAGBOT_SERVICES ("redis es mediawiki") as names, refusing one this command line does not know."""
    names = tuple(value.split()) if value and value.strip() else DEFAULT_SERVICES
    unknown = [n for n in names if n not in KNOWN_SERVICES]
    if unknown:
        raise UnknownServiceError(
            f"unknown service '{unknown[0]}' in RAGBOT_SERVICES (known: {' '.join(KNOWN_SERVICES)})"
        )
    return names
