"""The suite's own code judged by the real servers of the hermetic (or any) cluster,
through the same session as the suites (``fixtures/plugin.py``): ``tox -e selfcheck``."""

from __future__ import annotations

import pytest

from fixtures.plugin import enforce_capabilities
from fixtures.session import ClusterSession


@pytest.fixture(autouse=True)
def capability_gate(request: pytest.FixtureRequest, cluster: ClusterSession) -> None:
    enforce_capabilities(request.node, cluster)
