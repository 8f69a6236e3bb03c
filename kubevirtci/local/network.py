"""The cluster network of the hermetic cluster, in network namespaces it creates and
removes, as kind's nodes sit on a Docker network: a switch namespace holds the bridge
and the control plane; each node namespace has one veth onto it, its pod bridge (made by
the CNI bridge plugin) and kube-proxy's rules. The host's interfaces, routes and
iptables are never touched: every command names a namespace."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path

from core.commands import QUIET, output
from core.timeouts import Timeout

NETNS_DIR = Path("/run/netns")
BRIDGE_NETFILTER = Path("/proc/sys/net/bridge")
CLUSTER_NETNS = "kdc-cluster"
BRIDGE = "kdc0"
NODE_SUBNET = ipaddress.ip_network("172.30.0.0/24")
CONTROL_PLANE_IP = str(NODE_SUBNET.network_address + 1)
POD_SUPERNET = "10.244.0.0/16"
SERVICE_CIDR = "10.96.0.0/16"
KUBERNETES_SERVICE_IP = "10.96.0.1"
APISERVER_PORT = 6443


@dataclass(frozen=True)
class NodeAddress:
    name: str  # node name, kubevirtci style: node01, node02, ...
    index: int  # from 1

    @property
    def netns(self) -> str:
        return f"kdc-{self.name}"

    @property
    def ip(self) -> str:
        return str(NODE_SUBNET.network_address + 10 + self.index)

    @property
    def pod_cidr(self) -> str:
        return f"10.244.{self.index}.0/24"

    @property
    def veth(self) -> str:
        return f"veth-{self.name}"


def node_addresses(count: int) -> list[NodeAddress]:
    return [NodeAddress(f"node{i:02d}", i) for i in range(1, count + 1)]


def netns_path(name: str) -> Path:
    return NETNS_DIR / name


def _ip(netns: str | None, *args: str) -> None:
    output(["ip", *(["-n", netns] if netns else []), *args], Timeout.HOST_SETUP)


def _sysctl(netns: str, key: str, value: str) -> None:
    path = "/proc/sys/" + key.replace(".", "/")
    output(["nsenter", f"--net={netns_path(netns)}", "sh", "-c", f"echo {value} > {path}"],
           Timeout.HOST_SETUP, f"sysctl {key}={value} in {netns}")


def load_bridge_netfilter() -> None:
    """Bridged pod traffic through iptables (kube-proxy's Service rules) needs the
    kernel's br_netfilter, which a fresh host has not loaded (kubeadm's preflight asks
    for it too); loading it is what makes ``net.bridge.*`` exist."""
    if not BRIDGE_NETFILTER.exists():
        output(["modprobe", "br_netfilter"], Timeout.HOST_SETUP,
               "load the kernel module br_netfilter (`modprobe br_netfilter`, package kmod)")


def create(nodes: list[NodeAddress]) -> None:
    """The switch with the control plane's address, and every node wired onto it with
    routes to every other node's pods."""
    prefix = NODE_SUBNET.prefixlen
    load_bridge_netfilter()
    _ip(None, "netns", "add", CLUSTER_NETNS)
    _ip(CLUSTER_NETNS, "link", "set", "lo", "up")
    _ip(CLUSTER_NETNS, "link", "add", BRIDGE, "type", "bridge")
    _ip(CLUSTER_NETNS, "addr", "add", f"{CONTROL_PLANE_IP}/{prefix}", "dev", BRIDGE)
    _ip(CLUSTER_NETNS, "link", "set", BRIDGE, "up")
    for node in nodes:
        _ip(None, "netns", "add", node.netns)
        _ip(CLUSTER_NETNS, "link", "add", node.veth, "type", "veth", "peer", "name", "eth0",
            "netns", node.netns)
        _ip(CLUSTER_NETNS, "link", "set", node.veth, "master", BRIDGE, "up")
        _ip(node.netns, "link", "set", "lo", "up")
        _ip(node.netns, "addr", "add", f"{node.ip}/{prefix}", "dev", "eth0")
        _ip(node.netns, "link", "set", "eth0", "up")
        _ip(node.netns, "route", "add", "default", "via", CONTROL_PLANE_IP)
        _ip(CLUSTER_NETNS, "route", "add", node.pod_cidr, "via", node.ip)
        # A node routes its pods' traffic, and service traffic between pods on one pod
        # bridge must pass kube-proxy's rules, as on any kubeadm node.
        _sysctl(node.netns, "net.ipv4.ip_forward", "1")
        _sysctl(node.netns, "net.bridge.bridge-nf-call-iptables", "1")
    for node in nodes:
        for other in nodes:
            if other != node:
                _ip(node.netns, "route", "add", other.pod_cidr, "via", other.ip)


def exists() -> bool:
    return netns_path(CLUSTER_NETNS).exists()


def remove(nodes: list[NodeAddress]) -> list[str]:
    """Delete the namespaces (their interfaces, routes and rules go with them)."""
    names = [n.netns for n in nodes] + [CLUSTER_NETNS]
    names += [p.name for p in NETNS_DIR.glob("kdc-node*") if p.name not in names]
    removed = []
    for name in names:
        if netns_path(name).exists():
            QUIET.run(["ip", "netns", "del", name], Timeout.HOST_SETUP)
            removed.append(f"network namespace {name}")
    return removed
