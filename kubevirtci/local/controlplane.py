"""The hermetic cluster's control plane: etcd, kube-apiserver, kube-controller-manager and
kube-scheduler in the cluster's network namespace (kind's control-plane node), with
TLS everywhere and RBAC; the API server is published on a host loopback port."""

from __future__ import annotations

import datetime
import ssl
import sys
import urllib.request
from collections.abc import Collection
from pathlib import Path

import yaml

from kubevirtci.local.layout import LOOPBACK, ClusterConfig, Layout
from kubevirtci.local.network import (
    APISERVER_PORT,
    CLUSTER_NETNS,
    CONTROL_PLANE_IP,
    KUBERNETES_SERVICE_IP,
    SERVICE_CIDR,
    netns_path,
)
from kubevirtci.local.node_config import kubeconfig
from kubevirtci.local.pki import CLUSTER_CA, CertificateAuthority, Identity, write_atomically
from kubevirtci.local.processes import ProcessSpec, Supervisor

FRONT_PROXY_CLIENT = "front-proxy-client"  # the name kubeadm gives it
FRONT_PROXY_CA = "kdc-front-proxy-ca"
PORT_FORWARD = Path(__file__).resolve().parent / "port_forward.py"
Credentials = dict[str, tuple[Path, Path]]
# What was issued afresh, by certificate (a leaf's stem or a CA's name): why.
Reissued = dict[str, str]
# The certificates each component reads, by leaf stem or CA name. A component reads
# them when it starts, so a re-issued one is only used after a restart.
CERTIFICATES_READ: dict[str, frozenset[str]] = {
    "etcd": frozenset({CLUSTER_CA, "etcd-server"}),
    "kube-apiserver": frozenset({CLUSTER_CA, FRONT_PROXY_CA, "apiserver",
                                 "apiserver-etcd-client", "apiserver-kubelet-client",
                                 FRONT_PROXY_CLIENT}),
    "kube-controller-manager": frozenset({CLUSTER_CA, "controller-manager"}),
    "kube-scheduler": frozenset({CLUSTER_CA, "scheduler"}),
}


def identities(config: ClusterConfig) -> list[Identity]:
    ids = [
        Identity("etcd-server", "etcd", dns_names=("localhost",), ips=(LOOPBACK,), server=True),
        Identity("apiserver", "kube-apiserver", server=True, client=False,
                 dns_names=("localhost", "control-plane", "kubernetes", "kubernetes.default",
                            "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"),
                 ips=(LOOPBACK, CONTROL_PLANE_IP, KUBERNETES_SERVICE_IP)),
        Identity("apiserver-etcd-client", "kube-apiserver-etcd-client"),
        Identity("apiserver-kubelet-client", "kube-apiserver-kubelet-client",
                 organization="system:masters"),
        Identity("admin", "kdc-admin", organization="system:masters"),
        Identity("controller-manager", "system:kube-controller-manager"),
        Identity("scheduler", "system:kube-scheduler"),
        Identity("kube-proxy", "system:kube-proxy"),
    ]
    for node in config.addresses():
        ids.append(Identity(f"kubelet-{node.name}", f"system:node:{node.name}",
                            organization="system:nodes"))
        ids.append(Identity(f"kubelet-serving-{node.name}", node.name,
                            dns_names=(node.name,), ips=(node.ip,), server=True, client=False))
    return ids


