"""The pure parts of ragbot.dev.services: knobs, owner tags, version picking, generated configs, the CLI."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ragbot.dev.services import cli
from ragbot.dev.services.base import RunState, Stopping, stop_started
from ragbot.dev.services.config import ES_VERSION, ServicesConfig, UnknownServiceError, parse_services
from ragbot.dev.services.elasticsearch_node import (
    health_status,
    java_major,
    minimum_java,
    newest_jdk,
    node_config,
)
from ragbot.dev.services.helm import same_minor
from ragbot.dev.services.host import WaitTimeout, pid_alive, wait_until
from ragbot.dev.services.mediawiki import is_mediawiki, local_settings_tail, missing_packages


def test_the_defaults_are_the_ones_services_sh_had() -> None:
    config = ServicesConfig.from_environ({"HOME": "/home/dev"}, root=False)
    assert config.services == ("redis", "es")
    assert (config.redis_port, config.es_port, config.es_transport_port, config.mw_port) == (
        6390,
        9250,
        9350,
        8480,
    )
    assert config.es_heap == "512m" and config.es_version == ES_VERSION and config.es_start_timeout_s == 180
    assert config.cache_dir == Path("/home/dev/.cache/ragbot")
    assert config.run_dir == Path("/home/dev/.cache/ragbot/run")
    assert config.es_home == Path(f"/home/dev/.cache/ragbot/elasticsearch-{ES_VERSION}")
    assert config.es_zip == Path(f"/home/dev/.cache/ragbot/elasticsearch-{ES_VERSION}.zip")
    assert config.mw_config_file == Path("/home/dev/.cache/ragbot/run/mediawiki-8480/LocalSettings.php")
    assert config.owner is None and config.owner_tag == "manual"
    assert (config.mw_admin_user, config.mw_bot_app, config.mw_workers) == ("Admin", "ragbot", 4)


def test_root_runs_from_var_cache_and_the_knobs_move_ports_and_folders() -> None:
    env = {
        "XDG_CACHE_HOME": "/c",
        "RAGBOT_SERVICES": "redis es mediawiki",
        "RAGBOT_SERVICES_OWNER": "make-test-12",
        "REDIS_PORT": "6490",
        "ES_PORT": "9360",
        "MW_PORT": "8580",
        "ES_HEAP": "1g",
    }
    config = ServicesConfig.from_environ(env, root=True)
    assert config.services == ("redis", "es", "mediawiki")
    assert config.es_transport_port == 9460
    assert config.run_dir == Path("/var/cache/ragbot/run")
    assert config.es_home == Path(f"/var/cache/ragbot/elasticsearch-{ES_VERSION}")
    assert config.es_zip == Path(f"/c/ragbot/elasticsearch-{ES_VERSION}.zip")  # downloads stay in the cache
    assert config.mw_dir == Path("/var/cache/ragbot/run/mediawiki-8580")
    assert config.owner_tag == "make-test-12"
    moved = ServicesConfig.from_environ(
        {**env, "RAGBOT_RUN_DIR": "/r", "ES_TRANSPORT_PORT": "9999"}, root=True
    )
    assert moved.run_dir == Path("/r") and moved.es_transport_port == 9999


def test_the_es_zip_comes_from_maven_central() -> None:
    config = ServicesConfig.from_environ({"HOME": "/h", "ES_VERSION": "8.1.2"}, root=False)
    assert config.es_zip_url == (
        "https://repo1.maven.org/maven2/org/elasticsearch/distribution/integ-test-zip/elasticsearch/"
        "8.1.2/elasticsearch-8.1.2.zip"
    )


def test_an_unknown_service_is_refused_with_the_known_ones() -> None:
    assert parse_services("") == ("redis", "es")
    assert parse_services(" mediawiki  redis ") == ("mediawiki", "redis")
    with pytest.raises(UnknownServiceError, match=r"unknown service 'kafka'.*known: redis es mediawiki"):
        parse_services("redis kafka")


@pytest.mark.parametrize(
    ("version", "major"),
    [("17.0.13", 17), ("1.8.0_392", 8), ("21", 21), ("25-ea", 25), ("", None), ("x", None)],
)
def test_java_major(version: str, major: int | None) -> None:
    assert java_major(version) == major


def test_the_newest_jdk_new_enough_wins() -> None:
    jdks = [(Path("/j/8"), 8), (Path("/j/17"), 17), (Path("/j/25"), 25), (Path("/j/odd"), None)]
    assert newest_jdk(jdks, minimum=17) == Path("/j/25")
    assert newest_jdk(jdks[:2], minimum=17) == Path("/j/17")
    assert newest_jdk(jdks[:2], minimum=21) is None
    assert (minimum_java("8.19.21"), minimum_java("9.0.1")) == (17, 21)


def test_the_node_config_is_one_private_single_node() -> None:
    text = node_config(port=9360, transport_port=9460, folder=Path("/run/es-9360"))
    assert "http.port: 9360\n" in text and "transport.port: 9460\n" in text
    assert "discovery.type: single-node\n" in text and "xpack.security.enabled: false\n" in text
    assert "path.data: /run/es-9360/data\n" in text and "cluster.name: ragbot-9360\n" in text


def test_health_status_reads_the_colour() -> None:
    assert health_status('{"cluster_name":"x","status":"yellow"}') == "yellow"
    assert health_status("<html>") is None
    assert health_status(None) is None
    assert health_status("[]") is None


def test_mediawiki_needs_what_php_lacks() -> None:
    everything = "PDO_sqlite\nintl\nmbstring\ndom\ncurl\n"
    assert missing_packages(installer_present=True, php_modules=everything) == []
    assert missing_packages(installer_present=False, php_modules="intl\ndom\n") == [
        "mediawiki",
        "php-sqlite3",
        "php-mbstring",
        "php-curl",
    ]


def test_the_wiki_keeps_its_own_folders_and_sessions() -> None:
    text = local_settings_tail(Path("/run/mw"))
    assert '$wgCacheDirectory = "/run/mw/cache";' in text and '$wgUploadDirectory = "/run/mw/images";' in text
    assert "$wgJobRunRate = 0;" in text and "$wgSessionCacheType = CACHE_DB;" in text


def test_only_a_mediawiki_siteinfo_counts_as_the_wiki() -> None:
    assert is_mediawiki('{"query":{"general":{"generator":"MediaWiki 1.39.10"}}}')
    assert not is_mediawiki('{"query":{"general":{"generator":"Other"}}}')
    assert not is_mediawiki("not json")
    assert not is_mediawiki(None)


def test_helm_is_reused_within_its_minor_version() -> None:
    assert same_minor("v3.22.1+g1234\n", "v3.22.0")
    assert not same_minor("v3.21.0+g1234", "v3.22.0")


def test_an_owner_tag_decides_who_may_stop(tmp_path: Path) -> None:
    state = RunState(tmp_path, "redis.pid")
    assert not state.started() and state.owner() is None
    state.pid_file.write_text("123\n")
    state.claim("make-test-1")
    assert state.owner_file.read_text() == "make-test-1\n"  # as services.sh wrote it: both read each other's
    assert state.owned_by(None)  # a caller without a tag may stop anything `up` started
    assert state.owned_by("make-test-1")
    assert not state.owned_by("dev-shared")


def test_the_status_line_says_who_started_it(tmp_path: Path) -> None:
    state = RunState(tmp_path, "es.pid")
    assert state.status_line("es", 9250, "not answering") == "es     127.0.0.1:9250  not answering"
    state.pid_file.write_text("42\n")
    state.claim("dev-shared")
    assert state.status_line("mediawiki", 8480, "answers") == (
        "mediawiki 127.0.0.1:8480  answers  started by up (pid 42, owner dev-shared)"
    )


def test_forget_removes_the_throwaway_data_and_keeps_the_logs(tmp_path: Path) -> None:
    state = RunState(tmp_path, "es.pid")
    (tmp_path / "data" / "nodes").mkdir(parents=True)
    (tmp_path / "logs").mkdir()
    state.pid_file.write_text("1\n")
    state.claim("x")
    state.forget("data")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["logs"]


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A real process to stop: its command line shows ``time.sleep(120)``."""
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    yield process
    process.kill()
    process.wait()


