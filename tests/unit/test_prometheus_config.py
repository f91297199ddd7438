"""The monitoring config is valid (promtool), scrapes every service, charts metrics that exist, and every
alert passes its ``promtool test rules`` cases and has a runbook."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
PROMETHEUS_YML = ROOT / "deploy" / "prometheus" / "prometheus.yml"
RULES_YML = ROOT / "deploy" / "prometheus" / "rules.yml"
RULES_TEST_YML = ROOT / "deploy" / "prometheus" / "rules_test.yml"
OPERATIONS_MD = ROOT / "docs" / "operations.md"
DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "ragbot.json"
DATASOURCES = ROOT / "deploy" / "grafana" / "provisioning" / "datasources" / "prometheus.yml"
PROVIDERS = ROOT / "deploy" / "grafana" / "provisioning" / "dashboards" / "ragbot.yml"
METRICS_SOURCES = (
    ROOT / "shared" / "ragbot" / "observability" / "metrics.py",
    ROOT / "shared" / "ragbot" / "chat" / "metrics.py",
)
COMPOSE = ROOT / "compose.yaml"
_METRIC = re.compile(r"\bragbot_[a-z0-9_]+")
_HEALTH_PORT = re.compile(r"127\.0\.0\.1:(\d+)/healthz")


def _promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail(
            "promtool is not installed. `make test` installs it (Debian package `prometheus`, through "
            "`bash scripts/services.sh deps`); by hand: apt-get install prometheus",
            pytrace=False,
        )
    return path


def _yaml(path: Path) -> dict[str, Any]:
    loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(loaded, dict), path
    return loaded


def _dashboard_exprs() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    exprs += [v["definition"] for v in dashboard["templating"]["list"] if v.get("type") == "query"]
    return exprs


def _rule_exprs() -> list[str]:
    return [rule["expr"] for group in _yaml(RULES_YML)["groups"] for rule in group["rules"]]


METRICS_KEY_FILE = "/run/secrets/metrics_key"


def test_promtool_accepts_the_config_and_its_rules(tmp_path: Path) -> None:
    """promtool also checks that the key file exists: the compose secret is stood in by a temporary one."""
    folder = tmp_path / "prometheus"
    shutil.copytree(PROMETHEUS_YML.parent, folder)
    (tmp_path / "metrics_key").write_text("test-metrics-key\n", encoding="utf-8")
    text = PROMETHEUS_YML.read_text(encoding="utf-8")
    assert METRICS_KEY_FILE in text
    (folder / PROMETHEUS_YML.name).write_text(
        text.replace(METRICS_KEY_FILE, str(tmp_path / "metrics_key")), encoding="utf-8"
    )
    result = subprocess.run(
        [_promtool(), "check", "config", str(folder / PROMETHEUS_YML.name)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout + result.stderr


def test_every_service_and_the_worker_are_scraped_on_their_port() -> None:
    """Expected targets come from compose: every ragbot process and the port its healthcheck uses."""
    services = _yaml(COMPOSE)["services"]
    expected = set()
    for name, service in services.items():
        if "build" not in service or service.get("restart") == "no":
            continue
        port = _HEALTH_PORT.search(" ".join(service["healthcheck"]["test"]))
        assert port, f"{name}: healthcheck does not call 127.0.0.1:<port>/healthz"
        expected.add((name, int(port.group(1))))
    assert expected >= {("ingest", 8001), ("retriever", 8002), ("chat", 8003), ("embedder", 9101)}
    scraped = set()
    for job in _yaml(PROMETHEUS_YML)["scrape_configs"]:
        for sd in job.get("dns_sd_configs", []):
            scraped |= {(name, int(sd["port"])) for name in sd["names"]}
        for static in job.get("static_configs", []):
            for target in static["targets"]:
                host, port = target.rsplit(":", 1)
                scraped.add((host, int(port)))
    assert expected <= scraped, f"not scraped: {expected - scraped}"


def test_dashboard_and_alerts_only_use_metrics_ragbot_exports() -> None:
    source = "".join(path.read_text(encoding="utf-8") for path in METRICS_SOURCES)
    used = {
        re.sub(r"_(bucket|count|sum)$", "", name)
        for expr in _dashboard_exprs() + _rule_exprs()
        for name in _METRIC.findall(expr)
    }
    unknown = {name for name in used if f'"{name}"' not in source}
    assert not unknown, f"charted or alerted but not exported by ragbot (observability, chat): {unknown}"


def test_dashboard_charts_rate_errors_latency_queue_depth_and_indexing_lag() -> None:
    exprs = "\n".join(_dashboard_exprs())
    assert "rate(ragbot_http_requests_total" in exprs
    assert 'status=~"5.."' in exprs
    assert "ragbot_http_request_duration_seconds_bucket" in exprs
    assert "ragbot_queue_depth" in exprs
    assert "ragbot_freshness_lag_seconds_bucket" in exprs
    assert "by (service" in exprs


def test_dashboard_uses_the_provisioned_datasource_and_mount_path() -> None:
    uid = _yaml(DATASOURCES)["datasources"][0]["uid"]
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] == uid, panel["title"]
        assert all(t["datasource"]["uid"] == uid for t in panel["targets"]), panel["title"]
    path = _yaml(PROVIDERS)["providers"][0]["options"]["path"]
    grafana_volumes = _yaml(COMPOSE)["services"]["grafana"]["volumes"]
    assert f"./deploy/grafana/dashboards:{path}:ro" in grafana_volumes


def _alert_names() -> list[str]:
    return [
        rule["alert"] for group in _yaml(RULES_YML)["groups"] for rule in group["rules"] if "alert" in rule
    ]


def test_promtool_passes_the_alert_cases_and_every_alert_has_one_that_fires() -> None:
    result = subprocess.run(
        [_promtool(), "test", "rules", RULES_TEST_YML.name],
        cwd=RULES_TEST_YML.parent,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout + result.stderr
    firing = {
        case["alertname"]
        for test in _yaml(RULES_TEST_YML)["tests"]
        for case in test.get("alert_rule_test", [])
        if case.get("exp_alerts")
    }
    alerts = _alert_names()
    assert len(alerts) == len(set(alerts))
    assert set(alerts) - firing == set(), "alerts without a case that fires in rules_test.yml"
    assert set(alerts) >= {
        "RagbotLLMErrors",
        "RagbotSlowFirstToken",
        "RagbotRedisDown",
        "RagbotStoreDown",
        "RagbotQueueGrowing",
    }


def test_every_alert_has_a_runbook_section() -> None:
    headings = set(re.findall(r"^#{3,4} (Ragbot[A-Za-z]+)", OPERATIONS_MD.read_text(encoding="utf-8"), re.M))
    assert set(_alert_names()) - headings == set(), "alerts without a '### <AlertName>' runbook in docs"


def test_dashboard_has_the_chat_llm_row_and_retrieval_histograms() -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    rows = [p["title"] for p in dashboard["panels"] if p["type"] == "row"]
    assert "Chat and LLM" in rows
    exprs = "\n".join(_dashboard_exprs())
    for metric in (
        "ragbot_chat_time_to_first_token_seconds_bucket",
        "ragbot_llm_time_to_first_token_seconds_bucket",
        "ragbot_chat_answers_total",
        "ragbot_chat_abstentions_total",
        "ragbot_chat_feedback_total",
        "ragbot_llm_errors_total",
        "ragbot_llm_tokens_total",
        "ragbot_retrieval_stage_seconds_bucket",
        "ragbot_build_info",
        "ragbot_dependency_up",
        "ragbot_dead_letter_jobs",
    ):
        assert metric in exprs, metric
    # The gauge no longer shares the counter's family name (ragbot_dead_letters_total).
    assert not re.search(r"ragbot_dead_letters(?!_total)", exprs + "\n".join(_rule_exprs()))
