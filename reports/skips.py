"""Terminal summary: skipped tests grouped by their root cause, so one missing piece of
the cluster reads as one line with a count and the capabilities it takes away, instead
of a line per combination of capabilities."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import pytest

from kubevirtci.capabilities import SKIP_CAUSES


@dataclass
class SkipCause:
    reason: str
    tests: int = 0
    capabilities: set[str] = field(default_factory=set)


def _causes(report: pytest.TestReport) -> dict[str, list[str]]:
    for name, value in report.user_properties:
        if name == SKIP_CAUSES:
            return dict(value)
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return {str(longrepr[2]).removeprefix("Skipped: "): []}
    return {str(longrepr): []}


def group_skips(reports: list[pytest.TestReport]) -> list[SkipCause]:
    """One entry per root cause, most tests first (a test may miss for several)."""
    causes: dict[str, SkipCause] = {}
    counts: Counter[str] = Counter()
    for report in reports:
        for reason, caps in _causes(report).items():
            cause = causes.setdefault(reason, SkipCause(reason))
            cause.capabilities.update(caps)
            counts[reason] += 1
    for reason, count in counts.items():
        causes[reason].tests = count
    return sorted(causes.values(), key=lambda c: (-c.tests, c.reason))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    skipped = terminalreporter.stats.get("skipped", [])
    if not skipped:
        return
    terminalreporter.section("skips by reason")
    for cause in group_skips(skipped):
        terminalreporter.write_line(f"{cause.tests:4d}  {cause.reason}")
        if cause.capabilities:
            terminalreporter.write_line(
                f"      missing: {', '.join(sorted(cause.capabilities))}")
