"""What each KubeVirt release does with DRA, read from its own code (the module of each
release: v1.6.1, v1.7.0, v1.8.1 to v1.8.4, v1.9.0), keyed by patch release where the
patch releases of one minor differ (1.8.3 changed the metadata path, its decoding,
admission and the launcher's claims). Capabilities, the suites' expectations and the
KubeVirt bugs they expect are keyed to the release under test from here, in one place.

A feature a release lacks skips the tests that need it. A bug never does: the tests on
its path run as strict xfails naming the upstream fix, so a release where they pass
shows XPASS (and this table is corrected)."""

from __future__ import annotations

from dataclasses import dataclass

METADATA_V1ALPHA1 = "metadata.resource.k8s.io/v1alpha1"
METADATA_V1BETA1 = "metadata.resource.k8s.io/v1beta1"
# The KEP-5304 layout (kubelet, Kubernetes 1.36+) and the one KubeVirt 1.8.0-1.8.2 read.
KEP_5304_ROOT = "/var/run/kubernetes.io/dra-device-attributes"
PRE_KEP_ROOT = "/var/run/dra-device-attributes"

Version = tuple[int, int, int]


@dataclass(frozen=True)
class Gate:
    maturity: str  # Alpha, Beta, GA
    default_on: bool


@dataclass(frozen=True)
class KnownBug:
    """A KubeVirt bug in a release's code on one path of the suites (a marker of
    fixtures/markers.py): the tests on that path are strict xfails naming it."""

    path: str
    summary: str
    upstream: str | None  # the fix (or the report), owner/repo#number; None: not reported
    fixed_in: str | None  # the first release with the fix; None: no release has one
    # Only where the KubeVirt CR configures permittedHostDevices.
    needs_permitted_host_devices: bool = False
    # Only on Kubernetes releases from this one on (None: any).
    min_kubernetes: tuple[int, int] | None = None
    # Only on nodes whose kernel shows a VFIO function's vfio-dev device without its
    # /dev/vfio/devices node (no CONFIG_VFIO_DEVICE_CDEV, as Debian's).
    needs_kernel_without_vfio_cdev: bool = False
    # Only for DRA devices in these VMI lists (profile deviceKinds; None: any).
    device_kinds: tuple[str, ...] | None = None
    # The test raises core.errors.KnownBugSeen on the bug's own signature; any other
    # failure is a failure.
    seen_by_signature: bool = False
    # A race: the bug shows on some runs only, so a pass is an XPASS, not a failure (a
    # strict xfail would flake); seen, it is an xfail naming it.
    racy: bool = False

    def reason(self, version: str) -> str:
        return (f"KubeVirt {version} bug: {self.summary} "
                f"({self.upstream or 'found by this suite, not reported upstream yet'}, "
                f"{f'fixed in {self.fixed_in}' if self.fixed_in else 'fixed in no release'})")


@dataclass(frozen=True)
class Release:
    since: Version  # the first patch release these facts hold for
    read: tuple[str, ...]  # the releases whose code they were read from
    kubevirtci_tag: str  # kubevirtci/cluster-up/version.txt in the release's module
    gates: dict[str, Gate]  # DRA-related feature gates (pkg/virt-config/featuregate)
    # VEP-10 admission rules on DRA host devices that virt-api enforces (rule ids of
    # suites/test_admission.py; pkg/virt-api/webhooks/.../admitters, pkg/dra/admitter).
    admission_rules: frozenset[str]
    # KEP-5304 metadata versions virt-launcher decodes (pkg/dra/utils.go); empty: none.
    metadata_versions: tuple[str, ...]
    metadata_root: str | None  # where virt-launcher reads them
    # Slice attribute virt-controller copies into status.deviceStatus as the PCI address
    # (pkg/virt-controller/watch/dra/dra.go); None: the release has no deviceStatus.
    device_status_pci_attribute: str | None
    template_claims_via: str
    bugs: tuple[KnownBug, ...] = ()
    device_status_caveat: str | None = None  # a KubeVirt bug in how deviceStatus is filled

    @property
    def name(self) -> str:
        return "/".join(self.read)

    def default_on_gates(self) -> set[str]:
        return {name for name, gate in self.gates.items() if gate.default_on}

    def bugs_on(self, path: str, permits_host_devices: bool,
                kubernetes: tuple[int, ...] | None, device_kind: str,
                vfio_cdev_missing: bool | None = None) -> list[KnownBug]:
        """The bugs that break ``path`` for DRA devices of ``device_kind`` on a cluster
        configured so, of this Kubernetes release (None: unknown, every bug that may
        apply), whose nodes' kernels show VFIO cdevs or not (None: not known, no bug that
        needs them missing)."""
        return [bug for bug in self.bugs if bug.path == path
                and (permits_host_devices or not bug.needs_permitted_host_devices)
                and (vfio_cdev_missing or not bug.needs_kernel_without_vfio_cdev)
                and (bug.min_kubernetes is None or kubernetes is None
                     or kubernetes[:2] >= bug.min_kubernetes)
                and (bug.device_kinds is None or device_kind in bug.device_kinds)]

    def summary(self) -> str:
        """What the suite expects of this release, for the report header."""
        gates = ", ".join(f"{name} {gate.maturity}{' (on by default)' if gate.default_on else ''}"
                          for name, gate in sorted(self.gates.items()))
        address = (f"KEP-5304 metadata ({', '.join(self.metadata_versions)}) under "
                   f"{self.metadata_root}" if self.metadata_versions else
                   f"status.deviceStatus, filled from {self.device_status_pci_attribute}")
        bugs = "; ".join(f"{b.upstream or 'unreported'} ({b.path})" for b in self.bugs) or "none"
        return (f"{self.name} (from its code): gates {gates}; PCI address from {address}; "
                f"template claims found through {self.template_claims_via}; known bugs: "
                f"{bugs}")


