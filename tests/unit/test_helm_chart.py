"""deploy/helm/ragbot lints and renders, with default values and with KEDA and a GPU, into the right objects.

helm comes from ``scripts/services.sh deps`` (``go install`` into ``<cache>/bin``, which ``make test``
runs first); a missing helm fails with that instruction, never a skip.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic_settings import BaseSettings

from ragbot import settings as ragbot_settings

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "ragbot"
RULES = ROOT / "deploy" / "prometheus" / "rules.yml"
SECRET = "ragbot-secrets"
SERVICES = ("ingest", "retriever", "chat", "embedder")
KEDA_GPU = [
    "--set",
    "embedder.keda.enabled=true",
    "--set",
    "embedder.gpu.enabled=true",
    "--set",
    "redis.keyPrefix=kz",
    "--set",
    "embedder.queue=kz.index",
]


def helm_binary() -> str:
    """RAGBOT_HELM, else the copy `scripts/services.sh deps` builds, else helm on PATH."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ragbot" / "bin" / "helm"
    for candidate in (os.environ.get("RAGBOT_HELM"), str(cache), shutil.which("helm")):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    pytest.fail(
        f"helm not found (looked at $RAGBOT_HELM, {cache}, PATH): run `bash scripts/services.sh deps` "
        "(or `make deps`), which builds it with go install",
        pytrace=False,
    )


def helm(*args: str) -> str:
    result = subprocess.run(
        [helm_binary(), *args], capture_output=True, text=True, timeout=120, check=False, cwd=ROOT
    )
    assert result.returncode == 0, f"helm {' '.join(args)}:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def render(*values: str) -> list[dict[str, Any]]:
    documents = [d for d in yaml.safe_load_all(helm("template", "rb", str(CHART), *values)) if d]
    assert all(isinstance(d, dict) and d.get("kind") for d in documents)
    return documents


def of_kind(documents: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in documents if d["kind"] == kind}


def container(deployment: dict[str, Any]) -> dict[str, Any]:
    [only] = deployment["spec"]["template"]["spec"]["containers"]
    assert isinstance(only, dict)
    return only


def env_of(deployment: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container(deployment)["env"]}


@pytest.fixture(scope="module")
def default() -> list[dict[str, Any]]:
    return render()


@pytest.fixture(scope="module")
def keda_gpu() -> list[dict[str, Any]]:
    return render(*KEDA_GPU)


def test_helm_lint_passes_with_default_and_keda_gpu_values() -> None:
    helm("lint", "--strict", str(CHART))
    helm("lint", "--strict", str(CHART), *KEDA_GPU)


def test_four_deployments_with_probes_resources_and_their_module(default: list[dict[str, Any]]) -> None:
    deployments = of_kind(default, "Deployment")
    assert set(deployments) == {f"rb-ragbot-{s}" for s in SERVICES}
    for service in SERVICES:
        c = container(deployments[f"rb-ragbot-{service}"])
        assert c["command"] == ["python", "-m", f"ragbot_{service}"]
        assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
        assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
        assert c["startupProbe"]["httpGet"]["path"] == "/healthz"
        [port] = c["ports"]
        assert c["livenessProbe"]["httpGet"]["port"] == port["name"]
        assert c["resources"]["requests"]["cpu"] and c["resources"]["limits"]["memory"]
        assert deployments[f"rb-ragbot-{service}"]["spec"]["replicas"] >= 1
    # The embedder answers its probes on the metrics port, the others on their HTTP port.
    assert container(deployments["rb-ragbot-embedder"])["ports"][0]["containerPort"] == 9101
    services = of_kind(default, "Service")
    assert set(services) == {f"rb-ragbot-{s}" for s in SERVICES}
    chat_env = env_of(deployments["rb-ragbot-chat"])
    # The services call each other by name, so every one answers to those names (besides loopback).
    # The worker fetches what pings name, so it checks the same callback allow-list as ingest.
    ingest_env = env_of(deployments["rb-ragbot-ingest"])
    worker_env = env_of(deployments["rb-ragbot-embedder"])
    allowed = "RAGBOT_INGEST_ALLOWED_CALLBACK_HOSTS"
    assert worker_env[allowed]["value"] == ingest_env[allowed]["value"] == '["www.kolzchut.org.il"]'
    hosts = json.loads(chat_env["RAGBOT_HTTP_TRUSTED_HOSTS"]["value"])
    assert hosts == [f"rb-ragbot-{s}" for s in ("ingest", "retriever", "chat")]
    assert chat_env["RAGBOT_CHAT_RETRIEVER_URL"]["value"] == "http://rb-ragbot-retriever:8002"


