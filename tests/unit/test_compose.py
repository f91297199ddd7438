"""compose.yaml is valid Compose and names only things that exist: CI has no Docker engine to find out."""

from __future__ import annotations

import importlib.metadata
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic_settings import BaseSettings

from ragbot import settings as ragbot_settings
from ragbot.dev.services.config import ES_VERSION

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "compose.yaml"
REQUIRED_VARIABLES = {
    "ELASTIC_PASSWORD",
    "REDIS_PASSWORD",
    "GRAFANA_ADMIN_PASSWORD",
    "RAGBOT_INGEST_ALLOWED_CALLBACK_HOSTS",
    "WIKI_API_KEY",
    "KZCHATBOT_API_KEY",
    "ADMIN_API_KEY",
    "SERVICE_API_KEY",
    "METRICS_API_KEY",
    "UI_SESSION_SECRET",
}
MODULE_ROOTS = [ROOT / "shared", *sorted((ROOT / "services").glob("*"))]

# $$ (a literal $), ${NAME}, ${NAME:-default}, ${NAME-default}, ${NAME:?message}, ${NAME?message}, $NAME
_VARIABLE = re.compile(
    r"\$(?:(?P<escaped>\$)"
    r"|\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}"
    r"|(?P<bare>[A-Za-z_][A-Za-z0-9_]*))"
)


def interpolate(text: str, env: dict[str, str]) -> tuple[str, set[str]]:
    """Compose's variable interpolation; returns the text and the required variables left unset."""
    missing: set[str] = set()

    def substitute(match: re.Match[str]) -> str:
        if match["escaped"]:
            return "$$"
        name = match["name"] or match["bare"]
        op, arg = match["op"] or "", match["arg"] or ""
        value = env.get(name)
        if op.startswith(":") and not value:
            value = None
        if value is not None:
            return value
        if op.endswith("?"):
            missing.add(name)
            return ""
        return arg if op.endswith("-") else ""

    return _VARIABLE.sub(substitute, text), missing


def check_schema(path: Path) -> subprocess.CompletedProcess[str]:
    """Validate with the Compose Specification schema vendored by check-jsonschema."""
    return subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.compose-spec", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    loaded = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))
    assert isinstance(loaded, dict)
    return loaded


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    found = compose["services"]
    assert isinstance(found, dict)
    return found


def _is_one_shot(service: dict[str, Any]) -> bool:
    return service.get("restart") == "no"


def test_compose_file_matches_the_compose_specification() -> None:
    result = check_schema(COMPOSE)
    assert result.returncode == 0, result.stdout + result.stderr


def test_compose_file_interpolated_matches_the_compose_specification(tmp_path: Path) -> None:
    text, missing = interpolate(COMPOSE.read_text(encoding="utf-8"), dict.fromkeys(REQUIRED_VARIABLES, "x"))
    assert missing == set()
    rendered = tmp_path / "compose.yaml"
    rendered.write_text(text, encoding="utf-8")
    result = check_schema(rendered)
    assert result.returncode == 0, result.stdout + result.stderr


def test_required_secrets_are_required_and_have_no_default() -> None:
    raw = COMPOSE.read_text(encoding="utf-8")
    _, missing = interpolate(raw, {})
    assert missing == REQUIRED_VARIABLES
    for name in REQUIRED_VARIABLES:
        uses = re.findall(r"\$\{" + name + r"([^}]*)\}", raw)
        assert uses, name
        assert all(use.startswith(":?") for use in uses), (
            f"${{{name}}} must always be written ${{{name}:?...}}"
        )


def test_build_contexts_and_dockerfiles_exist(services: dict[str, dict[str, Any]]) -> None:
    built = {name: s["build"] for name, s in services.items() if "build" in s}
    assert {"ingest", "embedder", "embedder-gpu", "retriever", "chat"} <= set(built)
    for name, build in built.items():
        context = ROOT / (build if isinstance(build, str) else build.get("context", "."))
        assert context.is_dir(), f"{name}: build context {context} does not exist"
        name_of_file = build.get("dockerfile", "Dockerfile") if isinstance(build, dict) else "Dockerfile"
        dockerfile = context / name_of_file
        assert dockerfile.is_file(), f"{name}: {dockerfile} does not exist"


def _dockerfile_copy_sources(dockerfile: Path) -> list[str]:
    text = dockerfile.read_text(encoding="utf-8").replace("\\\n", " ")
    sources: list[str] = []
    for line in text.splitlines():
        words = shlex.split(line, comments=False) if line.strip().upper().startswith(("COPY", "ADD")) else []
        if not words or any(w.startswith("--from") for w in words):
            continue
        args = [w for w in words[1:] if not w.startswith("--")]
        sources.extend(args[:-1])
    return sources


