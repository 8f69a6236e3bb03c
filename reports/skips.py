"""Terminal summary: skipped tests grouped by reason, so a missing capability reads as
one line with a count instead of a wall of skips."""

from __future__ import annotations

from collections import Counter

import pytest


def group_skips(reports: list[pytest.TestReport]) -> list[tuple[str, int]]:
    reasons: Counter[str] = Counter()
    for report in reports:
        longrepr = report.longrepr
        if isinstance(longrepr, tuple) and len(longrepr) == 3:
            reason = str(longrepr[2]).removeprefix("Skipped: ")
        else:
            reason = str(longrepr)
        reasons[reason] += 1
    return sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    skipped = terminalreporter.stats.get("skipped", [])
    if not skipped:
        return
    terminalreporter.section("skips by reason")
    for reason, count in group_skips(skipped):
        terminalreporter.write_line(f"{count:4d}  {reason}")