def test_secrets_come_from_the_existing_secret(default: list[dict[str, Any]]) -> None:
    assert not of_kind(default, "Secret"), "the chart must not create secrets"
    deployments = of_kind(default, "Deployment")
    for deployment in deployments.values():
        env = env_of(deployment)
        refs = {k: v["valueFrom"]["secretKeyRef"] for k, v in env.items() if "valueFrom" in v}
        assert all(ref["name"] == SECRET for ref in refs.values()), refs
        assert refs["REDIS_PASSWORD"]["key"] == "redis-password"
        assert refs["RAGBOT_STORE_ES_PASSWORD"]["key"] == "elastic-password"
        assert "$(REDIS_PASSWORD)@" in env["RAGBOT_REDIS_URL"]["value"]
        # A $(VAR) reference only expands when VAR is defined earlier in the list.
        names = [e["name"] for e in container(deployment)["env"]]
        assert names.index("REDIS_PASSWORD") < names.index("RAGBOT_REDIS_URL")
        # The worker's metrics port honours the metrics scope too, so every service gets the keys.
        assert refs["RAGBOT_AUTH_SESSION_SECRET"]["key"] == "ui-session-secret"
        keys = env["RAGBOT_AUTH_KEYS"]["value"]
        for variable in (
            "WIKI_API_KEY",
            "KZCHATBOT_API_KEY",
            "ADMIN_API_KEY",
            "SERVICE_API_KEY",
            "METRICS_API_KEY",
        ):
            assert variable in refs and f"$({variable})" in keys
            assert names.index(variable) < names.index("RAGBOT_AUTH_KEYS")
        assert yaml.safe_load(keys.replace("$(", "").replace(")", ""))  # still JSON once expanded
    chat = env_of(deployments["rb-ragbot-chat"])
    assert chat["RAGBOT_CHAT_SERVICE_KEY"]["value"] == "$(SERVICE_API_KEY)"
    with_llm_key = render("--set", "secrets.llmApiKey.existingSecret=llm")
    llm = env_of(of_kind(with_llm_key, "Deployment")["rb-ragbot-chat"])["RAGBOT_CHAT_LLM_API_KEY"]
    assert llm["valueFrom"]["secretKeyRef"] == {"name": "llm", "key": "llm-api-key"}


def test_default_embedder_is_cpu_without_autoscaler(default: list[dict[str, Any]]) -> None:
    embedder = of_kind(default, "Deployment")["rb-ragbot-embedder"]
    assert env_of(embedder)["RAGBOT_DEVICE"]["value"] == "cpu"
    assert container(embedder)["image"].startswith("ragbot-embedder:")  # the CPU image, no torch
    assert "nvidia.com/gpu" not in container(embedder)["resources"].get("limits", {})
    assert "nodeSelector" not in embedder["spec"]["template"]["spec"]
    assert not of_kind(default, "ScaledObject")