def test_dockerfile_copies_only_paths_that_exist(services: dict[str, dict[str, Any]]) -> None:
    dockerfiles = {
        (ROOT / s["build"]["context"], ROOT / s["build"]["context"] / s["build"]["dockerfile"])
        for s in services.values()
        if isinstance(s.get("build"), dict)
    }
    for context, dockerfile in dockerfiles:
        sources = _dockerfile_copy_sources(dockerfile)
        assert sources, f"{dockerfile} copies nothing"
        for source in sources:
            assert (context / source).exists(), f"{dockerfile}: COPY {source} does not exist"


def _bind_sources(service: dict[str, Any]) -> list[str]:
    sources: list[str] = []
    for volume in service.get("volumes", []):
        if isinstance(volume, str):
            # A path chosen by a variable (${ES_TOPOLOGY:-single-node}): its default must exist.
            source = interpolate(volume, {})[0].split(":", 1)[0]
            if source.startswith((".", "/", "~")):
                sources.append(source)
        elif volume.get("type") == "bind":
            sources.append(volume["source"])
    return sources


def test_bind_mounts_and_config_files_exist(
    compose: dict[str, Any], services: dict[str, dict[str, Any]]
) -> None:
    paths: list[tuple[str, str]] = []
    for name, service in services.items():
        paths += [(name, source) for source in _bind_sources(service)]
        env_files = service.get("env_file", [])
        paths += [(name, f) for f in ([env_files] if isinstance(env_files, str) else env_files)]
    for section in ("configs", "secrets"):
        paths += [(section, item["file"]) for item in (compose.get(section) or {}).values() if "file" in item]
    assert paths, "compose.yaml mounts no repository files (expected prometheus and grafana config)"
    for owner, source in paths:
        assert not source.startswith(("/", "~")), f"{owner}: {source} points outside the repository"
        assert (ROOT / source).exists(), f"{owner}: {source} does not exist in the repository"


def _module_exists(module: str) -> bool:
    parts = module.split(".")
    for root in MODULE_ROOTS:
        base = root.joinpath(*parts)
        if base.with_suffix(".py").is_file() or (base / "__main__.py").is_file():
            return True
    return False


def test_python_commands_name_modules_that_exist(services: dict[str, dict[str, Any]]) -> None:
    modules = {}
    for name, service in services.items():
        command = service.get("command")
        words = shlex.split(command) if isinstance(command, str) else list(command or [])
        if len(words) >= 3 and words[0] == "python" and words[1] == "-m":
            modules[name] = words[2]
    assert modules["ingest"] == "ragbot_ingest"
    assert modules["embedder"] == "ragbot_embedder"
    assert modules["retriever"] == "ragbot_retriever"
    assert modules["chat"] == "ragbot_chat"
    missing = {name: module for name, module in modules.items() if not _module_exists(module)}
    assert not missing, f"compose runs `python -m` on modules that are not in the repository: {missing}"


def test_every_long_running_service_has_a_healthcheck(services: dict[str, dict[str, Any]]) -> None:
    for name, service in services.items():
        if _is_one_shot(service):
            continue
        test = service.get("healthcheck", {}).get("test")
        assert test, f"{name} has no healthcheck"


def test_every_dependency_names_a_condition_its_target_can_meet(services: dict[str, dict[str, Any]]) -> None:
    for name, service in services.items():
        depends_on = service.get("depends_on", {})
        assert isinstance(depends_on, dict), f"{name}: use the long depends_on syntax with conditions"
        for target, spec in depends_on.items():
            assert target in services, f"{name} depends on unknown service {target}"
            expected = (
                "service_completed_successfully" if _is_one_shot(services[target]) else "service_healthy"
            )
            assert spec.get("condition") == expected, f"{name} -> {target}: condition must be {expected}"


