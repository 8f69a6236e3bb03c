"""The hermetic cluster: real etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, kubelets and containerd (with CDI) as loopback processes on this host.
Only the NVMe hardware is EMULATED (see driver/emulation): there is no PCI bus here."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import ssl
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import filelock
import yaml

from fixtures.errors import SuiteUsageError
from fixtures.timeouts import Timeout
from kubevirtci.local import components, images
from kubevirtci.local.layout import LOOPBACK, ClusterConfig, Layout, port_in_use
from kubevirtci.local.pki import CertificateAuthority, Identity
from kubevirtci.local.processes import ProcessSpec, Supervisor, wait_until

PAUSE_IMAGE = "localhost/kdc/pause:kdc-1"
DRIVER_REPOSITORY = "localhost/kdc/nvme-dra-driver"  # tagged with the driver's source hash
BUSYBOX_IMAGE = "localhost/kdc/busybox:dev"
SERVICE_CIDR = "10.96.0.0/16"
CGROUP_V1_ROOT = Path("/sys/fs/cgroup")


def progress(message: str) -> None:
    sys.stderr.write(f"[local] {message}\n")
    sys.stderr.flush()


def driver_version() -> str:
    """Content hash of the driver's sources: the cache key of its build."""
    digest = hashlib.sha256()
    for path in sorted(components.DRIVER_DIR.rglob("*")):
        if path.suffix in (".go", ".mod", ".sum") and "_test" not in path.name:
            digest.update(path.relative_to(components.DRIVER_DIR).as_posix().encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def _kubeconfig(path: Path, server: str, ca: Path, cert: Path, key: Path, user: str) -> None:
    config = {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "kdc-hermetic",
                      "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": user, "user": {"client-certificate": str(cert),
                                          "client-key": str(key)}}],
        "contexts": [{"name": "kdc-hermetic", "context": {"cluster": "kdc-hermetic",
                                                          "user": user}}],
        "current-context": "kdc-hermetic",
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)