_ALPHA_OFF = Gate("Alpha", False)
_BETA_ON = Gate("Beta", True)
_GATES_UP_TO_1_8 = {"HostDevices": _ALPHA_OFF, "HostDevicesWithDRA": _ALPHA_OFF,
                    "GPUsWithDRA": _ALPHA_OFF}

# v1.6 and v1.7 check DRA only on GPUs; host devices with claims pass admission unchecked.
_HOST_DEVICE_RULES_V1_8 = frozenset({
    "duplicate-claim-names",  # "duplicate resourceClaims name %q"
    "claim-name-not-in-resource-claims",  # "vmi.spec.resourceClaims must specify all claims"
    "request-name-missing",  # "requestName is required for DRA HostDevice"
    "duplicate-claim-request-pair",  # "duplicate claimName/requestName pair %q"
    "device-name-and-claim-both-set",  # "...HostDevices with both deviceName and claimRequest"
    "claim-name-missing",  # "claimName is required for DRA HostDevice"
    "device-name-and-claim-both-missing",  # "...HostDevices without deviceName or claimRequest"
})
# 1.8.3's admitter compares the pairs of gpus and hostDevices with each other.
_HOST_DEVICE_RULES_V1_8_3 = _HOST_DEVICE_RULES_V1_8 | {
    "pair-in-gpus-and-host-devices",  # "duplicate claimName/requestName pair %q between ..."
}
_POD_STATUS = "the launcher pod's status.resourceClaimStatuses"
_METADATA_DIR = ("the KEP-5304 metadata folder resourceclaimtemplates/<VMI claim name>/"
                 "<request> in the launcher")
_PODCLAIMNAME = ("the podClaimName field of any metadata file under <root>/*/<request> in "
                 "the launcher")
# pkg/virt-controller/watch/dra/dra.go: PCIAddressDeviceAttributeKey
_PCIE_ROOT_AS_ADDRESS = (
    "takes the device's PCI address from resource.kubernetes.io/pcieRoot, which names the "
    "root complex, not the function (kubernetes/kubernetes#134569); fixed in v1.8.0, which "
    "reads pciBusID from KEP-5304 metadata instead")

# The paths of fixtures/markers.py that a release's bugs break.
DRA_LAUNCHER = "dra_launcher"  # a VMI whose launcher carries DRA host devices
VM_RUNNING = "vm_running"  # a VMI that must reach Running
FIRST_AVAILABLE = "first_available"  # a VMI whose device a firstAvailable request serves
# permittedHostDevices refusing a device-plugin resource it does not list
ALLOW_LIST = "allow_list"
# a VMI with a host device of KubeVirt's PCI device plugin, which must start
DEVICE_PLUGIN_VM = "device_plugin_vm"
# a VMI whose host device names an extended resource a DeviceClass serves (KEP-5004)
EXTENDED_RESOURCE = "extended_resource"
# a node's kubelet restarted while KubeVirt's host device plugins serve there
KUBELET_RESTART = "kubelet_restart"
# renderresources.go validatePermittedHostDevices checks every hostDevices entry against
# permittedHostDevices, and a DRA entry has no deviceName: "HostDevice  is not permitted".
# (Its GPU loop is skipped whole while GPUsWithDRA is on: DRA GPUs pass.)
PERMITTED_HOST_DEVICES_BLOCK_DRA = KnownBug(
    DRA_LAUNCHER, "virt-controller renders no launcher for DRA host devices while "
    "permittedHostDevices is configured (\"HostDevice  is not permitted\")",
    "kubevirt/kubevirt#17385", "v1.9.0",
    needs_permitted_host_devices=True, device_kinds=("hostDevice",))
