"""The ``local`` provider: the hermetic cluster of this package. Real control plane,
kubelet and containerd with CDI; the NVMe hardware is EMULATED; no KVM, so no KubeVirt."""

from __future__ import annotations

import copy
import subprocess
from pathlib import Path
from typing import Any

from kubevirtci.capabilities import Capabilities, Capability
from kubevirtci.local.cluster import DRIVER_REPOSITORY, LocalCluster
from kubevirtci.local.layout import ClusterConfig
from kubevirtci.provider import GuestAccess, Provider

EMULATION_NOTE = (
    "NVMe controllers are EMULATED on the hermetic cluster: a sysfs tree (1b36:0010, "
    "serial nvme-<i>), /dev/vfio nodes with /dev/null's numbers and a kernel stand-in for "
    "driver binding (driver/emulation); this host has no PCI bus, IOMMU or VFIO"
)
NO_KUBEVIRT = (
    "the hermetic cluster cannot run KubeVirt (no usable KVM or VFIO on this host); run "
    "KubeVirt suites with --provider kubevirtci or --provider existing"
)


class NodeCommandFailed(AssertionError):
    pass


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

    def node_exec(self, node: str, argv: list[str]) -> str:
        """Nodes of the hermetic cluster are this host."""
        result = subprocess.run(argv, capture_output=True, text=True)
        if result.returncode != 0:
            raise NodeCommandFailed(
                f"on {node}: `{' '.join(argv)}` exited {result.returncode}: "
                f"{result.stderr.strip()[-800:]}"
            )
        return result.stdout

    def sysfs_root(self, node: str) -> str:
        return str(self.cluster.layout.emulation(node) / "sys")

    def kubelet_dir(self, node: str) -> str:
        return str(self.cluster.layout.kubelet_dir(node))

    def cdi_dirs(self, node: str) -> list[str]:
        return [str(self.cluster.layout.cdi_dir(node))]

    def sanity_client(self, node: str) -> list[str]:
        if "dra-sanity" not in self.cluster.bins:
            self.cluster.build()
        return [str(self.cluster.bins["dra-sanity"])]

    def guest_access(self) -> GuestAccess | None:
        return None

    def load_images(self, images: list[str]) -> None:
        """Images are built and imported into every node's containerd by ``up``."""

    def adapt_manifest(self, doc: dict[str, Any]) -> dict[str, Any]:
        if doc.get("kind") != "DaemonSet":
            return doc
        return adapt_daemonset(doc, self.cluster.layout.root,
                               ClusterConfig.load(self.cluster.layout.config_file).apiserver,
                               self.cluster.driver_image())

    def down(self) -> None:
        if self.keep_cluster or not self.started_here:
            return
        self.cluster.down()


def adapt_daemonset(doc: dict[str, Any], state_root: Path, apiserver_port: int,
                    driver_image: str) -> dict[str, Any]:
    """Point a DRA driver DaemonSet at the hermetic cluster: every node is this host, so
    per-node paths carry the node name (``$(NODE_NAME)``), the plugin talks to the API
    server on loopback, and images come from the local import only."""
    out = copy.deepcopy(doc)
    pod = out["spec"]["template"]["spec"]
    pod["hostNetwork"] = True
    pod["dnsPolicy"] = "ClusterFirstWithHostNet"
    root = str(state_root)
    node_dir = f"{root}/nodes/$(NODE_NAME)"
    emulation = f"{root}/emulation/$(NODE_NAME)"
    per_node = {
        "--sysfs-root": f"{emulation}/sys",
        "--dev-root": f"{emulation}/dev",
        "--cdi-dir": f"{node_dir}/cdi",
        "--kubelet-dir": f"{node_dir}/kubelet",
    }
    for container in pod["containers"]:
        if container["image"].startswith(DRIVER_REPOSITORY + ":"):
            container["image"] = driver_image
        container["imagePullPolicy"] = "Never"
        args = [a for a in container.get("args", []) if a.split("=", 1)[0] not in per_node]
        container["args"] = [*args, *(f"{flag}={value}" for flag, value in per_node.items())]
        env = [e for e in container.get("env", [])
               if e["name"] not in ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT")]
        container["env"] = [*env,
                            {"name": "KUBERNETES_SERVICE_HOST", "value": "127.0.0.1"},
                            {"name": "KUBERNETES_SERVICE_PORT", "value": str(apiserver_port)}]
        keep = {"host-proc", "ready"}
        container["volumeMounts"] = [
            *(m for m in container.get("volumeMounts", []) if m["name"] in keep),
            {"name": "hermetic-state", "mountPath": root},
        ]
    pod["volumes"] = [
        *(v for v in pod.get("volumes", []) if v["name"] in ("host-proc", "ready")),
        {"name": "hermetic-state", "hostPath": {"path": root}},
    ]
    return out
