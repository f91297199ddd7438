"""What one evaluation measured: per-configuration results, the JSON report and the chart."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ragbot.errors import ConfigurationError
from ragbot.evaluation.configs import EvalConfig
from ragbot.evaluation.metrics import METRICS


@dataclass(slots=True)
class ConfigResult:
    """One configuration's scores and latency (and its ranked documents per query)."""

    config: EvalConfig
    metrics: dict[str, float]
    latency_ms: dict[str, float]
    run: dict[str, list[str]] = field(default_factory=dict, repr=False)

    def to_json(self) -> dict[str, Any]:
        """The report entry (without the per-query run)."""
        return {
            "name": self.config.name,
            "request": {k: v for k, v in asdict(self.config).items() if k != "name" and v is not None},
            "metrics": {k: round(v, 4) for k, v in self.metrics.items()},
            "latency_ms": self.latency_ms,
        }


@dataclass(slots=True)
class EvalReport:
    """Everything ``ragbot eval`` measured, as written to the JSON report."""

    dataset: str
    split: str
    store: str
    models: list[str]
    reranker: str | None
    documents: int
    paragraphs: int
    queries: int
    index_seconds: float
    defaults: dict[str, Any]
    results: list[ConfigResult]

    def to_json(self) -> dict[str, Any]:
        """A plain-JSON dict."""
        return {
            "dataset": self.dataset,
            "split": self.split,
            "store": self.store,
            "models": self.models,
            "reranker": self.reranker,
            "documents": self.documents,
            "paragraphs": self.paragraphs,
            "queries": self.queries,
            "index_seconds": self.index_seconds,
            "defaults": self.defaults,
            "configurations": [r.to_json() for r in self.results],
        }

    def table(self) -> str:
        """A fixed-width table of every configuration's metrics and latency."""
        width = max([len("configuration"), *(len(r.config.name) for r in self.results)])
        head = f"{'configuration':<{width}}  " + "  ".join(f"{m:>10}" for m in METRICS)
        head += f"  {'p50 ms':>8}  {'p95 ms':>8}"
        lines = [head, "-" * len(head)]
        for r in self.results:
            cells = "  ".join(f"{r.metrics[m]:>10.4f}" for m in METRICS)
            lines.append(
                f"{r.config.name:<{width}}  {cells}  {r.latency_ms['p50']:>8.1f}  {r.latency_ms['p95']:>8.1f}"
            )
        return "\n".join(lines)


def write_report(report: EvalReport, path: Path) -> None:
    """Write the JSON report (folders created)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report.to_json(), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def draw_chart(report: EvalReport, path: Path) -> None:
    """A grouped bar chart (PNG): one group per metric, one bar per configuration."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ConfigurationError("--chart needs matplotlib (install ragbot[charts])") from None
    names = [r.config.name for r in report.results]
    x = np.arange(len(METRICS))
    width = 0.8 / max(1, len(names))
    fig, ax = plt.subplots(figsize=(max(8.0, 1.6 * len(METRICS) + 0.5 * len(names) + 2.5), 4.5))
    for i, result in enumerate(report.results):
        values = [result.metrics[m] for m in METRICS]
        bars = ax.bar(x + (i - (len(names) - 1) / 2) * width, values, width, label=result.config.name)
        ax.bar_label(bars, fmt="%.3f", fontsize=7, rotation=90, padding=2)
    ax.set_xticks(x, list(METRICS))
    ax.set_ylim(0, 1.15)
    ax.set_ylabel("score")
    ax.set_title(f"{report.dataset} ({report.split}, {report.queries} queries, {report.store} store)")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
