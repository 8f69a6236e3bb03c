"""What a hermetic node's root filesystem holds before it boots, at the paths a kubeadm or
kind node uses: containerd's, the kubelet's and kube-proxy's configuration, the CNI
network, certificates under /etc/kubernetes/pki and the cluster's programs in
/usr/local/bin."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from kubevirtci.local.network import (
    APISERVER_PORT,
    CONTROL_PLANE_IP,
    POD_SUPERNET,
    NodeAddress,
)
from kubevirtci.local.pki import write_atomically

PAUSE_IMAGE = "localhost/kdc/pause:kdc-1"
CONTAINERD_SOCKET = "/run/containerd/containerd.sock"
PKI = "/etc/kubernetes/pki"
CLUSTER_DOMAIN = "cluster.local"
# Programs of the cluster a node runs or offers on its PATH (kind's node image has the
# same in /usr/local/bin).
NODE_PROGRAMS = ("kubelet", "kube-proxy", "containerd", "containerd-shim-runc-v2", "ctr")
# EMULATED: shows containers the node's emulated PCI tree (driver/cmd/nri-emulated-pci).
# A node service that connects to containerd's NRI socket, not a plugin containerd
# starts: containerd kills a plugin it starts once the plugin misses a request timeout,
# and with it the memlock agent of every running VM.
EMULATED_PCI_NRI_PLUGIN = "nri-emulated-pci"
# Written by the plugin once containerd has registered it (and again after a reconnect);
# registeredMarker in driver/cmd/nri-emulated-pci.
EMULATED_PCI_NRI_REGISTERED = "/run/kdc-emulated-pci/registered"


@dataclass(frozen=True)
class NodeCredentials:
    ca: Path
    kubelet_client: tuple[Path, Path]
    kubelet_serving: tuple[Path, Path]
    kube_proxy_client: tuple[Path, Path]


def kubeconfig(server: str, ca: str, cert: str, key: str, user: str) -> dict[str, object]:
    return {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "kdc-hermetic",
                      "cluster": {"server": server, "certificate-authority": ca}}],
        "users": [{"name": user, "user": {"client-certificate": cert, "client-key": key}}],
        "contexts": [{"name": "kdc-hermetic",
                      "context": {"cluster": "kdc-hermetic", "user": user}}],
        "current-context": "kdc-hermetic",
    }


def containerd_config() -> str:
    return f"""version = 3
disabled_plugins = ["io.containerd.internal.v1.opt"]

[grpc]
  address = "{CONTAINERD_SOCKET}"

# NRI takes plugins at /var/run/nri/nri.sock: the EMULATED PCI tree for containers.
# A plugin that misses the request timeout is closed (it reconnects); 2 s (the default)
# is missed on two cores busy with TCG guests.
[plugins.'io.containerd.nri.v1.nri']
  disable = false
  plugin_request_timeout = "15s"

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "{PAUSE_IMAGE}"

