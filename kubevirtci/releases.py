"""What each KubeVirt release does with DRA, read from its own code (the module of each
release: v1.6.1, v1.7.0, v1.8.4, v1.9.0). Capabilities and the suites' expectations are
keyed to the release under test from here, in one place."""

from __future__ import annotations

from dataclasses import dataclass

METADATA_V1ALPHA1 = "metadata.resource.k8s.io/v1alpha1"
METADATA_V1BETA1 = "metadata.resource.k8s.io/v1beta1"


@dataclass(frozen=True)
class Gate:
    maturity: str  # Alpha, Beta, GA
    default_on: bool


@dataclass(frozen=True)
class Release:
    minor: tuple[int, int]
    kubevirtci_tag: str  # kubevirtci/cluster-up/version.txt in the release's module
    gates: dict[str, Gate]  # DRA-related feature gates (pkg/virt-config/featuregate)
    # VEP-10 admission rules on DRA host devices that virt-api enforces (rule ids of
    # suites/test_admission.py; pkg/virt-api/webhooks/.../admitters, pkg/dra/admitter).
    admission_rules: frozenset[str]
    # KEP-5304 metadata versions virt-launcher decodes (pkg/dra/utils.go); empty: none.
    metadata_versions: tuple[str, ...]
    # Slice attribute virt-controller copies into status.deviceStatus as the PCI address
    # (pkg/virt-controller/watch/dra/dra.go); None: the release has no deviceStatus.
    device_status_pci_attribute: str | None
    template_claims_via: str
    # virt-controller renders a launcher for DRA host devices while permittedHostDevices
    # is configured (renderresources.go validatePermittedHostDevices skips claim-backed
    # devices from v1.9.0 on).
    renders_dra_with_permitted_host_devices: bool
    device_status_caveat: str | None = None  # a KubeVirt bug in how deviceStatus is filled

    @property
    def name(self) -> str:
        return f"v{self.minor[0]}.{self.minor[1]}"

    def default_on_gates(self) -> set[str]:
        return {name for name, gate in self.gates.items() if gate.default_on}

    def summary(self) -> str:
        """What the suite expects of this release, for the report header."""
        gates = ", ".join(f"{name} {gate.maturity}{' (on by default)' if gate.default_on else ''}"
                          for name, gate in sorted(self.gates.items()))
        address = (f"KEP-5304 metadata ({', '.join(self.metadata_versions)})"
                   if self.metadata_versions else
                   f"status.deviceStatus, filled from {self.device_status_pci_attribute}")
        return (f"{self.name} (from its code): gates {gates}; PCI address from {address}; "
                f"template claims found through {self.template_claims_via}")


_ALPHA_OFF = Gate("Alpha", False)
_BETA_ON = Gate("Beta", True)

# v1.6 and v1.7 check DRA only on GPUs; host devices with claims pass admission unchecked.
_HOST_DEVICE_RULES_V1_8 = frozenset({
    "duplicate-claim-names",  # "duplicate resourceClaims name %q"
    "claim-name-not-in-resource-claims",  # "vmi.spec.resourceClaims must specify all claims"
    "request-name-missing",  # "requestName is required for DRA HostDevice"
    "duplicate-claim-request-pair",  # "duplicate claimName/requestName pair %q"
    "device-name-and-claim-both-set",  # "...HostDevices with both deviceName and claimRequest"
})
_POD_STATUS = "the launcher pod's status.resourceClaimStatuses"
_METADATA_DIR = ("the KEP-5304 metadata folder resourceclaimtemplates/<VMI claim name>/"
                 "<request> in the launcher")
# pkg/virt-controller/watch/dra/dra.go: PCIAddressDeviceAttributeKey
_PCIE_ROOT_AS_ADDRESS = (
    "takes the device's PCI address from resource.kubernetes.io/pcieRoot, which names the "
    "root complex, not the function (kubernetes/kubernetes#134569); v1.8 reads pciBusID "
    "from KEP-5304 metadata instead")

RELEASES: dict[tuple[int, int], Release] = {
    (1, 6): Release(
        (1, 6), "2507072117-b751e332",
        {"HostDevices": _ALPHA_OFF, "HostDevicesWithDRA": _ALPHA_OFF, "GPUsWithDRA": _ALPHA_OFF},
        frozenset(), (), "resource.kubernetes.io/pcieRoot", _POD_STATUS, False,
        _PCIE_ROOT_AS_ADDRESS),
    (1, 7): Release(
        (1, 7), "2510241540-9fd40b1c",
        {"HostDevices": _ALPHA_OFF, "HostDevicesWithDRA": _ALPHA_OFF, "GPUsWithDRA": _ALPHA_OFF},
        frozenset(), (), "resource.kubernetes.io/pcieRoot", _POD_STATUS, False,
        _PCIE_ROOT_AS_ADDRESS),
    (1, 8): Release(
        (1, 8), "2602190951-056f8f79",
        {"HostDevices": _ALPHA_OFF, "HostDevicesWithDRA": _ALPHA_OFF, "GPUsWithDRA": _ALPHA_OFF},
        _HOST_DEVICE_RULES_V1_8, (METADATA_V1ALPHA1,), None, _METADATA_DIR, False),
    (1, 9): Release(
        (1, 9), "2606300938-ede497bd",
        {"HostDevices": _ALPHA_OFF, "HostDevicesWithDRA": _BETA_ON, "GPUsWithDRA": _BETA_ON,
         "NetworkDevicesWithDRA": _ALPHA_OFF},
        # pkg/dra/admitter/dra_admitter.go validateResourceClaims: DNS-label claim names
        _HOST_DEVICE_RULES_V1_8 | {"claim-name-not-dns-label"},
        (METADATA_V1ALPHA1,), None, _METADATA_DIR, True),
}
OLDEST, NEWEST = min(RELEASES), max(RELEASES)


def release_for(minor: tuple[int, int] | None) -> Release | None:
    """The release's facts; a newer release than this table knows reads as the newest."""
    if minor is None or minor < OLDEST:
        return None
    return RELEASES.get(minor) or (RELEASES[NEWEST] if minor > NEWEST else None)
