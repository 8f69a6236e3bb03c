"""Where the hermetic cluster keeps its state, and the ports it listens on (loopback)."""

from __future__ import annotations

import json
import os
import socket
from dataclasses import asdict, dataclass
from pathlib import Path

from kubevirtci.local.network import NodeAddress, node_addresses

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
class ClusterConfig:
    """Persisted in cluster.json so a reused cluster keeps its nodes and its API port."""

    nodes: list[str]  # kubevirtci's names: node01, node02, ...
    nvme: list[str]  # kubevirtci-style sizes, one controller each
    apiserver: int  # host loopback port published for users (see port_forward)
    numa_nodes: int = 0  # NUMA nodes of each node's EMULATED machine (0: none)

    @classmethod
    def new(cls, node_count: int, nvme: list[str], numa_nodes: int = 0) -> ClusterConfig:
        return cls(nodes=[n.name for n in node_addresses(node_count)], nvme=nvme,
                   apiserver=free_port(), numa_nodes=numa_nodes)

    def addresses(self) -> list[NodeAddress]:
        return node_addresses(len(self.nodes))

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=1))

    @classmethod
    def load(cls, path: Path) -> ClusterConfig:
        data = json.loads(path.read_text())
        required = {"nodes", "nvme", "apiserver"}
        # a cluster from before NUMA nodes has none
        if not required <= set(data) <= required | {"numa_nodes"}:
            raise ValueError(f"{path} is from another version of the hermetic cluster")
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
        """A node's own folder: its writable root layer, containerd's root, markers."""
        return self.root / "nodes" / name

    def node_file(self, name: str, path: str) -> Path:
        """Where a file of the node's root filesystem is written before the node starts."""
        return self.node(name) / "layer" / path.lstrip("/")

    def emulation(self, node: str) -> Path:
        """EMULATED hardware of a node: sysfs tree, /dev/vfio nodes, each function's state."""
        return self.root / "emulation" / node
