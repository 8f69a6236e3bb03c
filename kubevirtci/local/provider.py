"""The ``local`` provider: the hermetic cluster of this package. Real control plane,
kubelet, kube-proxy and containerd with CDI on nodes that are machines of their own; the
NVMe hardware is EMULATED. KubeVirt is the real one, built here from its module, with
virt-handler on every node and VMs under QEMU TCG; host devices reach them through an
EMULATED VFIO hop in front of QEMU."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from core.errors import SuiteUsageError
from core.profile import GuestImage
from kubevirtci.capabilities import Capabilities, Capability
from kubevirtci.kubevirt_install import supports_virt_template_switch
from kubevirtci.local import guest as local_guest
from kubevirtci.local import kubevirt as local_kubevirt
from kubevirtci.local.cluster import LocalCluster
from kubevirtci.provider import BIND_DEVICE_PLUGIN_NVME, Node, Provider

EMULATION_NOTE = (
    "NVMe controllers are EMULATED on the hermetic cluster: each node's /sys/bus/pci, "
    "/sys/devices/pci0000:00 and /sys/kernel/iommu_groups are a tree of its own "
    "(1b36:0010, serial nvme-<i>), /dev/vfio nodes carry /dev/null's numbers and a kernel "
    "stand-in binds drivers (driver/emulation); this host has no PCI bus, IOMMU or VFIO"
)
NO_KUBEVIRT = (
    "KubeVirt is not installed (--without-kubevirt); run without it to deploy KubeVirt's "
    "control plane here, or use --provider kubevirtci or --provider existing"
)
VFIO_HOP_NOTE = (
    "The VFIO hop is EMULATED: libvirt, KubeVirt and QEMU are real and check the emulated "
    "function as on hardware (sysfs, IOMMU group, vfio-pci, /dev/vfio, locked memory); "
    "where QEMU would open the function through VFIO, a front on its PATH "
    "(/usr/local/bin/qemu-system-x86_64, driver/cmd/emulated-vfio-qemu) gives the guest "
    "QEMU's own NVMe controller with the function's serial and persistent media"
)
TCG_NOTE = ("KubeVirt runs QEMU with TCG (developerConfiguration.useEmulation): this "
            "host's KVM cannot boot a stock kernel and no node has /dev/kvm")


class LocalProvider(Provider):
    name = "local"
    emulated_devices = (EMULATION_NOTE,)

    def __init__(self, artifacts_dir: Path, keep_cluster: bool = False,
                 cluster: LocalCluster | None = None, kubevirt_version: str | None = None
                 ) -> None:
        """``kubevirt_version``: the KubeVirt to build and deploy here; None for none."""
        self.cluster = cluster or LocalCluster()
        self.artifacts_dir = artifacts_dir
        self.keep_cluster = keep_cluster
        self.started_here = False
        self.installs_kubevirt = kubevirt_version is not None
        self.kubevirt_version = kubevirt_version
        if kubevirt_version is not None:
            self.emulated_devices = (EMULATION_NOTE, VFIO_HOP_NOTE)
            self.emulated = (TCG_NOTE, *local_kubevirt.build_notes(kubevirt_version))

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
        if self.installs_kubevirt:
            # Running VMs and the device plugin's NVMe are discovered; the guest is this
            # provider's own, a shell on the console; host devices pass the EMULATED hop.
            caps.grant(Capability.GUEST_ACCESS)
            caps.grant(Capability.HOST_DEVICE_VMS)
        else:
            for cap in (Capability.KUBEVIRT, Capability.KUBEVIRT_DRA_GATES,
                        Capability.RUNNING_VMS, Capability.GUEST_ACCESS,
                        Capability.HOST_DEVICE_VMS, Capability.DEVICE_PLUGIN_NVME,
                        Capability.LAUNCHER_METADATA, Capability.KUBEVIRT_DEVICE_STATUS,
                        Capability.PERSISTENT_DRA_CLAIMS):
                caps.deny(cap, NO_KUBEVIRT)
        return caps

    def node(self, name: str) -> Node:
        return self.cluster.node(name)

    def prepare_device_plugin_devices(self, nodes: list[str]) -> None:
        """As on kubevirtci: one controller per node bound to vfio-pci for KubeVirt's PCI
        device plugin, through the (EMULATED) kernel's driver_override interface."""
        for node in nodes:
            self.node(node).run(["sh", "-c", BIND_DEVICE_PLUGIN_NVME])

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

    def guest(self) -> GuestImage | None:
        """Built here (kubevirtci/local/guest.py) and imported with KubeVirt's images."""
        return local_guest.guest() if self.installs_kubevirt else None

    def kubevirt_operator_manifest(self, version: str) -> list[dict[str, Any]]:
        """Built here from KubeVirt's module, its images imported into every node."""
        return local_kubevirt.prepare(self.cluster, version)

    def kubevirt_configuration(self, version: str) -> dict[str, Any]:
        config: dict[str, Any] = {"developerConfiguration": {"useEmulation": True}}
        if supports_virt_template_switch(version):
            # virt-template's images are not built from KubeVirt's module: leave it out.
            config["virtTemplateDeployment"] = {"enabled": False}
        return config

    def down(self) -> None:
        if self.keep_cluster or not self.started_here:
            return
        self.cluster.down()
