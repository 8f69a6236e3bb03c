"""Every suite test passes the capability gate, after the cluster is up and installed."""

from collections.abc import Iterator

import pytest

from fixtures import disruptions
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


@pytest.fixture
def virt_handlers_rediscover(kube) -> Iterator[dict[str, int]]:
    """For a test that restarts a kubelet: a virt-handler that restarted meanwhile (a
    KubeVirt bug, kubevirtci/releases.py) discovered its host devices while the test's
    DRA device was bound to vfio-pci, and adopted it. Requested first, so torn down last:
    once the test's devices are given back, such a virt-handler is started anew, to find
    only its own. Yields each node's virt-handler restarts before the test."""
    before = disruptions.virt_handler_restarts(kube)
    yield before
    after = disruptions.virt_handler_restarts(kube)
    restarted = [node for node, count in after.items() if count > before.get(node, 0)]
    if restarted:
        disruptions.restart_virt_handlers(kube, restarted)
