"""The ``local`` provider: the hermetic cluster of this package. Real control plane,
kubelet, kube-proxy and containerd with CDI on nodes that are machines of their own; the
NVMe hardware is EMULATED; no KVM, so no KubeVirt yet."""

from __future__ import annotations

from pathlib import Path

from core.errors import SuiteUsageError
from kubevirtci.capabilities import Capabilities, Capability
from kubevirtci.local.cluster import LocalCluster
from kubevirtci.provider import Node, Provider

EMULATION_NOTE = (
    "NVMe controllers are EMULATED on the hermetic cluster: each node's /sys/bus/pci, "
    "/sys/devices/pci0000:00 and /sys/kernel/iommu_groups are a tree of its own "
    "(1b36:0010, serial nvme-<i>), /dev/vfio nodes carry /dev/null's numbers and a kernel "
    "stand-in binds drivers (driver/emulation); this host has no PCI bus, IOMMU or VFIO"
)
NO_KUBEVIRT = (
    "the hermetic cluster cannot run KubeVirt (no usable KVM or VFIO on this host); run "
    "KubeVirt suites with --provider kubevirtci or --provider existing"
)


class LocalProvider(Provider):
    name = "local"
    emulated = (EMULATION_NOTE,)
    installs_kubevirt = False

    def __init__(self, artifacts_dir: Path, keep_cluster: bool = False,
                 cluster: LocalCluster | None = None) -> None:
        self.cluster = cluster or LocalCluster()
        self.artifacts_dir = artifacts_dir
        self.keep_cluster = keep_cluster
        self.started_here = False

    def up(self) -> None:
        self.started_here = not self.cluster.running()
        self.cluster.up()

    def kubeconfig(self) -> Path:
        return self.cluster.layout.admin_kubeconfig

    def declared_capabilities(self) -> Capabilities:
        caps = Capabilities()
        caps.grant(Capability.NODE_ACCESS)
        caps.grant(Capability.DRIVER_PLUGIN_SOCKET)
        caps.deny(Capability.VFIO, "PCI is emulated here: no IOMMU or VFIO on this host")
        for cap in (Capability.KUBEVIRT, Capability.KUBEVIRT_DRA_GATES,
                    Capability.LAUNCHER_METADATA, Capability.KUBEVIRT_DEVICE_STATUS,
                    Capability.PERSISTENT_DRA_CLAIMS, Capability.GUEST_ACCESS,
                    Capability.DEVICE_PLUGIN_NVME):
            caps.deny(cap, NO_KUBEVIRT)
        return caps

    def node(self, name: str) -> Node:
        return self.cluster.node(name)

    def load_images(self, images: list[str]) -> None:
        """Build the images this project knows and import them into every node; any
        other image must have been loaded from its archive (``kdc-cluster load-image``)."""
        for image in images:
            if self.cluster.load_known_image(image):
                continue
            missing = [n.name for n in self.cluster.nodes() if image not in n.image_digests()]
            if missing:
                raise SuiteUsageError(
                    f"image {image} is not on nodes {', '.join(missing)} (the hermetic "
                    "cluster pulls from no registry)",
                    "`kdc-cluster load-image ARCHIVE` with the image's OCI or `docker save` "
                    "archive",
                )

    def down(self) -> None:
        if self.keep_cluster or not self.started_here:
            return
        self.cluster.down()