def write_kubeconfig(path: Path, server: str, ca: Path, cert: Path, key: Path,
                     user: str) -> None:
    """A kubeconfig naming the files, not holding them: re-issued files are used as they
    are written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, yaml.safe_dump(
        kubeconfig(server, str(ca), str(cert), str(key), user)).encode())


def in_cluster_netns(argv: list[str]) -> list[str]:
    return ["nsenter", f"--net={netns_path(CLUSTER_NETNS)}", "--", *argv]


class ControlPlane:
    def __init__(self, layout: Layout, supervisor: Supervisor, ca: CertificateAuthority,
                 bins: dict[str, Path]) -> None:
        self.layout = layout
        self.supervisor = supervisor
        self.ca = ca
        # A CA of its own for the aggregation layer's front proxy, as kubeadm makes: the
        # API server proxies to aggregated APIs (virt-api's subresources) as the
        # front-proxy client, and they trust the request headers it signs.
        self.front_proxy_ca = CertificateAuthority(layout.pki / "front-proxy", FRONT_PROXY_CA)
        self.bins = bins

    def issue(self, config: ClusterConfig,
              now: datetime.datetime | None = None) -> tuple[Credentials, Reissued]:
        """Every certificate the cluster uses, kept where it still serves and issued
        afresh where not (a new CA issues all its leaves afresh), and the kubeconfigs
        that name them; returns them with what was issued afresh and why."""
        creds: Credentials = {}
        reissued: Reissued = {}
        for ca, leaves in ((self.ca, identities(config)),
                           (self.front_proxy_ca, [Identity(FRONT_PROXY_CLIENT,
                                                           FRONT_PROXY_CLIENT)])):
            if why := ca.ensure(now):
                reissued[ca.name] = why
            for identity in leaves:
                if why := ca.ensure_leaf(identity, now):
                    reissued[identity.stem] = why
                creds[identity.stem] = ca.leaf_paths(identity.stem)
        write_kubeconfig(self.layout.admin_kubeconfig, f"https://{LOOPBACK}:{config.apiserver}",
                         self.ca.cert_path, *creds["admin"], "kdc-admin")
        for stem in ("controller-manager", "scheduler"):
            # These run in the cluster's namespace, where the API server is on loopback.
            write_kubeconfig(self.layout.kubeconfigs / f"{stem}.kubeconfig",
                             f"https://{LOOPBACK}:{APISERVER_PORT}", self.ca.cert_path,
                             *creds[stem], stem)
        return creds, reissued

    def names(self) -> list[str]:
        return ["etcd", "kube-apiserver", "api-port-forward", "kube-controller-manager",
                "kube-scheduler"]

    def readers(self, reissued: Collection[str]) -> list[str]:
        """The components (in start order) that read any of the ``reissued``
        certificates."""
        return [name for name in self.names()
                if CERTIFICATES_READ.get(name, frozenset()) & set(reissued)]

    def start(self, config: ClusterConfig, creds: Credentials) -> None:
        ca = str(self.ca.cert_path)
        bin_of = {name: str(path) for name, path in self.bins.items()}
        etcd_cert, etcd_key = creds["etcd-server"]
        etcd_url = f"https://{LOOPBACK}:2379"
        self.supervisor.start(ProcessSpec("etcd", in_cluster_netns([
            bin_of["etcd"], "--name=kdc", f"--data-dir={self.layout.etcd_data}",
            f"--listen-client-urls={etcd_url}", f"--advertise-client-urls={etcd_url}",
            f"--listen-peer-urls=https://{LOOPBACK}:2380",
            f"--initial-advertise-peer-urls=https://{LOOPBACK}:2380",
            f"--initial-cluster=kdc=https://{LOOPBACK}:2380",
            f"--cert-file={etcd_cert}", f"--key-file={etcd_key}", f"--trusted-ca-file={ca}",
            "--client-cert-auth=true", f"--peer-cert-file={etcd_cert}",
            f"--peer-key-file={etcd_key}", f"--peer-trusted-ca-file={ca}",
            "--peer-client-cert-auth=true", "--listen-metrics-urls=",
        ])))
        sa_key, sa_pub = self.ca.service_account_keys()
        api_cert, api_key = creds["apiserver"]
        self.supervisor.start(ProcessSpec("kube-apiserver", in_cluster_netns([
            bin_of["kube-apiserver"], f"--secure-port={APISERVER_PORT}",
            f"--advertise-address={CONTROL_PLANE_IP}",
            f"--etcd-servers={etcd_url}", f"--etcd-cafile={ca}",
            f"--etcd-certfile={creds['apiserver-etcd-client'][0]}",
            f"--etcd-keyfile={creds['apiserver-etcd-client'][1]}",
            f"--tls-cert-file={api_cert}", f"--tls-private-key-file={api_key}",
            f"--client-ca-file={ca}", "--anonymous-auth=false",
            "--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction",
            f"--service-account-key-file={sa_pub}",
            f"--service-account-signing-key-file={sa_key}",
            "--service-account-issuer=https://kubernetes.default.svc",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            f"--kubelet-client-certificate={creds['apiserver-kubelet-client'][0]}",
            f"--kubelet-client-key={creds['apiserver-kubelet-client'][1]}",
            f"--kubelet-certificate-authority={ca}",
            "--kubelet-preferred-address-types=InternalIP",
            # Webhooks and aggregated APIs are reached at their pods' addresses, routed
            # from this namespace, so the control plane needs no kube-proxy of its own.
            "--enable-aggregator-routing=true",
            f"--requestheader-client-ca-file={self.front_proxy_ca.cert_path}",
            f"--requestheader-allowed-names={FRONT_PROXY_CLIENT}",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--proxy-client-cert-file={creds['front-proxy-client'][0]}",
            f"--proxy-client-key-file={creds['front-proxy-client'][1]}",
            "--allow-privileged=true", "--profiling=false",
        ])))
        self.supervisor.start(ProcessSpec("api-port-forward", [
            sys.executable, str(PORT_FORWARD), f"--listen={LOOPBACK}:{config.apiserver}",
            f"--netns={netns_path(CLUSTER_NETNS)}",
            f"--target={LOOPBACK}:{APISERVER_PORT}",
        ]))

    def start_controllers(self) -> None:
        sa_key, _ = self.ca.service_account_keys()
        for component, stem in (("kube-controller-manager", "controller-manager"),
                                ("kube-scheduler", "scheduler")):
            kubeconfig_path = self.layout.kubeconfigs / f"{stem}.kubeconfig"
            args = [
                str(self.bins[component]), f"--kubeconfig={kubeconfig_path}",
                f"--authentication-kubeconfig={kubeconfig_path}",
                f"--authorization-kubeconfig={kubeconfig_path}",
                f"--bind-address={LOOPBACK}", "--secure-port=0", "--leader-elect=false",
            ]
            if component == "kube-controller-manager":
                args += [f"--service-account-private-key-file={sa_key}",
                         f"--root-ca-file={self.ca.cert_path}",
                         "--use-service-account-credentials=true",
                         f"--cluster-signing-cert-file={self.ca.cert_path}",
                         f"--cluster-signing-key-file={self.ca.key_path}"]
            self.supervisor.start(ProcessSpec(component, in_cluster_netns(args)))

    def ready(self, config: ClusterConfig, creds: Credentials) -> bool:
        """/readyz through the published port: the forwarder, the API server and etcd."""
        ctx = ssl.create_default_context(cafile=str(self.ca.cert_path))
        ctx.load_cert_chain(*(str(p) for p in creds["admin"]))
        try:
            url = f"https://{LOOPBACK}:{config.apiserver}/readyz"
            with urllib.request.urlopen(url, context=ctx, timeout=3) as response:
                return response.status == 200
        except OSError:
            return False

    def stop(self, names: Collection[str] | None = None) -> None:
        """Stop ``names`` (all by default), in reverse start order."""
        for name in reversed(self.names()):
            if names is None or name in names:
                self.supervisor.stop(name)
