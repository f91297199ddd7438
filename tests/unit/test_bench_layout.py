"""bench/ by subject: every benchmark `make bench` registers exists, and names stay unique."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.report import REPORTS  # noqa: E402
from bench.run import Bench, subjects  # noqa: E402

SUBJECTS = {"indexing", "retrieval", "answers", "chat", "security", "operations", "containers"}


def _exists(target: str) -> bool:
    if target.endswith(".py"):
        return (ROOT / target).is_file()
    return importlib.util.find_spec(target) is not None


def test_every_registered_benchmark_exists_and_has_its_own_name(tmp_path: Path) -> None:
    (tmp_path / "beir").mkdir()
    registered = subjects(tmp_path)  # with data: the retrieval quality benchmarks too
    assert set(registered) >= SUBJECTS
    benches = [b for group in registered.values() for b in group]
    assert [b.target for b in benches if not _exists(b.target)] == []
    names = [b.name for b in benches]
    assert len(names) == len(set(names)), names
    # the names docs/benchmarks.md and bench/results/ have used
    assert {"indexing", "embedded_store", "retriever", "chat", "security", "operations", "hebrew"} <= set(
        names
    )


def test_every_report_part_exists() -> None:
    for report, parts in REPORTS.items():
        assert (report, [p.module for p in parts.values() if not _exists(p.module)]) == (report, [])


def test_a_module_runs_with_dash_m_and_a_script_as_a_file() -> None:
    assert Bench("x", "bench.retrieval.retriever", ("--a",)).command()[1:] == [
        "-m",
        "bench.retrieval.retriever",
        "--a",
    ]
    assert Bench("c", "scripts/compose_stack.py", ("all",)).command()[1:] == [
        "scripts/compose_stack.py",
        "all",
    ]
