"""Collects the chaos drains' reports and prints their table at the end of the run."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.chaos.driver import ChaosReport, table

REPORTS: list[ChaosReport] = []


@pytest.fixture
def chaos_reports() -> list[ChaosReport]:
    """Where a chaos test appends its report (printed as a table after the run)."""
    return REPORTS


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not REPORTS:
        return
    text = table(REPORTS)
    terminalreporter.write_sep("=", "chaos drain")
    terminalreporter.write_line(text)
    for r in REPORTS:
        if r.violations:
            terminalreporter.write_line(f"{r.backend}: first violations:")
            for v in r.violations[:10]:
                terminalreporter.write_line(f"  {v}")
    out = os.environ.get("QC_CHAOS_TABLE")
    if out:
        Path(out).write_text(text + "\n")
