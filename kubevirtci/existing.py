"""Any cluster reachable by kubeconfig, or from inside one of its pods as the pod's
service account (Sonobuoy plugin mode). Nothing is brought up or torn down; what the
cluster can do is discovered from its API."""

from __future__ import annotations

from pathlib import Path

from kubevirtci.capabilities import Capabilities, Capability
from kubevirtci.provider import Node, NodeCommandFailed, Provider


class ExistingProvider(Provider):
    name = "existing"
    installs = False  # an existing cluster brings its own KubeVirt and driver

    def __init__(self, kubeconfig: Path | None) -> None:
        """``kubeconfig`` None: in the cluster, as the pod's service account."""
        self._kubeconfig = kubeconfig
        self.in_cluster = kubeconfig is None

    def up(self) -> None:
        """Nothing to bring up; reachability is checked when the session connects."""

    def kubeconfig(self) -> Path | None:
        return self._kubeconfig

    def declared_capabilities(self) -> Capabilities:
        caps = Capabilities()
        caps.deny(Capability.NODE_ACCESS,
                  "provider 'existing' has no node shell; use kubevirtci or local")
        caps.deny(Capability.DRIVER_DISRUPTION,
                  "provider 'existing': the suite does not roll or remove a driver it did not "
                  "install")
        caps.deny(Capability.KUBELET_RESTART,
                  "provider 'existing' cannot restart a node's kubelet; use kubevirtci or local")
        # Reached from a short-lived client pod on the node (fixtures/node_client.py).
        caps.grant(Capability.DRIVER_PLUGIN_SOCKET)
        caps.grant(Capability.GUEST_ACCESS)
        caps.grant(Capability.VFIO)  # a real cluster's hostdevs are real; KubeVirt checks them
        caps.grant(Capability.HOST_DEVICE_VMS)
        return caps

    def node(self, name: str) -> Node:
        raise NodeCommandFailed(f"provider 'existing' cannot run commands on node {name}")

    def load_images(self, images: list[str]) -> None:
        """Images of an existing cluster come from its registries; nothing to load."""

    def down(self) -> None:
        """The cluster is not ours to tear down."""
