"""Every suite test passes the capability gate, after the cluster is up and installed."""

import pytest

from fixtures.dra_checks import Reach
from fixtures.plugin import enforce_capabilities, expect_known_bugs
from fixtures.session import ClusterSession
from kubevirtci.capabilities import Capability


@pytest.fixture(autouse=True)
def capability_gate(request: pytest.FixtureRequest, cluster: ClusterSession) -> None:
    enforce_capabilities(request.node, cluster)
    expect_known_bugs(request.node, cluster)


@pytest.fixture(autouse=True)
def _device_lease(capability_gate: None, device_lease: None) -> None:
    """Every suite test holds the device lease (after the gate: skips take no lease)."""


@pytest.fixture
def pci_vendor_device(profile) -> str:
    """The profile's PCI vendor:device; a test of PCI functions skips for other drivers."""
    if not profile.pci_vendor_device:
        pytest.skip(f"profile {profile.name} declares no pciVendorDevice: its devices are "
                    "not PCI functions")
    return profile.pci_vendor_device


@pytest.fixture
def reach(cluster, capabilities, guest) -> Reach:
    """How a test reads every level a VM's DRA devices reach (fixtures/dra_checks.py)."""
    return Reach(guest, capabilities.has(Capability.LAUNCHER_METADATA),
                 cluster.facts.kubevirt_release)