# The same function up to 1.8.4: `if !config.GPUsWithDRAGateEnabled()` around the GPU
# loop, so with the gate on no GPU is checked, device-plugin ones included; 1.9.0 skips
# only GPUs with a claim.
UNLISTED_GPUS_PASS = KnownBug(
    ALLOW_LIST, "with GPUsWithDRA on, virt-controller checks no GPU against "
    "permittedHostDevices, device-plugin GPUs included: an unlisted resource is not "
    "refused", "kubevirt/kubevirt#17385", "v1.9.0",
    needs_permitted_host_devices=True, device_kinds=("gpu",), seen_by_signature=True)
# pkg/dra/utils.go DefaultMetadataBasePath of 1.8.0-1.8.2: files the kubelet never writes.
PRE_KEP_METADATA_PATH = KnownBug(
    DRA_LAUNCHER, f"virt-launcher reads device metadata under {PRE_KEP_ROOT}/<claim>/"
    f"<request>, not the KEP-5304 path the kubelet writes ({KEP_5304_ROOT}/resourceclaims/"
    "...)", "kubevirt/kubevirt#17028", "v1.8.3")
# validations_generated.go of 1.8.0-1.8.3: status.kernelBootStatus.{kernel,initrd}Info and
# volumeStatus[].containerDiskVolume checksums (CRC32, uint32) are `format: int32`;
# Kubernetes 1.36 enforces formats, so a checksum above 2^31 fails every status update.
CHECKSUM_AS_INT32 = KnownBug(
    VM_RUNNING, "the VMI CRD declares the status checksums of kernel boot and container "
    "disks (uint32) as int32, which Kubernetes 1.36+ enforces: virt-handler's status "
    "updates are rejected and the VMI never reports Running", "kubevirt/kubevirt#17858",
    "v1.8.4", min_kubernetes=(1, 36))

# pkg/dra/utils.go resolveDevice (1.8.0 on) looks a device's metadata entry up by the VMI's
# requestName exactly; the KEP-5304 API names a firstAvailable subrequest's entry
# "<request>/<subrequest>" (api/metadata DeviceMetadataRequest.Name), and a VMI can only
# name the request (the launcher pod's resources.claims[].request is a DNS label).
SUBREQUEST_METADATA_NAME = KnownBug(
    FIRST_AVAILABLE, "virt-launcher finds a device's KEP-5304 metadata entry only by the "
    "VMI's requestName, while the metadata API names a firstAvailable subrequest's entry "
    "<request>/<subrequest>: the VM never finds its device (pkg/dra/utils.go "
    "resolveDevice)", None, None, seen_by_signature=True)
# pkg/virt-launcher/virtwrap/device/hostdevice: a host device's deviceName is found in the
# PCI_RESOURCE_<NAME> env a device plugin sets; DRA (KEP-5004) sets none for it.
EXTENDED_RESOURCE_UNSEEN = KnownBug(
    EXTENDED_RESOURCE, "a host device naming an extended resource that a DeviceClass "
    "serves through DRA (KEP-5004) is looked up in PCI_RESOURCE_<NAME>, which only a device "
    "plugin sets: the launcher gets the device, virt-launcher never finds it", None, None,
    seen_by_signature=True)

# pkg/virt-handler/device-manager/device_plugin_base.go of 1.9.0 (seen here; the PR
# reports it on 1.8.0 too, whose code is not read yet): `done` and
# `deregistered` are made once per plugin object, and ListAndWatch closes `deregistered`
# unguarded, so a plugin stopped and started again (every kubelet restart) panics. The
# restarted virt-handler then discovers anew every permitted function bound to vfio-pci,
# a DRA-prepared one included (discoverPermittedHostPCIDevices).
DEVICE_PLUGIN_RESTART_PANIC = KnownBug(
    KUBELET_RESTART, "virt-handler panics (close of closed channel in DevicePluginBase."
    "ListAndWatch) when the kubelet restarts on a node where it serves host device "
    "plugins (on some restarts: a race); restarted, it adopts into its device plugin every "
    "permitted function then bound to vfio-pci, a DRA-prepared one included",
    "kubevirt/kubevirt#18622", None, needs_permitted_host_devices=True,
    seen_by_signature=True, racy=True)

# pkg/virt-handler/device-manager/common.go formatVFIOCdevDeviceSpecs of 1.9.0 (#18567,
# the backport of #18300): a device spec /dev/vfio/devices/<entry> for each entry of the
# function's sysfs vfio-dev folder, never checking the node is there. A kernel without
# CONFIG_VFIO_DEVICE_CDEV (Debian's 6.12, as the kernel reference records it, and so the
# hermetic nodes') shows vfio-dev/vfio<N> with no /dev node: containerd refuses the spec.
VFIO_CDEV_NODE_ASSUMED = KnownBug(
    DEVICE_PLUGIN_VM, "virt-handler's PCI device plugin hands the launcher /dev/vfio/devices/"
    "<vfioN> for each vfio-dev entry in sysfs, a node a kernel without "
    "CONFIG_VFIO_DEVICE_CDEV (Debian's) never makes: the launcher's container is never "
    "created (\"lstat /dev/vfio/devices/vfio0: no such file or directory\"); fixed on main "
    "by kubevirt/kubevirt#18905, in no release served here", "kubevirt/kubevirt#18895",
    None, needs_kernel_without_vfio_cdev=True, seen_by_signature=True)

