"""A throwaway MediaWiki on MW_PORT: Debian's package (1.39) served by PHP's built-in server.

Each start installs a fresh wiki (SQLite, Hebrew content language) under ``<run dir>/mediawiki-<port>``
and points PHP at it with MW_CONFIG_FILE, so /etc/mediawiki is never used; the admin gets a bot password
(``<admin>@<app>``) for ragbot's API logins.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from ragbot.dev.services.base import RunState, Stopping, stop_started
from ragbot.dev.services.config import ServicesConfig
from ragbot.dev.services.host import (
    ServiceError,
    WaitTimeout,
    apt_install,
    http_get,
    log,
    need_command,
    pid_alive,
    port_open,
    tail,
    terminate,
    wait_until,
)

MW_HOME = Path("/usr/share/mediawiki")
START_TIMEOUT_S = 60.0
# The workers outlive a SIGTERM to the server alone: stop its whole process group (its own session).
STOPPING = Stopping(pattern="php -S", within_s=20, group=True, throwaway=("data",))
# PHP modules the installer needs, and the Debian package that has each.
PHP_MODULES = {"pdo_sqlite": "php-sqlite3", "intl": "php-intl", "mbstring": "php-mbstring", "dom": "php-xml",
               "curl": "php-curl"}  # fmt: skip
BOT_GRANTS = "basic,highvolume,editpage,createeditmovepage,delete"


def missing_packages(*, installer_present: bool, php_modules: str) -> list[str]:
    """The Debian packages still needed, given whether MediaWiki is there and what ``php -m`` lists."""
    loaded = {line.strip().lower() for line in php_modules.splitlines()}
    missing = [] if installer_present else ["mediawiki"]
    return missing + [package for module, package in PHP_MODULES.items() if module not in loaded]


def local_settings_tail(folder: Path) -> str:
    """What ``up`` appends to the installer's LocalSettings.php."""
    return f"""
# Added by ragbot.dev.services: this run's own folders; jobs run only when a caller runs runJobs.php.
$wgCacheDirectory = "{folder}/cache";
$wgUploadDirectory = "{folder}/images";
$wgJobRunRate = 0;
# Sessions (logins) must outlive a request: CACHE_NONE would forget them.
$wgMainCacheType = CACHE_DB;
$wgSessionCacheType = CACHE_DB;
"""


def is_mediawiki(body: str | None) -> bool:
    """Whether an ``api.php?meta=siteinfo`` answer comes from a MediaWiki."""
    try:
        generator = json.loads(body or "")["query"]["general"]["generator"]
    except (ValueError, KeyError, TypeError):
        return False
    return str(generator).startswith("MediaWiki")


@dataclass
class MediaWiki:
    """The test wiki; pid, owner, config, database and logs in ``<run dir>/mediawiki-<port>``."""

    config: ServicesConfig
    name: str = "mediawiki"

    @property
    def port(self) -> int:
        return self.config.mw_port

    @property
    def state(self) -> RunState:
        return RunState(self.config.mw_dir, "php.pid")

    def install(self) -> None:
        need_command("curl", "curl")
        need_command("php", "php-cli")
        modules = subprocess.run(["php", "-m"], capture_output=True, text=True, check=False).stdout
        missing = missing_packages(installer_present=(MW_HOME / "maintenance" / "install.php").is_file(),
                                   php_modules=modules)  # fmt: skip
        if missing:
            apt_install(*missing)

    def ready(self) -> bool:
        return is_mediawiki(
            http_get(f"http://127.0.0.1:{self.port}/api.php?action=query&meta=siteinfo&format=json")
        )

    def start(self) -> None:
        self.install()
        if self.ready():
            log(f"mediawiki: 127.0.0.1:{self.port} already answers; reusing it")
            return
        if port_open(self.port):
            raise ServiceError(f"mediawiki: port {self.port} is taken by something that is not MediaWiki")
        self.config.run_dir.mkdir(parents=True, exist_ok=True)
        state = self.state
        self._install_wiki(state.folder)
        self._serve(state)
        state.claim(self.config.owner_tag)
        where = f"pid {state.pid()}, config {self.config.mw_config_file}"
        log(f"mediawiki: started on http://127.0.0.1:{self.port} ({where})")

    def _php(
        self, args: list[str], *, log_file: Path, step: str, lines: int, cwd: Path | None = None
    ) -> None:
        env = {**os.environ, "MW_CONFIG_FILE": str(self.config.mw_config_file)}
        with log_file.open("ab") as out:
            rc = subprocess.run(["php", *args], cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                check=False).returncode  # fmt: skip
        if rc != 0:
            raise ServiceError(f"mediawiki: {step} failed (log: {log_file})\n{tail(log_file, lines=lines)}")

    def _install_wiki(self, folder: Path) -> None:
        cfg = self.config
        shutil.rmtree(folder, ignore_errors=True)
        for sub in ("data", "cache", "images"):
            (folder / sub).mkdir(parents=True)
        install_log = folder / "install.log"
        self._php(
            ["maintenance/install.php", "--dbtype", "sqlite", "--dbpath", str(folder / "data"),
             "--dbname", "wiki", "--lang", "he", "--server", f"http://127.0.0.1:{self.port}",
             "--scriptpath", "", "--confpath", str(folder),
             "--pass", cfg.mw_admin_password, "RagbotTest", cfg.mw_admin_user],
            log_file=install_log, step="install.php", lines=30, cwd=MW_HOME,
        )  # fmt: skip
        with cfg.mw_config_file.open("a") as settings:
            settings.write(local_settings_tail(folder))
        self._php(
            [str(MW_HOME / "maintenance" / "createBotPassword.php"), "--appid", cfg.mw_bot_app,
             "--grants", BOT_GRANTS, cfg.mw_admin_user, cfg.mw_bot_password],
            log_file=install_log, step="createBotPassword.php", lines=10,
        )  # fmt: skip

    def _serve(self, state: RunState) -> None:
        """PHP's server in its own session (it outlives this command); workers answer while one waits."""
        folder, server_log = state.folder, state.folder / "server.log"
        env = {**os.environ, "MW_CONFIG_FILE": str(self.config.mw_config_file),
               "PHP_CLI_SERVER_WORKERS": str(self.config.mw_workers)}  # fmt: skip
        with server_log.open("ab") as out:
            process = subprocess.Popen(
                ["php", "-S", f"127.0.0.1:{self.port}", "-t", str(MW_HOME)], cwd=folder, env=env,
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        state.pid_file.write_text(f"{process.pid}\n")

        def answers() -> bool:
            if process.poll() is not None:
                self._fail(state, f"the server exited with {process.returncode}")
            return self.ready()

        try:
            wait_until(
                f"api.php does not answer on 127.0.0.1:{self.port}", answers, timeout_s=START_TIMEOUT_S
            )
        except WaitTimeout as exc:
            self._fail(state, str(exc))

    def _fail(self, state: RunState, why: str) -> NoReturn:
        server_log = state.folder / "server.log"
        pid = state.pid()
        if pid_alive(pid) and pid is not None:
            terminate(pid, within_s=20, group=True)
        state.pid_file.unlink(missing_ok=True)
        raise ServiceError(f"mediawiki: {why} (log: {server_log})\n{tail(server_log)}")

    def stop(self) -> None:
        # The wiki is throwaway (the next `up` installs a fresh one); logs stay for post-mortems.
        stop_started("mediawiki", self.port, self.state, STOPPING, caller=self.config.owner)

    def status(self) -> str:
        return self.state.status_line("mediawiki", self.port, "answers" if self.ready() else "not answering")
