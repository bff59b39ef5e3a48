"""Collects the chaos drains' reports and prints their table at the end of the run."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.chaos.driver import ChaosReport, table
from tests.chaos.durable_driver import DurableChaosReport, durable_table

REPORTS: list[ChaosReport] = []
DURABLE_REPORTS: list[DurableChaosReport] = []


@pytest.fixture
def chaos_reports() -> list[ChaosReport]:
    """Where a chaos test appends its report (printed as a table after the run)."""
    return REPORTS


@pytest.fixture
def durable_reports() -> list[DurableChaosReport]:
    """Where a chaos test with flows and workflows appends its report (printed as a
    second table after the run)."""
    return DURABLE_REPORTS


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not REPORTS and not DURABLE_REPORTS:
        return
    parts = []
    if REPORTS:
        parts.append(table(REPORTS))
    if DURABLE_REPORTS:
        parts.append("flows and durable workflows:\n" + durable_table(DURABLE_REPORTS))
    text = "\n\n".join(parts)
    terminalreporter.write_sep("=", "chaos drain")
    terminalreporter.write_line(text)
    for r in [*REPORTS, *DURABLE_REPORTS]:
        if r.violations:
            terminalreporter.write_line(f"{r.backend}: first violations:")
            for v in r.violations[:10]:
                terminalreporter.write_line(f"  {v}")
    out = os.environ.get("QC_CHAOS_TABLE")
    if out:
        Path(out).write_text(text + "\n")