def test_one_shot_jobs_and_profiles(services: dict[str, dict[str, Any]]) -> None:
    assert services["es-init"]["command"] == ["python", "-m", "ragbot.cli.store_init"]
    assert _is_one_shot(services["es-init"]) and _is_one_shot(services["ollama-pull"])
    assert services["ollama-pull"]["profiles"] == ["ollama"]
    assert services["embedder-gpu"]["profiles"] == ["gpu"]
    devices = services["embedder-gpu"]["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"driver": "nvidia", "count": 1, "capabilities": ["gpu"]}]


def test_beat_runs_in_one_worker_behind_its_profile_and_every_worker_can_poll(
    services: dict[str, dict[str, Any]],
) -> None:
    beat = services["embedder-beat"]
    assert beat["profiles"] == ["beat"] and beat["deploy"]["replicas"] == 1
    assert beat["environment"]["RAGBOT_WORKER_BEAT"] == "true"
    assert beat["command"] == services["embedder"]["command"]
    for name in ("embedder", "embedder-gpu", "embedder-beat"):
        env = services[name]["environment"]
        assert name == "embedder-beat" or "RAGBOT_WORKER_BEAT" not in env
        assert env["RAGBOT_MEDIAWIKI_API_URL"] == "${RAGBOT_MEDIAWIKI_API_URL:-}", name
        assert env["RAGBOT_MEDIAWIKI_PASSWORD"] == "${RAGBOT_MEDIAWIKI_PASSWORD:-}", name


def test_redis_keeps_an_append_only_file(services: dict[str, dict[str, Any]]) -> None:
    command = services["redis"]["command"]
    assert command[command.index("--appendonly") + 1] == "yes"
    assert any(v.endswith(":/data") for v in services["redis"]["volumes"])


def test_elasticsearch_version_matches_the_test_node_and_the_client(
    services: dict[str, dict[str, Any]],
) -> None:
    image = services["elasticsearch"]["image"]
    assert image.startswith("docker.elastic.co/elasticsearch/elasticsearch:")
    compose_version = image.rsplit(":", 1)[1]
    assert compose_version == ES_VERSION, "compose.yaml and ragbot.dev.services.config pin different versions"
    client_major = importlib.metadata.version("elasticsearch").split(".")[0]
    assert client_major == compose_version.split(".")[0]


def _settings_variables() -> set[str]:
    names: set[str] = set()
    for value in vars(ragbot_settings).values():
        if isinstance(value, type) and issubclass(value, BaseSettings) and value is not BaseSettings:
            prefix = str(value.model_config.get("env_prefix", ""))
            names |= {(prefix + field).upper() for field in value.model_fields}
    return names


def test_every_ragbot_variable_compose_sets_is_a_setting(services: dict[str, dict[str, Any]]) -> None:
    known = _settings_variables()
    for name, service in services.items():
        environment = service.get("environment", {})
        assert isinstance(environment, dict), f"{name}: use the mapping form of environment"
        unknown = {key for key in environment if key.startswith("RAGBOT_") and key not in known}
        assert not unknown, f"{name} sets variables no settings class reads (silently ignored): {unknown}"


def test_chat_answers_with_the_ollama_service(services: dict[str, dict[str, Any]]) -> None:
    env = services["chat"]["environment"]
    assert env["RAGBOT_CHAT_LLM_BACKEND"].endswith(":-ollama}")
    assert "http://ollama:11434" in env["RAGBOT_CHAT_LLM_URL"]
    assert "OLLAMA_MODEL" in env["RAGBOT_CHAT_LLM_MODEL"]  # the model ollama-pull fetches
    assert "ollama" in services["chat"]["depends_on"]


def test_only_chat_and_ingest_are_published_and_require_keys(services: dict[str, dict[str, Any]]) -> None:
    published = {name for name, svc in services.items() if svc.get("ports")}
    assert published == {"chat", "ingest", "grafana"}
    assert all(str(p).startswith("127.0.0.1:") for p in services["grafana"]["ports"])
    for name in ("ingest", "retriever", "chat"):
        assert "RAGBOT_AUTH_KEYS" in services[name]["environment"], name
    assert "RAGBOT_CHAT_SERVICE_KEY" in services["chat"]["environment"]


# --- the cluster profile ---------------------------------------------------------------------------

CLUSTER_ENV = ROOT / "deploy" / "compose" / "cluster.env"
ES_CONFIG = ROOT / "deploy" / "elasticsearch"


def _env_file(path: Path) -> dict[str, str]:
    lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines()]
    pairs = [line.split("=", 1) for line in lines if line and not line.startswith("#")]
    return {key: value for key, value in pairs}


def _rendered(env: dict[str, str]) -> dict[str, Any]:
    text, missing = interpolate(
        COMPOSE.read_text(encoding="utf-8"), {**dict.fromkeys(REQUIRED_VARIABLES, "x"), **env}
    )
    assert missing == set()
    loaded = yaml.safe_load(text)
    assert isinstance(loaded, dict)
    return loaded


def _active(compose: dict[str, Any], profiles: set[str]) -> dict[str, dict[str, Any]]:
    return {
        n: s
        for n, s in compose["services"].items()
        if set(s.get("profiles", [])) <= profiles or not s.get("profiles")
    }


