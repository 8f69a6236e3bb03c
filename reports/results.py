"""Results per requirement: each test's outcome, gathered on the controller (xdist
workers' reports arrive there too), folded into one verdict per requirement."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from reports.catalog import REQUIREMENTS, Level

# Outcomes, worst first: a requirement takes the worst outcome of its tests. A test that
# passed only when retried (pytest-rerunfailures' --reruns) is flaky, never passed.
ORDER = ("failed", "flaky", "skipped", "xfailed", "passed")
NOT_RUN = "not run"


def catalog_key(nodeid: str) -> str:
    """``suites/test_x.py::test_y[param]`` -> ``test_x.py::test_y`` (the catalog's key)."""
    path, _, name = nodeid.partition("::")
    return f"{path.rsplit('/', 1)[-1]}::{name.split('[', 1)[0]}"


def outcome(report: pytest.TestReport) -> str | None:
    """The test's outcome from one of its phase reports, or None for a passed phase that
    does not decide it (setup and teardown)."""
    if getattr(report, "outcome", None) == "rerun":  # a failed attempt, retried
        return "flaky"
    if hasattr(report, "wasxfail"):  # an expected failure, or a non-strict xpass
        if report.skipped:
            return "xfailed"
        return "failed" if report.failed else "passed"
    if report.failed:
        return "failed"
    if report.skipped:
        return "skipped"
    return "passed" if report.when == "call" else None


def fold(outcomes: Mapping[str, str], tests_by_requirement: Mapping[str, list[str]],
         ) -> dict[str, dict[str, object]]:
    """One verdict per requirement from its tests' outcomes (by node id)."""
    results: dict[str, dict[str, object]] = {}
    for requirement in REQUIREMENTS:
        keys = set(tests_by_requirement.get(requirement.id, []))
        tests = {nodeid: o for nodeid, o in sorted(outcomes.items()) if catalog_key(nodeid) in keys}
        verdict = min(tests.values(), key=ORDER.index) if tests else NOT_RUN
        results[requirement.id] = {"level": requirement.level.value, "status": verdict,
                                   "tests": tests}
    return results


def certification_failures(results: Mapping[str, Mapping[str, object]]) -> list[str]:
    """Required requirements that did not pass (xfailed: a known bug, flaky: passed only
    when retried; neither is a pass)."""
    return [f"{rid}: {r['status']}" for rid, r in results.items()
            if r["level"] == Level.REQUIRED.value and r["status"] != "passed"]


class Outcomes:
    """A plugin that records each test's outcome (the worst of its phases)."""

    def __init__(self) -> None:
        self.by_test: dict[str, str] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        seen = outcome(report)
        if seen is None:
            return
        before = self.by_test.get(report.nodeid)
        if before is None or ORDER.index(seen) < ORDER.index(before):
            self.by_test[report.nodeid] = seen
