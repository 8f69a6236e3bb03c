"""The small interface every cluster provider implements."""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, Protocol

from kubevirtci.capabilities import Capabilities


class GuestAccess(Protocol):
    """Run a shell command inside a running VMI's guest and return its output."""

    def run(self, namespace: str, vmi: str, command: str) -> str: ...


class Provider(ABC):
    name: str
    # Parts of the cluster that stand in for hardware this host lacks; printed in every
    # report header. Empty on providers with real hardware.
    emulated: tuple[str, ...] = ()
    installs: bool = True  # the suite installs the profile's driver (and KubeVirt)
    installs_kubevirt: bool = True

    def kubeconfig_hint(self) -> str:
        """The kubeconfig in use, for error messages; never raises."""
        try:
            return str(self.kubeconfig())
        except Exception:
            return f"the {self.name} provider's kubeconfig"

    @abstractmethod
    def up(self) -> None:
        """Bring the cluster up (or check that it is reachable)."""

    @abstractmethod
    def kubeconfig(self) -> Path: ...

    @abstractmethod
    def declared_capabilities(self) -> Capabilities:
        """Capabilities the provider itself grants or denies (node/guest access, VFIO)."""

    @abstractmethod
    def node_exec(self, node: str, argv: list[str]) -> str:
        """Run a command on a node and return its output."""

    @abstractmethod
    def guest_access(self) -> GuestAccess | None: ...

    @abstractmethod
    def load_images(self, images: list[str]) -> None:
        """Make locally built images available to the cluster's nodes."""

    def sysfs_root(self, node: str) -> str:
        """Where a node's sysfs is, as node_exec sees it."""
        return "/sys"

    def kubelet_dir(self, node: str) -> str:
        """The node's kubelet root dir, as node_exec sees it."""
        return "/var/lib/kubelet"

    def cdi_dirs(self, node: str) -> list[str]:
        """Where the node's container runtime reads CDI specs."""
        return ["/etc/cdi", "/var/run/cdi"]

    def sanity_client(self, node: str) -> list[str]:
        """argv prefix running the dra-sanity client on the node."""
        return ["dra-sanity"]

    def prepare_device_plugin_devices(self, nodes: list[str]) -> None:
        """Set devices aside for the device-plugin path (where the provider has them)."""
        return

    def adapt_manifest(self, doc: dict[str, Any]) -> dict[str, Any]:
        """Fit a driver manifest to this provider (image location, node paths)."""
        return doc

    @abstractmethod
    def down(self) -> None: ...
