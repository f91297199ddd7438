"""The command line that drives the local services: ``python -m ragbot.dev.services up|down|status|...``.

``make test``, ``make services-up`` and ``scripts/services.sh`` (a shim kept for habit) all come here.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from ragbot.dev.services.base import Service
from ragbot.dev.services.browser import chromium
from ragbot.dev.services.config import ServicesConfig, UnknownServiceError
from ragbot.dev.services.elasticsearch_node import ElasticsearchNode
from ragbot.dev.services.helm import Helm
from ragbot.dev.services.host import ServiceError, log
from ragbot.dev.services.mediawiki import MediaWiki
from ragbot.dev.services.prometheus import promtool
from ragbot.dev.services.redis_server import RedisServer

# What RAGBOT_SERVICES may name, each built from the config; `up` starts them in RAGBOT_SERVICES's order.
DAEMONS: dict[str, Callable[[ServicesConfig], Service]] = {
    "redis": RedisServer,
    "es": ElasticsearchNode,
    "mediawiki": MediaWiki,
}
# What `deps` installs besides the daemons: commands the tests run, nothing that stays up.
TOOLS: tuple[Callable[[ServicesConfig], Service], ...] = (
    lambda _: promtool(),
    lambda _: chromium(),
    Helm,
)

USAGE = """\
  up         start what is not answering yet (a port that answers is reused)
  down       stop what `up` started (pid files in the run dir), nothing else
  status     say what answers and what `up` started
  deps       install what is missing (redis, curl, unzip, JDK 17+, Elasticsearch, promtool, chromium,
             MediaWiki with PHP, helm built with `go install` into <cache>/bin, where the tests find it)
  mw-config  print the LocalSettings.php of this run's wiki (for maintenance scripts:
             MW_CONFIG_FILE=<it> php /usr/share/mediawiki/maintenance/runJobs.php)
  es-env     install Elasticsearch if missing and print where it is (KEY=value lines: ES_HOME,
             ES_JAVA_HOME, ES_RUN_DIR, ES_USER), for callers that start nodes of their own

Knobs (environment): RAGBOT_SERVICES ["redis es"; add "mediawiki"], REDIS_PORT [6390], ES_PORT [9250],
ES_TRANSPORT_PORT [ES_PORT + 100], ES_HEAP [512m], ES_VERSION, ES_JAVA_HOME, ES_START_TIMEOUT [180],
MW_PORT [8480], MW_ADMIN_USER, MW_ADMIN_PASSWORD, MW_BOT_APP, MW_BOT_PASSWORD, MW_WORKERS [4],
HELM_VERSION, RAGBOT_RUN_DIR [root: /var/cache/ragbot/run; else <cache>/run], RAGBOT_SERVICES_OWNER (a tag
`up` writes; a `down` that sets it only stops what carries the same tag), XDG_CACHE_HOME (<cache> is
${XDG_CACHE_HOME:-~/.cache}/ragbot).
"""


def daemons(config: ServicesConfig, *, reverse: bool = False) -> list[Service]:
    """The services RAGBOT_SERVICES names, in start order (or stop order)."""
    names = reversed(config.services) if reverse else config.services
    return [DAEMONS[name](config) for name in names]


def up(config: ServicesConfig) -> int:
    """Start each in turn; the first that fails ends the command (later ones need the earlier)."""
    for service in daemons(config):
        service.start()
    return 0


def down(config: ServicesConfig) -> int:
    """Stop in reverse order, going on past a failure so nothing is left behind."""
    rc = 0
    for service in daemons(config, reverse=True):
        try:
            service.stop()
        except (ServiceError, OSError) as exc:
            log(f"error: {service.name}: {exc}")
            rc = 1
    return rc


def status(config: ServicesConfig) -> int:
    """One line each; exit 1 unless every one answers."""
    rc = 0
    for service in daemons(config):
        sys.stdout.write(service.status() + "\n")
        rc |= 0 if service.ready() else 1
    return rc


def deps(config: ServicesConfig) -> int:
    """Install everything the tests need (the daemons and the tools), whatever RAGBOT_SERVICES says."""
    everything = [build(config) for build in (*DAEMONS.values(), *TOOLS)]
    for service in everything:
        service.install()
    log("deps: " + ", ".join(service.name for service in everything) + " are present")
    return 0


def es_env(config: ServicesConfig) -> int:
    for key, value in ElasticsearchNode(config).environment().items():
        sys.stdout.write(f"{key}={value}\n")
    return 0


def mw_config(config: ServicesConfig) -> int:
    sys.stdout.write(f"{config.mw_config_file}\n")
    return 0


COMMANDS: dict[str, Callable[[ServicesConfig], int]] = {
    "up": up,
    "down": down,
    "status": status,
    "deps": deps,
    "es-env": es_env,
    "mw-config": mw_config,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; errors end as one ``services: error: ...`` line and exit 1."""
    parser = argparse.ArgumentParser(
        prog="python -m ragbot.dev.services",
        description="Real Redis, Elasticsearch and a throwaway MediaWiki for `make test` and `make run`, "
        "without Docker.",
        epilog=USAGE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("command", choices=list(COMMANDS))
    args = parser.parse_args(argv)
    try:
        return COMMANDS[args.command](ServicesConfig.from_environ())
    except (ServiceError, UnknownServiceError) as exc:
        log(f"error: {exc}")
        return 1
