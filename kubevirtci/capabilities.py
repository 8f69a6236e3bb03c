"""What a cluster can do, as declared by its provider and discovered from its API.

A test names the capabilities it needs with ``@pytest.mark.requires(...)``; a missing
capability skips it with the reason recorded here (or fails it under ``--certify``). A
faulty one, which the driver under test should give and does not, fails it: the subject
of the run is never a missing feature.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

# Report user property of a skipped test: {reason: [capability, ...]} (reports/skips.py).
SKIP_CAUSES = "skip_causes"


class Capability(StrEnum):
    DRA_API = "dra-api"  # resource.k8s.io/v1 served
    DRA_DRIVER = "dra-driver"  # the profile's driver publishes devices in ResourceSlices
    KUBEVIRT = "kubevirt"  # KubeVirt's API and admission served (virt-api available)
    RUNNING_VMS = "running-vms"  # VMs run: KubeVirt Deployed, its node agents ready
    KUBEVIRT_DRA_GATES = "kubevirt-dra-gates"  # HostDevices + HostDevicesWithDRA + GPUsWithDRA
    LAUNCHER_METADATA = "launcher-metadata"  # KubeVirt >= 1.8 reads KEP-5304 metadata files
    KUBEVIRT_DEVICE_STATUS = "kubevirt-device-status"  # KubeVirt 1.6/1.7 deviceStatus
    PERSISTENT_DRA_CLAIMS = "persistent-dra-claims"  # VEP 344 gate PersistentDRAClaims
    DEVICE_PLUGIN_NVME = "device-plugin-nvme"  # devices.kubevirt.io/nvme allocatable
    GUEST_ACCESS = "guest-access"  # commands can be run inside a VM guest
    NODE_ACCESS = "node-access"  # commands can be run on a node
    VFIO = "vfio"  # real VFIO passthrough (a PCI bus and an IOMMU)
    # PCI host devices reach VMs (through real VFIO, or the hermetic cluster's emulated hop)
    HOST_DEVICE_VMS = "host-device-vms"
    DRIVER_PLUGIN_SOCKET = "driver-plugin-socket"  # kubelet plugin socket reachable
    KUBELET_RESTART = "kubelet-restart"  # the provider restarts a node's kubelet
    # the suite may roll, remove and put back the driver (it installed it)
    DRIVER_DISRUPTION = "driver-disruption"
    DEVICE_TAINTS = "device-taints"  # resource.k8s.io/v1 DeviceTaintRule served (KEP-5055)
    TWO_DEVICES_PER_NODE = "two-devices-per-node"
    # two of the driver's devices on one node share a NUMA node (resource.kubernetes.io/numaNode)
    TWO_DEVICES_PER_NUMA_NODE = "two-devices-per-numa-node"


@dataclass
class Capabilities:
    """Capabilities present, for each missing one the reason it is missing, and for each
    faulty one (the subject under test fails to give it) the reason it is faulty."""

    present: set[Capability] = field(default_factory=set)
    missing: dict[Capability, str] = field(default_factory=dict)
    faulty: dict[Capability, str] = field(default_factory=dict)

    def grant(self, capability: Capability) -> None:
        self.present.add(capability)
        self.missing.pop(capability, None)
        self.faulty.pop(capability, None)

    def deny(self, capability: Capability, reason: str) -> None:
        self.present.discard(capability)
        self.faulty.pop(capability, None)
        self.missing[capability] = reason

    def fault(self, capability: Capability, reason: str) -> None:
        self.present.discard(capability)
        self.missing.pop(capability, None)
        self.faulty[capability] = reason

    def faults(self, required: list[Capability]) -> list[str]:
        """The distinct reasons of the faulty capabilities among ``required``."""
        return list(dict.fromkeys(self.faulty[c] for c in required if c in self.faulty))

    def has(self, capability: Capability) -> bool:
        return capability in self.present

    def reason_missing(self, capability: Capability) -> str:
        return self.missing.get(capability, f"capability {capability.value!r} not available")

    def unmet_by_reason(self, required: list[Capability]) -> dict[str, list[str]]:
        """Each distinct reason with the missing capabilities it covers."""
        by_reason: dict[str, list[str]] = {}
        for cap in required:
            if not self.has(cap) and cap not in self.faulty:
                by_reason.setdefault(self.reason_missing(cap), []).append(cap.value)
        return by_reason

    def unmet(self, required: list[Capability]) -> list[str]:
        """One line per distinct reason, naming the missing capabilities it covers (a
        faulty one is not missing: the tests that need it fail)."""
        return [f"{', '.join(caps)}: {reason}"
                for reason, caps in self.unmet_by_reason(required).items()]
