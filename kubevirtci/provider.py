"""The small interface every cluster provider implements."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.commands import Stdin
from core.errors import SuiteUsageError
from core.profile import GuestImage
from core.timeouts import Timeout
from kubevirtci.capabilities import Capabilities

# The PCI vendor:device of the NVMe controllers that kubevirtci's --nvme and the hermetic
# cluster's emulation give nodes (QEMU's NVMe controller).
EMULATED_NVME_ID = "1b36:0010"
# The driver sanity suite's node-side client (driver/cmd/dra-sanity), built here; it runs
# in short-lived pods on the node whose plugin it drives.
SANITY_CLIENT_IMAGE = "localhost/kdc/dra-sanity:dev"
SUITE_IMAGE = "localhost/kdc/conformance:dev"  # the suite itself, for Sonobuoy plugin mode
# The controller every node sets aside for KubeVirt's PCI device plugin: the second
# --nvme controller (kubevirtci) or emulated controller (local).
DEVICE_PLUGIN_SERIAL = "nvme-1"
# NVMe controllers per node on the clusters the suite starts: one for KubeVirt's device
# plugin, two for DRA (a VM given two devices of one node, by one claim or two).
NVME_PER_NODE = 3
# Idempotent: binds that controller to vfio-pci unless already bound (the kernel's
# interface: driver_override, unbind, drivers_probe). KubeVirt's plugin only offers
# functions bound to vfio-pci, and the DRA driver leaves alone what others bound.
BIND_DEVICE_PLUGIN_NVME = (
    "for c in /sys/bus/pci/devices/*/nvme/nvme*; do "
    # the kernel pads the serial with spaces to the NVMe field's 20 characters
    f"[ \"$(tr -d ' ' < $c/serial)\" = {DEVICE_PLUGIN_SERIAL} ] || continue; "
    "bdf=$(basename $(dirname $(dirname $c))); "
    "echo vfio-pci > /sys/bus/pci/devices/$bdf/driver_override; "
    "echo $bdf > /sys/bus/pci/devices/$bdf/driver/unbind; "
    "echo $bdf > /sys/bus/pci/drivers_probe; done"
)


# For each function bound to vfio-pci (sysfs root $1): "cdev" where its vfio-dev device
# has its /dev/vfio/devices node, "no-cdev" where the kernel made none (no
# CONFIG_VFIO_DEVICE_CDEV).
VFIO_CDEV_PROBE = (
    'for d in "$1"/bus/pci/drivers/vfio-pci/*/vfio-dev/*; do [ -e "$d" ] || continue; '
    'if [ -e "/dev/vfio/devices/${d##*/}" ]; then echo cdev; else echo no-cdev; fi; done'
)


class NodeCommandFailed(AssertionError):
    """A command run on a node failed; the message names the node and the command."""


@dataclass(frozen=True)
class NodePaths:
    """Where a node keeps what the suite reads, as a command run on it sees them. Every
    provider's nodes use the standard paths; a profile's driver may say otherwise."""

    sysfs: str = "/sys"
    kubelet: str = "/var/lib/kubelet"
    cdi: tuple[str, ...] = ("/etc/cdi", "/var/run/cdi")


class Node(ABC):
    """One node of the cluster: its name, its paths, and a way to run a command on it
    (kind's ``nodes.Node``)."""

    name: str
    paths: NodePaths = NodePaths()

    @abstractmethod
    def run(self, argv: list[str], stdin: Stdin = None,
            timeout: Timeout = Timeout.NODE_COMMAND) -> str:
        """Run a command on the node and return its output; raise NodeCommandFailed."""

    def restart_kubelet(self) -> None:
        """Stop the node's kubelet and start it again (its pods go on running); returns
        once the new kubelet process runs. Capability KUBELET_RESTART says who can."""
        raise NodeCommandFailed(f"cannot restart the kubelet of node {self.name} here")


class Provider(ABC):
    """Infrastructure only, as kind's provider is: bring the cluster up and down, its
    kubeconfig, its nodes, loading an image, and the facts of its machines. Which
    KubeVirt runs on it is kubevirtci/kubevirt_source.py's business."""

    name: str
    # Parts of the cluster that stand in for hardware this host lacks; printed in every
    # report header. Empty on providers with real hardware.
    emulated: tuple[str, ...] = ()
    # Parts that only a run whose devices are the emulated NVMe controllers uses.
    emulated_devices: tuple[str, ...] = ()
    # Parts that only VMs use (printed where KubeVirt runs), and those only VMs given the
    # emulated NVMe controllers use.
    emulated_for_vms: tuple[str, ...] = ()
    emulated_device_vms: tuple[str, ...] = ()
    installs: bool = True  # the suite installs the profile's driver (and KubeVirt)
    in_cluster: bool = False  # reached as the pod's service account, not by kubeconfig
    pulls_public_images: bool = True  # nodes pull released images from public registries
    node_kvm: bool = True  # nodes offer KVM to VMs (else QEMU emulates the CPU: TCG)

    def emulated_parts(self, pci_vendor_device: str | None, vms: bool) -> tuple[str, ...]:
        """What a run of a profile with these devices uses that is emulated: the device
        notes only when the profile's devices are the emulated controllers, the VM notes
        only where VMs run."""
        nvme = pci_vendor_device == EMULATED_NVME_ID
        return (*(self.emulated_devices if nvme else ()),
                *(self.emulated_device_vms if nvme and vms else ()),
                *(self.emulated_for_vms if vms else ()), *self.emulated)

    def kubeconfig_hint(self) -> str:
        """The kubeconfig in use, for error messages; never raises."""
        if self.in_cluster:
            return "the pod's service account"
        try:
            return str(self.kubeconfig())
        except Exception:
            return f"the {self.name} provider's kubeconfig"

    def preflight(self) -> None:
        """What the provider needs from this machine, checked before any cluster work;
        raises SuiteUsageError naming what is missing and the fix."""
        return

    @abstractmethod
    def up(self) -> None:
        """Bring the cluster up (or check that it is reachable)."""

    @abstractmethod
    def kubeconfig(self) -> Path | None:
        """The kubeconfig; None only for a provider reached ``in_cluster``."""

    @abstractmethod
    def declared_capabilities(self) -> Capabilities:
        """Capabilities the provider itself grants or denies (node/guest access, VFIO)."""

    @abstractmethod
    def node(self, name: str) -> Node:
        """The named node (raises NodeCommandFailed where the provider has no node access)."""

    @abstractmethod
    def load_images(self, images: list[str]) -> None:
        """Make locally built images available to the cluster's nodes."""

    def load_image_archives(self, archives: list[Path]) -> None:
        """``kind load image-archive``: the images of these OCI archives onto every node."""
        raise SuiteUsageError(f"provider {self.name} cannot load image archives",
                              "push the images to a registry its nodes pull from")

    def emulated_vfio_front(self) -> Path | None:
        """The EMULATED VFIO hop a launcher image built here carries in front of QEMU
        (None: a provider whose nodes have real VFIO, or none)."""
        return None

    def tooling_env(self) -> dict[str, str] | None:
        """The environment under which KubeVirt's own cluster tooling (a tree's
        ``make cluster-sync``) reaches this cluster; None where it cannot."""
        return None

    def guest(self) -> GuestImage | None:
        """The guest this provider's VMs boot instead of the profile's (None: the
        profile's): a cluster that pulls from no registry brings its own."""
        return None

    def prepare_device_plugin_devices(self, nodes: list[str]) -> None:
        """Set devices aside for the device-plugin path (where the provider has them)."""
        return

    def node_image(self, image: str) -> str:
        """The name nodes pull an image by once ``load_images`` has loaded it."""
        return image

    def adapt_manifest(self, doc: dict[str, Any]) -> dict[str, Any]:
        """Fit a driver manifest to this provider (image location, node paths)."""
        return doc

    def collect_logs(self, dest: Path) -> list[Path]:
        """The cluster components' logs (kind's ``export logs``), the last part of each,
        written into ``dest``; a provider that cannot reach them writes none."""
        return []

    @abstractmethod
    def down(self) -> None: ...


def vfio_cdev_missing(nodes: list[Node]) -> bool | None:
    """Whether a node's kernel makes no /dev node for a VFIO function's vfio-dev device;
    None when no node has a function bound to vfio-pci to tell."""
    seen: set[str] = set()
    for node in nodes:
        seen.update(node.run(["sh", "-c", VFIO_CDEV_PROBE, "sh", node.paths.sysfs]).split())
    return "no-cdev" in seen if seen else None