class LocalCluster:
    def __init__(self, layout: Layout | None = None, nodes: int = 2,
                 nvme: tuple[str, ...] = ("1G", "1G")) -> None:
        self.layout = layout or Layout()
        self.node_count = nodes
        self.nvme = list(nvme)
        self.supervisor = Supervisor(self.layout.pids, self.layout.logs)
        self.ca = CertificateAuthority(self.layout.pki)
        self.bins: dict[str, Path] = {}

    # --- configuration ---------------------------------------------------------------
    def config(self) -> ClusterConfig:
        if self.layout.config_file.exists():
            return ClusterConfig.load(self.layout.config_file)
        config = ClusterConfig.new(self.node_count, self.nvme)
        self.layout.root.mkdir(parents=True, exist_ok=True)
        config.save(self.layout.config_file)
        return config

    def _bin(self, program: str) -> str:
        return str(self.bins[program])

    def build(self) -> None:
        components.check_host_packages()
        start = time.monotonic()
        built = [*components.UPSTREAM, components.driver_component(driver_version())]
        for component in built:
            bin_dir = components.build(component)
            for program in component.programs():
                self.bins[program] = bin_dir / program
        elapsed = time.monotonic() - start
        progress(f"binaries ready in {elapsed:.0f}s (cache {components.CACHE_ROOT})")

    # --- PKI ---------------------------------------------------------------------------
    def _pki(self, config: ClusterConfig) -> dict[str, tuple[Path, Path]]:
        self.ca.ensure()
        loopback = (LOOPBACK,)
        ids = [
            Identity("etcd-server", "etcd", dns_names=("localhost",), ips=loopback, server=True),
            Identity("apiserver", "kube-apiserver", server=True, client=False,
                     dns_names=("localhost", "kubernetes", "kubernetes.default",
                                "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"),
                     ips=(LOOPBACK, "10.96.0.1")),
            Identity("apiserver-etcd-client", "kube-apiserver-etcd-client"),
            Identity("apiserver-kubelet-client", "kube-apiserver-kubelet-client",
                     organization="system:masters"),
            Identity("admin", "kdc-admin", organization="system:masters"),
            Identity("controller-manager", "system:kube-controller-manager"),
            Identity("scheduler", "system:kube-scheduler"),
        ]
        for node in config.nodes:
            ids.append(Identity(f"kubelet-{node}", f"system:node:{node}",
                                organization="system:nodes"))
            ids.append(Identity(f"kubelet-serving-{node}", node, dns_names=("localhost",),
                                ips=(node,), server=True, client=False))
        return {i.stem: self.ca.issue(i) for i in ids}

    # --- control plane ---------------------------------------------------------------
    def _server(self, config: ClusterConfig) -> str:
        return f"https://{LOOPBACK}:{config.apiserver}"

    def _tls_context(self, client: tuple[Path, Path]) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.ca.cert_path))
        ctx.load_cert_chain(str(client[0]), str(client[1]))
        return ctx

    def _healthy(self, url: str, client: tuple[Path, Path]) -> bool:
        try:
            with urllib.request.urlopen(url, context=self._tls_context(client), timeout=3) as r:
                return r.status == 200
        except OSError:
            return False

    def _await(self, name: str, condition, what: str) -> None:
        if not wait_until(condition, Timeout.CLUSTER_READY.seconds):
            raise RuntimeError(
                f"{Timeout.CLUSTER_READY.name}: {what} not ready after "
                f"{Timeout.CLUSTER_READY.seconds:.0f}s. Last log lines of {name}:\n"
                f"{self.supervisor.tail(name)}\nFix: see {self.supervisor.log_file(name)}"
            )

    def _start_control_plane(self, config: ClusterConfig, certs: dict[str, tuple[Path, Path]]
                             ) -> None:
        ca = str(self.ca.cert_path)
        etcd_cert, etcd_key = certs["etcd-server"]
        self.supervisor.start(ProcessSpec("etcd", [
            self._bin("etcd"), "--name=kdc", f"--data-dir={self.layout.etcd_data}",
            f"--listen-client-urls=https://{LOOPBACK}:{config.etcd}",
            f"--advertise-client-urls=https://{LOOPBACK}:{config.etcd}",
            f"--listen-peer-urls=https://{LOOPBACK}:{config.etcd_peer}",
            f"--initial-advertise-peer-urls=https://{LOOPBACK}:{config.etcd_peer}",
            f"--initial-cluster=kdc=https://{LOOPBACK}:{config.etcd_peer}",
            f"--cert-file={etcd_cert}", f"--key-file={etcd_key}", f"--trusted-ca-file={ca}",
            "--client-cert-auth=true", f"--peer-cert-file={etcd_cert}",
            f"--peer-key-file={etcd_key}", f"--peer-trusted-ca-file={ca}",
            "--peer-client-cert-auth=true", "--listen-metrics-urls=",
        ]))
        self._await("etcd", lambda: self._healthy(
            f"https://{LOOPBACK}:{config.etcd}/health", certs["apiserver-etcd-client"]), "etcd")
        sa_key, sa_pub = self.ca.service_account_keys()
        api_cert, api_key = certs["apiserver"]
        self.supervisor.start(ProcessSpec("kube-apiserver", [
            self._bin("kube-apiserver"), f"--bind-address={LOOPBACK}",
            f"--secure-port={config.apiserver}", f"--advertise-address={LOOPBACK}",
            "--endpoint-reconciler-type=none",  # a loopback endpoint is not allowed
            f"--etcd-servers=https://{LOOPBACK}:{config.etcd}", f"--etcd-cafile={ca}",
            f"--etcd-certfile={certs['apiserver-etcd-client'][0]}",
            f"--etcd-keyfile={certs['apiserver-etcd-client'][1]}",
            f"--tls-cert-file={api_cert}", f"--tls-private-key-file={api_key}",
            f"--client-ca-file={ca}", "--anonymous-auth=false",
            "--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction",
            f"--service-account-key-file={sa_pub}",
            f"--service-account-signing-key-file={sa_key}",
            "--service-account-issuer=https://kubernetes.default.svc",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            f"--kubelet-client-certificate={certs['apiserver-kubelet-client'][0]}",
            f"--kubelet-client-key={certs['apiserver-kubelet-client'][1]}",
            f"--kubelet-certificate-authority={ca}",
            "--kubelet-preferred-address-types=Hostname",
            "--allow-privileged=true", "--profiling=false",
        ]))
        self._await("kube-apiserver", lambda: self._healthy(
            f"{self._server(config)}/readyz", certs["admin"]), "kube-apiserver")
        for component, cert in (("kube-controller-manager", "controller-manager"),
                                ("kube-scheduler", "scheduler")):
            kubeconfig = self.layout.kubeconfigs / f"{cert}.kubeconfig"
            args = [
                self._bin(component), f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                f"--bind-address={LOOPBACK}", "--secure-port=0", "--leader-elect=false",
            ]
            if component == "kube-controller-manager":
                args += [f"--service-account-private-key-file={sa_key}",
                         f"--root-ca-file={ca}", "--use-service-account-credentials=true",
                         f"--cluster-signing-cert-file={ca}",
                         f"--cluster-signing-key-file={self.ca.key_path}"]
            self.supervisor.start(ProcessSpec(component, args))

    # --- nodes -------------------------------------------------------------------------
    def _containerd_config(self, node: str) -> Path:
        base = self.layout.node(node)
        path = base / "containerd" / "config.toml"
        path.parent.mkdir(parents=True, exist_ok=True)
        cni_conf = base / "cni"
        cdi = self.layout.cdi_dir(node)
        cdi.mkdir(parents=True, exist_ok=True)
        path.write_text(f"""version = 3
root = "{base / 'containerd' / 'root'}"
state = "{base / 'containerd' / 'state'}"
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.nri.v1.nri"]

[grpc]
  address = "{self.layout.containerd_socket(node)}"

[ttrpc]
  address = "{self.layout.containerd_socket(node)}.ttrpc"

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "{PAUSE_IMAGE}"

[plugins.'io.containerd.cri.v1.runtime']
  enable_cdi = true
  # This host forbids lowering oom_score_adj (kubelet asks -998 for sandboxes).
  restrict_oom_score_adj = true
  cdi_spec_dirs = ["{cdi}"]
  netns_mounts_under_state_dir = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = "/usr/sbin/runc"
        Root = "{self.layout.runc_root(node)}"
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = "{cni_conf}"

[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = "{LOOPBACK}"
  stream_server_port = "0"
""")
        return path

    def _cni_config(self, node: str, index: int) -> None:
        conf_dir = self.layout.node(node) / "cni"
        conf_dir.mkdir(parents=True, exist_ok=True)
        (conf_dir / "10-kdc.conflist").write_text(json.dumps({
            "cniVersion": "1.0.0", "name": f"kdc-{node}",
            "plugins": [
                {"type": "bridge", "bridge": f"kdc{index}", "isGateway": True, "ipMasq": False,
                 "ipam": {"type": "host-local", "ranges": [[{"subnet": f"10.244.{index}.0/24"}]],
                          "dataDir": str(self.layout.node(node) / "cni-ipam")}},
                {"type": "loopback"},
            ],
        }, indent=1))

    def _kubelet_config(self, node: str, config: ClusterConfig,
                        certs: dict[str, tuple[Path, Path]]) -> Path:
        ports = config.node_ports[node]
        serving_cert, serving_key = certs[f"kubelet-serving-{node}"]
        kubelet_config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
            "address": node, "port": ports.kubelet, "readOnlyPort": 0,
            "healthzBindAddress": node, "healthzPort": ports.healthz,
            "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                               "x509": {"clientCAFile": str(self.ca.cert_path)}},
            "authorization": {"mode": "Webhook"},
            "tlsCertFile": str(serving_cert), "tlsPrivateKeyFile": str(serving_key),
            "cgroupDriver": "cgroupfs",
            # This host runs cgroup v1 (hybrid); kubelets from 1.35 refuse it unless told.
            "failCgroupV1": False,
            "cgroupsPerQOS": False, "enforceNodeAllocatable": [],
            "failSwapOn": False,
            "containerRuntimeEndpoint": f"unix://{self.layout.containerd_socket(node)}",
            "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%",
                             "imagefs.available": "1%", "nodefs.inodesFree": "1%"},
            "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
            "localStorageCapacityIsolation": False,
            "maxPods": 60, "registerNode": True, "serializeImagePulls": False,
            "resolvConf": "", "clusterDomain": "cluster.local",
            "fileCheckFrequency": "5s", "syncFrequency": "10s",
            "nodeStatusUpdateFrequency": "5s",
        }
        path = self.layout.node(node) / "kubelet-config.yaml"
        path.write_text(yaml.safe_dump(kubelet_config))
        return path

    def _import_images(self, node: str) -> None:
        """Import the images a node lacks (tags change with content, so present = same)."""
        ctr = [self._bin("ctr"), "-a", str(self.layout.containerd_socket(node)), "-n", "k8s.io"]
        present = set(subprocess.run([*ctr, "images", "ls", "-q"], check=True,
                                     capture_output=True, text=True).stdout.split())
        for name, spec in self._image_specs().items():
            if name in present:
                continue
            archive = self.layout.images / (name.replace("/", "_").replace(":", "_") + ".tar")
            images.write_oci_archive(spec, archive)
            subprocess.run([*ctr, "images", "import", "--local", str(archive)],
                           check=True, capture_output=True, text=True)

    def _image_specs(self) -> dict[str, images.ImageSpec]:
        specs = [
            images.pause_image(PAUSE_IMAGE, self.bins["pause"]),
            images.driver_image(self.driver_image(), self.bins["nvme-dra-driver"].parent),
            images.busybox_image(BUSYBOX_IMAGE),
        ]
        return {spec.name: spec for spec in specs}

    def driver_image(self) -> str:
        """A new tag for every driver change, so a reused cluster rolls the DaemonSet."""
        return f"{DRIVER_REPOSITORY}:{driver_version()}"

    def _start_node(self, node: str, index: int, config: ClusterConfig,
                    certs: dict[str, tuple[Path, Path]]) -> None:
        emulation = self.layout.emulation(node)
        self.supervisor.start(ProcessSpec(f"emulated-nvme-{node}", [
            self._bin("nvme-sysfs-emulator"), f"--root={emulation / 'sys'}",
            f"--dev-root={emulation / 'dev'}", f"--images={emulation / 'images'}",
            *[f"--nvme={size}" for size in config.nvme],
        ]))
        self._cni_config(node, index)
        self.layout.runc_root(node).mkdir(parents=True, exist_ok=True)
        self.supervisor.start(ProcessSpec(f"containerd-{node}", [
            self._bin("containerd"), f"--config={self._containerd_config(node)}",
        ], env={"PATH": f"{self.bins['containerd'].parent}:{os.environ.get('PATH', '')}"}))
        socket = self.layout.containerd_socket(node)
        self._await(f"containerd-{node}", socket.exists, f"containerd of {node}")
        self._import_images(node)
        kubeconfig = self.layout.kubeconfigs / f"kubelet-{node}.kubeconfig"
        kubelet_dir = self.layout.kubelet_dir(node)
        kubelet_dir.mkdir(parents=True, exist_ok=True)
        self.supervisor.start(ProcessSpec(f"kubelet-{node}", [
            self._bin("kubelet"), f"--config={self._kubelet_config(node, config, certs)}",
            f"--kubeconfig={kubeconfig}", f"--root-dir={kubelet_dir}",
            # The node's name is its loopback address: the API server reaches the kubelet
            # by the Hostname address, and a loopback --node-ip is refused.
            f"--hostname-override={node}",
        ]))

    # --- lifecycle ---------------------------------------------------------------------
    def running(self) -> bool:
        if not self.layout.config_file.exists():
            return False
        config = ClusterConfig.load(self.layout.config_file)
        wanted = ["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"]
        for node in config.nodes:
            wanted += [f"emulated-nvme-{node}", f"containerd-{node}", f"kubelet-{node}"]
        return all(self.supervisor.pid(name) for name in wanted)

    def up(self) -> Path:
        """Start the cluster, or reuse the running one; one caller at a time (xdist)."""
        self.layout.root.parent.mkdir(parents=True, exist_ok=True)
        with filelock.FileLock(str(self.layout.root.parent / f"{self.layout.root.name}.lock")):
            return self._up()

    def _up(self) -> Path:
        start = time.monotonic()
        self.build()
        if self.running():
            config = self.config()
            for node in config.nodes:
                self._import_images(node)  # a changed driver gets a new image tag
            progress(f"reusing the running cluster ({self.layout.root})")
            return self.layout.admin_kubeconfig
        if not self.running() and self.layout.root.exists():
            # State of a stopped or killed run: sweep it and start clean (a new cluster
            # takes seconds; half-alive state would cost more to debug).
            progress(f"sweeping stale cluster state in {self.layout.root}")
            self.down(force=True)
        config = self.config()
        if not self.running():
            self._check_ports(config)
        certs = self._pki(config)
        server = self._server(config)
        _kubeconfig(self.layout.admin_kubeconfig, server, self.ca.cert_path, *certs["admin"],
                    "kdc-admin")
        for stem in ("controller-manager", "scheduler", *[f"kubelet-{n}" for n in config.nodes]):
            _kubeconfig(self.layout.kubeconfigs / f"{stem}.kubeconfig", server,
                        self.ca.cert_path, *certs[stem], stem)
        progress("starting the control plane (etcd, kube-apiserver, controller-manager, "
                 "scheduler)")
        self._start_control_plane(config, certs)
        for index, node in enumerate(config.nodes, start=1):
            progress(f"starting {node}: EMULATED NVMe {config.nvme}, containerd, kubelet")
            self._start_node(node, index, config, certs)
        self._await_nodes_ready(config)
        progress(f"cluster ready in {time.monotonic() - start:.0f}s; kubeconfig "
                 f"{self.layout.admin_kubeconfig}")
        return self.layout.admin_kubeconfig

    def _check_ports(self, config: ClusterConfig) -> None:
        ports = {"etcd": config.etcd, "etcd peer": config.etcd_peer,
                 "kube-apiserver": config.apiserver}
        for node, p in config.node_ports.items():
            ports |= {f"kubelet {node}": p.kubelet, f"kubelet healthz {node}": p.healthz}
        busy = [f"{name} ({port})" for name, port in ports.items() if port_in_use(port)]
        if busy:
            raise SuiteUsageError(
                f"ports of the hermetic cluster are taken: {', '.join(busy)}",
                "run `python -m kubevirtci.local down --force` (stale run), or delete "
                f"{self.layout.config_file} to pick new ports",
            )

    def _await_nodes_ready(self, config: ClusterConfig) -> None:
        from fixtures.kube import Kube, load_api_client

        kube = Kube(load_api_client(self.layout.admin_kubeconfig, None), "cluster")

        def ready() -> bool:
            try:
                nodes = kube.list("Node")
            except Exception:
                return False
            ready_nodes = {
                n["metadata"]["name"] for n in nodes
                if any(c["type"] == "Ready" and c["status"] == "True"
                       for c in n["status"].get("conditions", []))
            }
            return ready_nodes >= set(config.nodes)

        for node in config.nodes:
            progress(f"waiting for {node} to be Ready")
        self._await(f"kubelet-{config.nodes[-1]}", ready, "nodes")

    def down(self, force: bool = False) -> list[str]:
        """Stop everything; returns what was cleaned. ``force`` also sweeps leftovers
        of a crashed run (container processes, mounts, bridges)."""
        cleaned = []
        config = (ClusterConfig.load(self.layout.config_file)
                  if self.layout.config_file.exists() else None)
        nodes = config.nodes if config else []
        for node in nodes:
            self.supervisor.stop(f"kubelet-{node}")
        for node in nodes:
            cleaned += self._kill_containers(node)
            self.supervisor.stop(f"containerd-{node}")
            self.supervisor.stop(f"emulated-nvme-{node}")
        for name in ("kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"):
            self.supervisor.stop(name)
        for name in self.supervisor.names():
            self.supervisor.stop(name)
            cleaned.append(f"process {name}")
        cleaned += self._unmount_all()
        for index, _ in enumerate(nodes, start=1):
            if subprocess.run(["ip", "link", "del", f"kdc{index}"],
                              capture_output=True).returncode == 0:
                cleaned.append(f"bridge kdc{index}")
        if force:
            shutil.rmtree(self.layout.root, ignore_errors=True)
            cleaned.append(f"state {self.layout.root}")
        return cleaned

    def _kill_containers(self, node: str) -> list[str]:
        root = self.layout.runc_root(node)
        killed = []
        for ns_dir in root.glob("*"):
            for container in ns_dir.iterdir() if ns_dir.is_dir() else []:
                subprocess.run(["runc", "--root", str(ns_dir), "kill", "--all", container.name,
                                "KILL"], capture_output=True)
                subprocess.run(["runc", "--root", str(ns_dir), "delete", "--force",
                                container.name], capture_output=True)
                killed.append(f"container {container.name[:12]}")
        # Shims outlive containerd; they carry our state path on their command line.
        subprocess.run(["pkill", "-9", "-f", f"containerd-shim-runc-v2.*{self.layout.root}"],
                       capture_output=True)
        return killed

    def _unmount_all(self) -> list[str]:
        root = str(self.layout.root)
        mounts = [line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()]
        ours = sorted((m for m in mounts if m.startswith(root)), key=len, reverse=True)
        for mount in ours:
            subprocess.run(["umount", "-l", mount], capture_output=True)
        return [f"mount {m}" for m in ours]

    def status(self) -> dict[str, object]:
        names = self.supervisor.names()
        return {
            "state": str(self.layout.root),
            "kubeconfig": str(self.layout.admin_kubeconfig),
            "processes": {n: ("running" if self.supervisor.pid(n) else "dead") for n in names},
            "running": self.running(),
        }


def build_driver_archive(name: str, archive: Path) -> Path:
    """The driver image as an OCI archive, built locally (no registry, no daemon)."""
    bin_dir = components.build(components.driver_component(driver_version()))
    return images.write_oci_archive(images.driver_image(name, bin_dir), archive)