def test_keda_scales_the_embedder_on_the_celery_list_and_the_gpu_is_asked_for(
    keda_gpu: list[dict[str, Any]],
) -> None:
    embedder = of_kind(keda_gpu, "Deployment")["rb-ragbot-embedder"]
    assert "replicas" not in embedder["spec"], "KEDA owns the replica count"
    [scaled] = of_kind(keda_gpu, "ScaledObject").values()
    assert scaled["apiVersion"] == "keda.sh/v1alpha1"
    assert scaled["spec"]["scaleTargetRef"]["name"] == "rb-ragbot-embedder"
    [trigger] = scaled["spec"]["triggers"]
    assert trigger["type"] == "redis"
    # ragbot.messaging.queue: every Celery key is "<key prefix>:celery:", the queue list follows.
    assert trigger["metadata"]["listName"] == "kz:celery:kz.index"
    assert env_of(embedder)["RAGBOT_WORKER_QUEUE"]["value"] == "kz.index"
    assert env_of(embedder)["RAGBOT_REDIS_KEY_PREFIX"]["value"] == "kz"
    auth = of_kind(keda_gpu, "TriggerAuthentication")[trigger["authenticationRef"]["name"]]
    assert auth["spec"]["secretTargetRef"] == [
        {"parameter": "password", "name": SECRET, "key": "redis-password"}
    ]

    spec = embedder["spec"]["template"]["spec"]
    assert container(embedder)["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert env_of(embedder)["RAGBOT_DEVICE"]["value"] == "cuda"
    assert container(embedder)["image"].startswith("ragbot-embedder-cuda:")  # the one image with torch
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    # The GPU is the embedder's alone.
    for name, deployment in of_kind(keda_gpu, "Deployment").items():
        if name != "rb-ragbot-embedder":
            assert "nvidia.com/gpu" not in container(deployment)["resources"].get("limits", {})


def test_service_monitor_and_prometheus_rule(default: list[dict[str, Any]]) -> None:
    [monitor] = of_kind(default, "ServiceMonitor").values()
    assert monitor["spec"]["jobLabel"] == "app.kubernetes.io/component"  # job="ingest" etc., as rules.yml
    endpoints = {e["port"]: e for e in monitor["spec"]["endpoints"]}
    assert set(endpoints) == {"http", "metrics"}
    assert endpoints["http"]["authorization"]["credentials"] == {"name": SECRET, "key": "metrics-api-key"}
    selected = monitor["spec"]["selector"]["matchLabels"]
    for service in of_kind(default, "Service").values():
        assert selected.items() <= service["metadata"]["labels"].items()
    [rule] = of_kind(default, "PrometheusRule").values()
    assert rule["spec"] == yaml.safe_load(RULES.read_text(encoding="utf-8"))


def test_chart_rules_are_a_copy_of_the_prometheus_rules() -> None:
    assert (CHART / "files" / "rules.yml").read_text(encoding="utf-8") == RULES.read_text(encoding="utf-8"), (
        "deploy/helm/ragbot/files/rules.yml must equal deploy/prometheus/rules.yml: copy it again"
    )


def test_store_init_hook_and_a_definition_from_values(default: list[dict[str, Any]]) -> None:
    [job] = of_kind(default, "Job").values()
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"
    assert container(job)["command"] == ["python", "-m", "ragbot.cli.store_init"]
    custom = render("--set-json", 'definition={"field_for_llm": "content", "models": {"m": "content"}}')
    [config] = of_kind(custom, "ConfigMap").values()
    assert yaml.safe_load(config["data"]["definition.json"])["models"] == {"m": "content"}
    for deployment in of_kind(custom, "Deployment").values():
        assert env_of(deployment)["RAGBOT_DOCUMENT_DEFINITION"]["value"] == "/etc/ragbot/definition.json"
        mounts = {m["name"]: m["mountPath"] for m in container(deployment)["volumeMounts"]}
        assert mounts["definition"] == "/etc/ragbot"


def test_pods_run_as_the_images_numeric_user(default: list[dict[str, Any]]) -> None:
    # runAsNonRoot cannot check a named USER: the pods must give the Dockerfile's uid as a number.
    dockerfile = (ROOT / "deploy" / "Dockerfile").read_text(encoding="utf-8")
    [uid] = re.findall(r"useradd .*--uid (\d+) .* ragbot$", dockerfile, re.MULTILINE)
    pods = [d for d in default if d["kind"] in ("Deployment", "Job")]
    assert len(pods) == 5
    for pod in pods:
        spec = pod["spec"]["template"]["spec"]
        assert spec["securityContext"] == {"runAsNonRoot": True, "runAsUser": int(uid)}
        assert container(pod)["securityContext"]["allowPrivilegeEscalation"] is False


def test_every_ragbot_variable_the_chart_sets_is_a_setting(keda_gpu: list[dict[str, Any]]) -> None:
    known: set[str] = set()
    for value in vars(ragbot_settings).values():
        if isinstance(value, type) and issubclass(value, BaseSettings) and value is not BaseSettings:
            prefix = str(value.model_config.get("env_prefix", ""))
            known |= {(prefix + name).upper() for name in value.model_fields}
    custom = render(*KEDA_GPU, "--set", "secrets.llmApiKey.existingSecret=llm")
    beat = render(*BEAT_MEDIAWIKI)
    for pod in [d for d in [*keda_gpu, *custom, *beat] if d["kind"] in ("Deployment", "Job")]:
        unknown = {n for n in env_of(pod) if n.startswith("RAGBOT_") and n not in known}
        assert not unknown, f"{pod['metadata']['name']} sets variables no settings class reads: {unknown}"


def test_each_pod_runs_its_roles_image(default: list[dict[str, Any]]) -> None:
    images = {
        pod["metadata"]["name"]: container(pod)["image"]
        for pod in default
        if pod["kind"] in ("Deployment", "Job")
    }
    assert len(images) == 5
    for name, image in images.items():
        role = next((r for r in ("ingest", "embedder", "retriever", "chat") if name.endswith(r)), "embedder")
        assert image.startswith(f"ragbot-{role}:"), (name, image)


BEAT_MEDIAWIKI = [
    "--set",
    "beat.enabled=true",
    "--set",
    "mediawiki.apiUrl=https://wiki.example.org/w/api.php",
    "--set",
    "mediawiki.user=Bot@ragbot",
    "--set",
    "mediawiki.pollIntervalS=30",
]


def test_beat_is_one_more_worker_and_every_worker_can_run_the_poll() -> None:
    helm("lint", "--strict", str(CHART), *BEAT_MEDIAWIKI, *KEDA_GPU)
    documents = render(*BEAT_MEDIAWIKI, *KEDA_GPU)
    deployments = of_kind(documents, "Deployment")
    beat, worker = deployments["rb-ragbot-embedder-beat"], deployments["rb-ragbot-embedder"]
    # Never two beats: one replica, replaced by stopping the old pod first, not scaled by KEDA.
    assert beat["spec"]["replicas"] == 1 and beat["spec"]["strategy"] == {"type": "Recreate"}
    assert [s["spec"]["scaleTargetRef"]["name"] for s in of_kind(documents, "ScaledObject").values()] == [
        "rb-ragbot-embedder"
    ]
    assert env_of(beat)["RAGBOT_WORKER_BEAT"]["value"] == "true"
    assert "RAGBOT_WORKER_BEAT" not in env_of(worker)
    assert env_of(beat)["RAGBOT_DEVICE"]["value"] == "cpu"  # the GPU goes to the scaled workers
    assert container(beat)["image"].startswith("ragbot-embedder:")
    for deployment in (beat, worker):  # any worker may take the poll off the queue
        env = env_of(deployment)
        assert env["RAGBOT_MEDIAWIKI_API_URL"]["value"] == "https://wiki.example.org/w/api.php"
        assert env["RAGBOT_MEDIAWIKI_NAMESPACES"]["value"] == "[0]"
        assert env["RAGBOT_MEDIAWIKI_POLL_INTERVAL_S"]["value"] == "30"
        assert env["RAGBOT_MEDIAWIKI_USER"]["value"] == "Bot@ragbot"
        ref = env["RAGBOT_MEDIAWIKI_PASSWORD"]["valueFrom"]["secretKeyRef"]
        assert ref == {"name": SECRET, "key": "mediawiki-password"}
    # Scraped under job="embedder" (the ServiceMonitor's jobLabel), so the workers' alerts cover it.
    service = of_kind(documents, "Service")["rb-ragbot-embedder-beat"]
    assert service["metadata"]["labels"]["app.kubernetes.io/component"] == "embedder"
    assert service["spec"]["selector"]["app.kubernetes.io/component"] == "embedder-beat"


def test_no_beat_and_no_wiki_settings_by_default(default: list[dict[str, Any]]) -> None:
    for deployment in of_kind(default, "Deployment").values():
        assert not {n for n in env_of(deployment) if n.startswith("RAGBOT_MEDIAWIKI_")}
        assert "RAGBOT_WORKER_BEAT" not in env_of(deployment)
