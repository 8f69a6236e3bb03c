"""Where the hermetic cluster keeps its state, and the ports it listens on (loopback)."""

from __future__ import annotations

import json
import os
import socket
from dataclasses import asdict, dataclass, field
from pathlib import Path

DEFAULT_STATE = Path(os.environ.get("KDC_CLUSTER_DIR", "/var/tmp/kdc-hermetic"))
LOOPBACK = "127.0.0.1"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        return s.connect_ex((LOOPBACK, port)) == 0


@dataclass
class NodePorts:
    kubelet: int
    healthz: int
    driver_ready: int


@dataclass
class ClusterConfig:
    """Persisted in cluster.json so a reused cluster keeps its ports and nodes."""

    nodes: list[str]
    nvme: list[str]  # kubevirtci-style sizes, one controller each
    etcd: int
    etcd_peer: int
    apiserver: int
    node_ports: dict[str, NodePorts] = field(default_factory=dict)

    @classmethod
    def new(cls, node_count: int, nvme: list[str]) -> ClusterConfig:
        # Each node is named by its own loopback address (see LocalCluster._start_node).
        nodes = [f"127.0.2.{i + 1}" for i in range(node_count)]
        return cls(
            nodes=nodes, nvme=nvme, etcd=free_port(), etcd_peer=free_port(),
            apiserver=free_port(),
            node_ports={n: NodePorts(free_port(), free_port(), free_port()) for n in nodes},
        )

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=1))

    @classmethod
    def load(cls, path: Path) -> ClusterConfig:
        data = json.loads(path.read_text())
        data["node_ports"] = {k: NodePorts(**v) for k, v in data["node_ports"].items()}
        return cls(**data)


class Layout:
    def __init__(self, root: Path = DEFAULT_STATE) -> None:
        self.root = root

    @property
    def config_file(self) -> Path:
        return self.root / "cluster.json"

    @property
    def pki(self) -> Path:
        return self.root / "pki"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def pids(self) -> Path:
        return self.root / "pids"

    @property
    def etcd_data(self) -> Path:
        return self.root / "etcd"

    @property
    def kubeconfigs(self) -> Path:
        return self.root / "kubeconfigs"

    @property
    def admin_kubeconfig(self) -> Path:
        return self.kubeconfigs / "admin.kubeconfig"

    @property
    def images(self) -> Path:
        return self.root / "images"

    def node(self, name: str) -> Path:
        return self.root / "nodes" / name

    def containerd_socket(self, node: str) -> Path:
        return self.node(node) / "containerd" / "containerd.sock"

    def kubelet_dir(self, node: str) -> Path:
        return self.node(node) / "kubelet"

    def cdi_dir(self, node: str) -> Path:
        return self.node(node) / "cdi"

    def emulation(self, node: str) -> Path:
        """EMULATED hardware of a node: sysfs tree, /dev/vfio nodes, backing images."""
        return self.root / "emulation" / node

    def runc_root(self, node: str) -> Path:
        return self.node(node) / "runc"