def test_down_stops_only_what_this_owner_started(tmp_path: Path, sleeper: subprocess.Popen[bytes]) -> None:
    state = RunState(tmp_path, "x.pid")
    how = Stopping(pattern="time.sleep(120)", within_s=20, throwaway=("data",))
    (tmp_path / "data").mkdir()
    state.pid_file.write_text(f"{sleeper.pid}\n")
    state.claim("dev-shared")

    stop_started("x", 1, state, how, caller="make-test-2")  # someone else's: left running
    assert sleeper.poll() is None and state.started()

    stop_started("x", 1, state, how, caller="dev-shared")
    assert sleeper.wait(timeout=30) is not None
    assert not state.started() and not (tmp_path / "data").exists()


def test_down_does_not_signal_a_reused_pid(tmp_path: Path, sleeper: subprocess.Popen[bytes]) -> None:
    state = RunState(tmp_path, "redis.pid")
    state.pid_file.write_text(f"{sleeper.pid}\n")  # the pid now runs something that is not redis-server
    stop_started("redis", 1, state, Stopping(pattern="redis-server", within_s=5), caller=None)
    assert pid_alive(sleeper.pid) and sleeper.poll() is None
    assert not state.started()


def test_a_bounded_wait_names_what_it_waited_for() -> None:
    with pytest.raises(WaitTimeout, match=r"redis: no PONG on 127\.0\.0\.1:1 after 0 s"):
        wait_until("redis: no PONG on 127.0.0.1:1", lambda: False, timeout_s=0.05, every_s=0.01)


def test_down_stops_in_reverse_order() -> None:
    config = ServicesConfig.from_environ({"HOME": "/h", "RAGBOT_SERVICES": "redis es mediawiki"}, root=False)
    assert [s.name for s in cli.daemons(config)] == ["redis", "es", "mediawiki"]
    assert [s.name for s in cli.daemons(config, reverse=True)] == ["mediawiki", "es", "redis"]


def test_the_command_line_prints_the_wiki_config_and_refuses_unknown_services(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "RAGBOT_RUN_DIR": str(tmp_path), "MW_PORT": "8999"}
    run = [sys.executable, "-m", "ragbot.dev.services"]
    done = subprocess.run([*run, "mw-config"], env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{tmp_path}/mediawiki-8999/LocalSettings.php\n"
    env["RAGBOT_SERVICES"] = "redis kafka"
    done = subprocess.run([*run, "status"], env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 1
    assert "services: error: unknown service 'kafka'" in done.stderr


def test_the_shim_runs_the_same_command_line(tmp_path: Path) -> None:
    shim = Path(__file__).resolve().parents[2] / "scripts" / "services.sh"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "RAGBOT_RUN_DIR": str(tmp_path)}
    done = subprocess.run(
        ["bash", str(shim), "mw-config"], env=env, capture_output=True, text=True, check=False
    )
    assert (done.returncode, done.stdout) == (0, f"{tmp_path}/mediawiki-8480/LocalSettings.php\n"), (
        done.stderr
    )
