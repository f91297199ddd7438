"""Logs, metrics and tracing (OpenTelemetry)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from ragbot.settings.common import settings_config


class ObservabilitySettings(BaseSettings):
    """Logging and metrics shared by every process."""

    model_config = settings_config("RAGBOT_")
    log_level: str = "INFO"
    log_json: bool = True
    prometheus_multiproc_dir: Path | None = None
    # The git sha ``ragbot_build_info`` reports (set at image build; empty: asked from the checkout).
    git_sha: str = ""


class TracingSettings(BaseSettings):
    """OpenTelemetry tracing, read from the standard ``OTEL_*`` variables; off unless they turn it on.

    On when ``OTEL_TRACES_EXPORTER`` names an exporter (``otlp``, ``console``) or, with it unset, when
    an OTLP endpoint is given; ``OTEL_SDK_DISABLED=true`` or ``OTEL_TRACES_EXPORTER=none`` keep it off.
    """

    model_config = SettingsConfigDict(env_prefix="OTEL_", env_file=".env", extra="ignore")
    sdk_disabled: bool = False
    traces_exporter: str = ""
    exporter_otlp_endpoint: str = ""
    exporter_otlp_traces_endpoint: str = ""
    service_name: str = ""
    # Sampled share of new traces (the parent's decision is kept): ``OTEL_TRACES_SAMPLER_ARG``.
    traces_sampler_arg: float = Field(default=1.0, ge=0.0, le=1.0)

    @property
    def exporter(self) -> Literal["otlp", "console"] | None:
        """The span exporter to build, or None when tracing is off."""
        if self.sdk_disabled:
            return None
        names = {n.strip().lower() for n in self.traces_exporter.split(",") if n.strip()}
        if not names:
            return "otlp" if self.exporter_otlp_endpoint or self.exporter_otlp_traces_endpoint else None
        if "otlp" in names:
            return "otlp"
        return "console" if "console" in names else None

    @property
    def enabled(self) -> bool:
        """True when spans are recorded and exported."""
        return self.exporter is not None

    @property
    def traces_endpoint(self) -> str:
        """Where OTLP/HTTP spans go: the traces endpoint as given, or the base endpoint + ``/v1/traces``."""
        if self.exporter_otlp_traces_endpoint:
            return self.exporter_otlp_traces_endpoint
        base = self.exporter_otlp_endpoint or "http://localhost:4318"
        return f"{base.rstrip('/')}/v1/traces"
