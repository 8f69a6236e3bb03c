"""pytest-html: self-contained report with the run header (emulated parts named) and the
failure diagnostics attached to each failed test."""

from __future__ import annotations

from typing import Any

import pytest

from reports import DIAGNOSTICS_KEY, RUN_INFO_KEY


def pytest_configure(config: pytest.Config) -> None:
    if getattr(config.option, "htmlpath", None):
        config.option.self_contained_html = True


def pytest_html_report_title(report: Any) -> None:
    report.title = "KubeVirt DRA conformance"


def pytest_html_results_summary(prefix: list[str], summary: list[str], postfix: list[str],
                                session: pytest.Session) -> None:
    info = session.config.stash.get(RUN_INFO_KEY, None)
    if info is None:
        return
    from html import escape

    prefix.extend(f"<p>{escape(line)}</p>" for line in info.header_lines())


def diagnostics_extras(diagnostics: dict[str, str]) -> list[dict[str, Any]]:
    from pytest_html import extras

    return [extras.text(text, name=name) for name, text in sorted(diagnostics.items())]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if report.when == "teardown":
        diagnostics = item.stash.get(DIAGNOSTICS_KEY, None)
        if diagnostics:
            report.extras = [*getattr(report, "extras", []), *diagnostics_extras(diagnostics)]
    return report
