"""Every suite test passes the capability gate, after the cluster is up and installed."""

import pytest

from fixtures.plugin import enforce_capabilities
from fixtures.session import ClusterSession


@pytest.fixture(autouse=True)
def capability_gate(request: pytest.FixtureRequest, cluster: ClusterSession) -> None:
    enforce_capabilities(request.node, cluster)


@pytest.fixture(autouse=True)
def _device_lease(capability_gate: None, device_lease: None) -> None:
    """Every suite test holds the device lease (after the gate: skips take no lease)."""