[plugins.'io.containerd.cri.v1.runtime']
  enable_cdi = true
  cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]
  # This host forbids lowering oom_score_adj (the kubelet asks -998 for sandboxes).
  restrict_oom_score_adj = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = "/usr/sbin/runc"
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = "/etc/cni/net.d"
"""


def cni_config(node: NodeAddress) -> dict[str, object]:
    return {
        "cniVersion": "1.0.0", "name": "kdc",
        "plugins": [
            {"type": "bridge", "bridge": "cni0", "isGateway": True, "ipMasq": False,
             "hairpinMode": True,
             "ipam": {"type": "host-local", "ranges": [[{"subnet": node.pod_cidr}]],
                      "routes": [{"dst": "0.0.0.0/0"}]}},
            {"type": "portmap", "capabilities": {"portMappings": True}},
            {"type": "loopback"},
        ],
    }


def kubelet_config(node: NodeAddress) -> dict[str, object]:
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
        "readOnlyPort": 0, "healthzBindAddress": "127.0.0.1",
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                           "x509": {"clientCAFile": f"{PKI}/ca.crt"}},
        "authorization": {"mode": "Webhook"},
        "tlsCertFile": "/var/lib/kubelet/pki/kubelet.crt",
        "tlsPrivateKeyFile": "/var/lib/kubelet/pki/kubelet.key",
        "cgroupDriver": "cgroupfs",
        # This host runs cgroup v1 (hybrid); kubelets from 1.35 refuse it unless told.
        # The setting is inert on cgroup v2 hosts.
        "failCgroupV1": False,
        "cgroupsPerQOS": False, "enforceNodeAllocatable": [],
        "failSwapOn": False,
        "containerRuntimeEndpoint": f"unix://{CONTAINERD_SOCKET}",
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%",
                         "imagefs.available": "1%", "nodefs.inodesFree": "1%"},
        "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
        "localStorageCapacityIsolation": True,
        "maxPods": 60, "registerNode": True, "serializeImagePulls": False,
        "resolvConf": "", "clusterDomain": CLUSTER_DOMAIN,
        "fileCheckFrequency": "5s", "syncFrequency": "10s",
        "nodeStatusUpdateFrequency": "5s",
    }


def kube_proxy_config(node: NodeAddress) -> dict[str, object]:
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": "/etc/kubernetes/kube-proxy.conf"},
        "mode": "iptables", "clusterCIDR": POD_SUPERNET, "hostnameOverride": node.name,
        "bindAddress": node.ip, "metricsBindAddress": "127.0.0.1:10249",
        # A node's network namespace cannot size the host's conntrack table.
        "conntrack": {"maxPerCore": 0},
    }


def kubelet_args(node: NodeAddress) -> list[str]:
    return ["kubelet", "--config=/var/lib/kubelet/config.yaml",
            "--kubeconfig=/etc/kubernetes/kubelet.conf", f"--hostname-override={node.name}",
            f"--node-ip={node.ip}"]


def write_node_credentials(file_of: Callable[[str], Path], node: NodeAddress,
                           credentials: NodeCredentials) -> None:
    """The node's copies of its certificates and keys, and the kubeconfigs naming them
    (``file_of`` maps a node path to the host path of that file). Written again when
    they are issued afresh: the node cannot see the host's files."""
    def copy(path: str, source: Path, mode: int = 0o644) -> None:
        _put(file_of(path), source.read_bytes(), mode)

    api = f"https://{CONTROL_PLANE_IP}:{APISERVER_PORT}"
    copy(f"{PKI}/ca.crt", credentials.ca)
    copy(f"{PKI}/kubelet-client.crt", credentials.kubelet_client[0])
    copy(f"{PKI}/kubelet-client.key", credentials.kubelet_client[1], 0o600)
    copy(f"{PKI}/kube-proxy.crt", credentials.kube_proxy_client[0])
    copy(f"{PKI}/kube-proxy.key", credentials.kube_proxy_client[1], 0o600)
    copy("/var/lib/kubelet/pki/kubelet.crt", credentials.kubelet_serving[0])
    copy("/var/lib/kubelet/pki/kubelet.key", credentials.kubelet_serving[1], 0o600)
    _put(file_of("/etc/kubernetes/kubelet.conf"), yaml.safe_dump(kubeconfig(
        api, f"{PKI}/ca.crt", f"{PKI}/kubelet-client.crt", f"{PKI}/kubelet-client.key",
        f"system:node:{node.name}")), 0o600)
    _put(file_of("/etc/kubernetes/kube-proxy.conf"), yaml.safe_dump(kubeconfig(
        api, f"{PKI}/ca.crt", f"{PKI}/kube-proxy.crt", f"{PKI}/kube-proxy.key",
        "system:kube-proxy")), 0o600)


def write_node_root(file_of: Callable[[str], Path], node: NodeAddress,
                    credentials: NodeCredentials, programs: dict[str, Path]) -> None:
    """Write the node's files into its root layer (``file_of`` maps a node path to the
    host path of that file in the layer)."""
    def put(path: str, content: str) -> None:
        _put(file_of(path), content, 0o644)

    write_node_credentials(file_of, node, credentials)
    put("/var/lib/kubelet/config.yaml", yaml.safe_dump(kubelet_config(node)))
    put("/etc/kubernetes/kube-proxy.yaml", yaml.safe_dump(kube_proxy_config(node)))
    put("/etc/containerd/config.toml", containerd_config())
    put("/etc/cni/net.d/10-kdc.conflist", json.dumps(cni_config(node), indent=1))
    put("/etc/hostname", node.name + "\n")
    put("/etc/hosts", f"127.0.0.1 localhost\n{node.ip} {node.name}\n"
                      f"{CONTROL_PLANE_IP} control-plane\n")
    for name in (*NODE_PROGRAMS, EMULATED_PCI_NRI_PLUGIN):
        target = file_of(f"/usr/local/bin/{name}")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.unlink(missing_ok=True)
        try:  # a hard link: the node keeps its program even if the cache is rebuilt
            os.link(programs[name], target)
        except OSError:  # the cache is on another filesystem
            shutil.copy2(programs[name], target)


def _put(target: Path, content: str | bytes, mode: int) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(target, content.encode() if isinstance(content, str) else content, mode)
