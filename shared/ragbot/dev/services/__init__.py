"""The local services `make test` and `make run` need, without Docker: one module per service.

Each service has the same small interface (``base.Service``): ``install`` what is missing, ``start`` it
(or reuse one that already answers), ask whether it is ``ready``, ``stop`` what ``start`` started::

    config.py             ports, versions, folders, owner tag: the knobs, read when a command runs
    host.py               Debian packages, ports, pids, bounded waits (nothing service-specific)
    base.py               the Service protocol; pid and owner files; Commands (tools on PATH)
    redis_server.py       Debian's redis-server, no persistence
    elasticsearch_node.py the integ-test zip from Maven Central, one single-node cluster
    mediawiki.py          Debian's MediaWiki on PHP's built-in server, a fresh wiki per start
    prometheus.py         promtool;  browser.py  chromium + chromedriver;  helm.py  helm via go install
    docker_engine.py      a private dockerd (host networking only) for ``make test-compose``
    cli.py                up | down | status | deps | es-env | mw-config
"""

from ragbot.dev.services.base import Service
from ragbot.dev.services.config import ServicesConfig
from ragbot.dev.services.host import ServiceError

__all__ = ["Service", "ServiceError", "ServicesConfig"]