RELEASES: tuple[Release, ...] = (
    Release(
        (1, 6, 0), ("v1.6.1",), "2507072117-b751e332", _GATES_UP_TO_1_8, frozenset(), (), None,
        "resource.kubernetes.io/pcieRoot", _POD_STATUS,
        (PERMITTED_HOST_DEVICES_BLOCK_DRA, UNLISTED_GPUS_PASS, EXTENDED_RESOURCE_UNSEEN),
        _PCIE_ROOT_AS_ADDRESS),
    Release(
        (1, 7, 0), ("v1.7.0",), "2510241540-9fd40b1c", _GATES_UP_TO_1_8, frozenset(), (), None,
        "resource.kubernetes.io/pcieRoot", _POD_STATUS,
        (PERMITTED_HOST_DEVICES_BLOCK_DRA, UNLISTED_GPUS_PASS, EXTENDED_RESOURCE_UNSEEN),
        _PCIE_ROOT_AS_ADDRESS),
    # 1.8.0-1.8.2 decode one JSON object whatever its apiVersion (a v1alpha1 shape).
    Release(
        (1, 8, 0), ("v1.8.1", "v1.8.2"), "2602190951-056f8f79", _GATES_UP_TO_1_8,
        _HOST_DEVICE_RULES_V1_8, (METADATA_V1ALPHA1,), PRE_KEP_ROOT, None, _PODCLAIMNAME,
        (PERMITTED_HOST_DEVICES_BLOCK_DRA, UNLISTED_GPUS_PASS, PRE_KEP_METADATA_PATH,
         CHECKSUM_AS_INT32, SUBREQUEST_METADATA_NAME, EXTENDED_RESOURCE_UNSEEN)),
    # pkg/dra/admitter/dra_admitter.go of 1.8.3: DRA and device-plugin GPUs in one VMI.
    Release(
        (1, 8, 3), ("v1.8.3",), "2602190951-056f8f79", _GATES_UP_TO_1_8,
        _HOST_DEVICE_RULES_V1_8_3, (METADATA_V1ALPHA1,), KEP_5304_ROOT, None, _METADATA_DIR,
        (PERMITTED_HOST_DEVICES_BLOCK_DRA, UNLISTED_GPUS_PASS, CHECKSUM_AS_INT32,
         SUBREQUEST_METADATA_NAME, EXTENDED_RESOURCE_UNSEEN)),
    Release(
        (1, 8, 4), ("v1.8.4",), "2602190951-056f8f79", _GATES_UP_TO_1_8,
        _HOST_DEVICE_RULES_V1_8_3, (METADATA_V1ALPHA1,), KEP_5304_ROOT, None, _METADATA_DIR,
        (PERMITTED_HOST_DEVICES_BLOCK_DRA, UNLISTED_GPUS_PASS, SUBREQUEST_METADATA_NAME,
         EXTENDED_RESOURCE_UNSEEN)),
    Release(
        (1, 9, 0), ("v1.9.0",), "2606300938-ede497bd",
        {**_GATES_UP_TO_1_8, "HostDevicesWithDRA": _BETA_ON, "GPUsWithDRA": _BETA_ON,
         "NetworkDevicesWithDRA": _ALPHA_OFF},
        # pkg/dra/admitter/dra_admitter.go validateResourceClaims: DNS-label claim names,
        # and an entry names exactly one of a claim and a template
        _HOST_DEVICE_RULES_V1_8_3 | {"claim-name-not-dns-label", "claim-and-template-both-set",
                                    "claim-and-template-both-missing"},
        (METADATA_V1ALPHA1,), KEP_5304_ROOT, None, _METADATA_DIR,
        (SUBREQUEST_METADATA_NAME, EXTENDED_RESOURCE_UNSEEN, DEVICE_PLUGIN_RESTART_PANIC,
         VFIO_CDEV_NODE_ASSUMED)),
)
OLDEST = RELEASES[0].since


def release_for(version: tuple[int, ...] | None) -> Release | None:
    """The facts of the release (a patch release, or a minor's first); a release newer
    than this table knows reads as the newest; None before DRA (v1.6)."""
    if version is None:
        return None
    padded = (*version, 0, 0)[:3]
    if padded < OLDEST:
        return None
    return [r for r in RELEASES if r.since <= padded][-1]
