"""The ``local`` provider: the hermetic cluster of this package. Real control plane,
kubelet, kube-proxy and containerd with CDI on nodes that are machines of their own; the
NVMe hardware is EMULATED. KubeVirt is the real one, built here from its module, with
virt-handler on every node and VMs under QEMU TCG; host devices reach them through an
EMULATED VFIO hop in front of QEMU."""

from __future__ import annotations

from pathlib import Path

from core.errors import SuiteUsageError
from core.profile import GuestImage
from kubevirtci.capabilities import Capabilities, Capability
from kubevirtci.local import guest as local_guest
from kubevirtci.local.cluster import LocalCluster
from kubevirtci.provider import BIND_DEVICE_PLUGIN_NVME, Node, Provider

COMPONENT_LOG_BYTES = 1 << 20  # the last MiB of each: the time around a failure
EMULATION_NOTE = (
    "NVMe controllers are EMULATED on the hermetic cluster: each node's kernel view of them "
    "(the PCI function, its IOMMU group, the nvme, block and vfio classes, /sys/dev, and "
    "/dev nodes) is what a real kernel showed in each driver state, as recorded "
    "(driver/emulation/sysfs/reference, tox -e kernel-reference) with each controller's "
    "identity (1b36:0010, serial nvme-<i>); device nodes carry numbers no driver of this "
    "host answers to, and a kernel stand-in binds drivers (driver/emulation); this host has "
    "no PCI bus, IOMMU or VFIO"
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
    emulated_device_vms = (VFIO_HOP_NOTE,)
    emulated_for_vms = (TCG_NOTE,)
    pulls_public_images = False  # the hermetic cluster pulls from no registry
    node_kvm = False  # this host's KVM cannot boot a stock kernel: no node has /dev/kvm

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

    def collect_logs(self, dest: Path) -> list[Path]:
        """Every component's log: etcd, the apiserver, controller-manager and scheduler,
        and each node's init, containerd, EMULATED PCI plugin, kubelet and kube-proxy."""
        return self.cluster.supervisor.export_logs(dest, COMPONENT_LOG_BYTES)

    def declared_capabilities(self) -> Capabilities:
        """Running VMs and the device plugin's NVMe are discovered; the guest is this
        provider's own, a shell on the console; host devices pass the EMULATED hop."""
        caps = Capabilities()
        for cap in (Capability.NODE_ACCESS, Capability.DRIVER_PLUGIN_SOCKET,
                    Capability.GUEST_ACCESS, Capability.HOST_DEVICE_VMS,
                    Capability.KUBELET_RESTART, Capability.DRIVER_DISRUPTION):
            caps.grant(cap)
        caps.deny(Capability.VFIO, "PCI is emulated here: no IOMMU or VFIO on this host")
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
            if image == local_guest.image_name():
                self.cluster.load_image_archive(self.cluster.image_archive(
                    image.rsplit("/", 1)[-1].replace(":", "-"),
                    lambda name=image: local_guest.guest_image(name)))
                continue
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

    def load_image_archives(self, archives: list[Path]) -> None:
        for archive in archives:
            self.cluster.load_image_archive(archive)

    def emulated_vfio_front(self) -> Path:
        return self.cluster.bins["emulated-vfio-qemu"]

    def guest(self) -> GuestImage:
        """Built here (kubevirtci/local/guest.py) and loaded with ``load_images``."""
        return local_guest.guest()

    def down(self) -> None:
        if self.keep_cluster or not self.started_here:
            return
        self.cluster.down()