def _es_nodes(services: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {
        n: s
        for n, s in services.items()
        if "elasticsearch/elasticsearch:" in s.get("image", "") and "node.name" in s.get("environment", {})
    }


def _mounted_config(service: dict[str, Any]) -> dict[str, Any]:
    [source] = [v.split(":")[0] for v in service["volumes"] if v.endswith("/config/elasticsearch.yml:ro")]
    loaded = yaml.safe_load((ROOT / source).read_text(encoding="utf-8"))
    assert isinstance(loaded, dict)
    return loaded


def test_default_stack_is_one_single_node_elasticsearch_and_one_worker() -> None:
    services = _active(_rendered({}), set())
    nodes = _es_nodes(services)
    assert set(nodes) == {"elasticsearch"}
    assert _mounted_config(nodes["elasticsearch"])["discovery.type"] == "single-node"
    assert str(services["embedder"]["deploy"]["replicas"]) == "1"
    env = services["ingest"]["environment"]
    assert (str(env["RAGBOT_STORE_ES_SHARDS"]), str(env["RAGBOT_STORE_ES_REPLICAS"])) == ("1", "0")


def test_cluster_profile_is_three_nodes_with_one_replica_and_two_workers(tmp_path: Path) -> None:
    env = _env_file(CLUSTER_ENV)
    assert env["COMPOSE_PROFILES"] == "cluster"
    compose = _rendered(env)
    rendered = tmp_path / "compose.yaml"
    rendered.write_text(yaml.safe_dump(compose), encoding="utf-8")
    result = check_schema(rendered)
    assert result.returncode == 0, result.stdout + result.stderr

    services = _active(compose, {"cluster"})
    nodes = _es_nodes(services)
    assert set(nodes) == {"elasticsearch", "es-node-2", "es-node-3"}
    names = {s["environment"]["node.name"] for s in nodes.values()}
    assert names == set(nodes), "node.name must be the service name (the seed hosts resolve it)"
    data = {
        v.split(":")[0]
        for s in nodes.values()
        for v in s["volumes"]
        if v.endswith("/usr/share/elasticsearch/data")
    }
    assert len(data) == 3, "each node needs its own data volume"
    assert data <= set(compose["volumes"])
    for name, node in nodes.items():
        config = _mounted_config(node)
        assert "discovery.type" not in config, name
        assert set(config["discovery.seed_hosts"]) == set(nodes)
        assert set(config["cluster.initial_master_nodes"]) == set(nodes)
        # Security on requires transport TLS on a multi-node cluster: the es-certs job writes the files.
        assert config["xpack.security.transport.ssl.enabled"] is True
        assert str(node["environment"]["xpack.security.enabled"]).lower() == "true"
        assert "es-certs:/usr/share/elasticsearch/config/certs:ro" in node["volumes"]
        assert node["depends_on"]["es-certs"]["condition"] == "service_completed_successfully"
        assert node["healthcheck"]["test"], name
    certs = services["es-certs"]
    assert certs["restart"] == "no" and certs["profiles"] == ["cluster"]
    script = certs["command"][-1]
    # certutil --pem zips hold ca/ca.crt and <name>/<name>.crt|.key; both are unzipped into certs/.
    named = {
        _mounted_config(nodes["es-node-2"])[f"xpack.security.transport.ssl.{k}"]
        for k in ("certificate_authorities", "certificate", "key")
    }
    assert named == {"certs/ca/ca.crt", "certs/transport/transport.crt", "certs/transport/transport.key"}
    assert "--name transport" in script and "--ca-cert config/certs/ca/ca.crt" in script
    assert script.count("-d config/certs") == 2

    ragbot_env = services["embedder"]["environment"]
    assert (
        str(ragbot_env["RAGBOT_STORE_ES_SHARDS"]) == "3"
        and str(ragbot_env["RAGBOT_STORE_ES_REPLICAS"]) == "1"
    )
    hosts = {h.split("//")[1].split(":")[0] for h in ragbot_env["RAGBOT_STORE_ES_URL"].split(",")}
    assert hosts == set(nodes), "every service must know every node, to survive the loss of one"
    assert str(services["embedder"]["deploy"]["replicas"]) == "2"


def test_the_compose_smoke_maps_every_prometheus_lookup_to_a_loopback_port(tmp_path: Path) -> None:
    """``make test-compose`` rewrites deploy/prometheus's DNS lookups to the host network's ports; a
    lookup it cannot map (a new worker variant) must fail here, not at the start of the CI stage."""
    import importlib.util
    import sys
    import types

    script = ROOT / "scripts" / "compose_stack.py"
    spec = importlib.util.spec_from_file_location("compose_stack_script", script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
        stack = types.SimpleNamespace(prometheus_dir=tmp_path, secrets=lambda: {"METRICS_API_KEY": "k"})
        module.Stack.write_prometheus(stack)
    finally:
        sys.modules.pop(spec.name, None)
    written = yaml.safe_load((tmp_path / "prometheus.yml").read_text())
    embedder = next(job for job in written["scrape_configs"] if job["job_name"] == "embedder")
    assert embedder["static_configs"] == [{"targets": [f"127.0.0.1:{module.PORTS['embedder']}"]}]
    assert all("dns_sd_configs" not in job for job in written["scrape_configs"])
