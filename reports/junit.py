"""JUnit: run-level properties (provider, versions, driver, profile) on the test suite."""

from __future__ import annotations

import pytest
from _pytest.junitxml import xml_key

from fixtures.plugin import SESSION_KEY


def junit_properties(lines: dict[str, str]) -> list[tuple[str, str]]:
    return sorted(lines.items())


def run_properties(config: pytest.Config) -> dict[str, str]:
    session = config.stash.get(SESSION_KEY, None)
    if session is None:
        return {}
    facts = session.facts
    props = {
        "provider": session.provider.name,
        "profile": session.profile.name,
        "driver": session.profile.driver,
        "run_id": session.options.run_id,
        "kubernetes_version": facts.server_version,
        "kubevirt_version": facts.kubevirt_version or "not installed",
        "kubevirt_gates": ",".join(facts.kubevirt_gates),
        "certify": str(session.options.certify).lower(),
    }
    if session.error:
        props["cluster_error"] = session.error
    for i, part in enumerate(session.provider.emulated):
        props[f"emulated_{i}"] = part
    return props


@pytest.hookimpl(tryfirst=True)  # before junitxml writes the file
def pytest_sessionfinish(session: pytest.Session) -> None:
    xml = session.config.stash.get(xml_key, None)
    if xml is None:
        return
    for name, value in junit_properties(run_properties(session.config)):
        xml.add_global_property(name, value)
