"""The hermetic cluster, shaped like kind: first the machines (a cluster network in its
own namespaces, a control plane, nodes that are small machines of their own), then
ordinary Kubernetes on top. Real etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, kubelet, kube-proxy and containerd (with CDI); only the NVMe hardware is
EMULATED (see driver/emulation): there is no PCI bus here."""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

import filelock

from core.errors import SuiteUsageError
from core.timeouts import Timeout
from kubevirtci.local import components, images, network
from kubevirtci.local.controlplane import ControlPlane, Credentials
from kubevirtci.local.known_images import KNOWN_IMAGES, driver_version
from kubevirtci.local.layout import ClusterConfig, Layout, port_in_use
from kubevirtci.local.node_config import (
    PAUSE_IMAGE,
    NodeCredentials,
    write_node_credentials,
    write_node_root,
)
from kubevirtci.local.node_init import remove_cgroup, unified_only
from kubevirtci.local.nodes import CGROUP_PARENT, V2_SLICE, HermeticNode
from kubevirtci.local.pki import CLUSTER_CA, CertificateAuthority
from kubevirtci.local.processes import ProcessSpec, Supervisor
from kubevirtci.provider import NVME_PER_NODE

log = logging.getLogger("kdc.local")

if TYPE_CHECKING:
    from core.kube import Kube

CONTROL_PLANE_LABEL = "node-role.kubernetes.io/control-plane"
BUSYBOX_IMAGE = "localhost/kdc/busybox:dev"


# Each node's EMULATED NVMe controllers, by media size.
DEFAULT_NVME = ("1G",) * NVME_PER_NODE


def _certificates_read_on(node: HermeticNode) -> set[str]:
    """What the node's kubelet and kube-proxy read (``_node_credentials``'s), by leaf
    stem or CA name."""
    return {CLUSTER_CA, f"kubelet-{node.name}", f"kubelet-serving-{node.name}", "kube-proxy"}


class LocalCluster:
    def __init__(self, layout: Layout | None = None, nodes: int = 2,
                 nvme: tuple[str, ...] = DEFAULT_NVME, numa_nodes: int | None = None) -> None:
        """``numa_nodes``: NUMA nodes of each node's machine (None: a kept cluster's, or
        none for a new one)."""
        self.layout = layout or Layout()
        self.node_count = nodes
        self.nvme = list(nvme)
        self.numa_nodes = numa_nodes
        self.supervisor = Supervisor(self.layout.pids, self.layout.logs)
        self.ca = CertificateAuthority(self.layout.pki)
        self.bins: dict[str, Path] = {}
        self.control_plane = ControlPlane(self.layout, self.supervisor, self.ca, self.bins)

    # --- configuration ---------------------------------------------------------------
    def config(self) -> ClusterConfig:
        if self.layout.config_file.exists():
            try:
                config = ClusterConfig.load(self.layout.config_file)
            except (ValueError, TypeError, KeyError) as err:
                raise SuiteUsageError(str(err), "run `kdc-cluster down --force` first") from err
            return config
        config = ClusterConfig.new(self.node_count, self.nvme, self.numa_nodes or 0)
        self.layout.root.mkdir(parents=True, exist_ok=True)
        config.save(self.layout.config_file)
        return config

    def nodes(self) -> list[HermeticNode]:
        if not self.layout.config_file.exists():
            return []
        return [HermeticNode(a, self.layout, self.supervisor)
                for a in self.config().addresses()]

    def node(self, name: str) -> HermeticNode:
        for node in self.nodes():
            if node.name == name:
                return node
        raise SuiteUsageError(f"the hermetic cluster has no node {name!r}",
                              "`kdc-cluster status` lists the nodes")

    def build(self) -> None:
        components.check_host_packages()
        start = time.monotonic()
        built = [*components.UPSTREAM, components.driver_component(driver_version())]
        for component in built:
            bin_dir = components.build(component)
            for program in component.programs():
                self.bins[program] = bin_dir / program
        log.info(f"binaries ready in {time.monotonic() - start:.0f}s "
                 f"(cache {components.CACHE_ROOT})")

    # --- lifecycle ---------------------------------------------------------------------
    def running(self) -> bool:
        return not self.not_running()

    def not_running(self) -> list[str]:
        """What of the cluster is not running (its config and network, control plane
        and node processes); empty when all of it is."""
        if not self.layout.config_file.exists() or not network.exists():
            return ["the cluster's config and network"]
        nodes = self.nodes()
        wanted = self.control_plane.names() + [f"emulated-nvme-{n.name}" for n in nodes]
        down = [name for name in wanted if not self.supervisor.pid(name)]
        return down + [name for n in nodes for name in n.not_running()]

    def up(self) -> Path:
        """Start the cluster, or reuse the running one; one caller at a time (xdist)."""
        self.layout.root.parent.mkdir(parents=True, exist_ok=True)
        with filelock.FileLock(str(self.layout.root.parent / f"{self.layout.root.name}.lock")):
            return self._up()

    def _up(self) -> Path:
        start = time.monotonic()
        self.build()
        if self._reusable():
            config = self.config()
            if self.numa_nodes is not None and self.numa_nodes != config.numa_nodes:
                raise SuiteUsageError(
                    f"the kept hermetic cluster's nodes have {config.numa_nodes} NUMA nodes, "
                    f"{self.numa_nodes} asked for",
                    f"run `tox -e cluster -- down` first, or ask for --numa-nodes "
                    f"{config.numa_nodes}")
            log.info(f"reusing the running cluster ({self.layout.root})")
            self._renew_certificates(config)
            return self.layout.admin_kubeconfig
        if self.layout.root.exists() or network.exists():
            # State of a stopped or killed run: sweep it and start clean (a new cluster
            # takes seconds; half-alive state would cost more to debug).
            log.info(f"sweeping stale cluster state in {self.layout.root}")
            self.down(force=True)
        config = self.config()
        if port_in_use(config.apiserver):
            raise SuiteUsageError(f"the API server port {config.apiserver} is taken",
                                  f"delete {self.layout.config_file} to pick a new port")
        creds, _ = self.control_plane.issue(config)
        log.info("creating the cluster network (namespaces kdc-cluster, "
                 + ", ".join(a.netns for a in config.addresses()) + ")")
        network.create(config.addresses())
        log.info("starting the control plane (etcd, kube-apiserver, controller-manager, "
                 "scheduler)")
        self.control_plane.start(config, creds)
        for node in self.nodes():
            self._prepare_node(node, config, creds)
            numa = f" on {config.numa_nodes} NUMA nodes" if config.numa_nodes else ""
            log.info(f"booting {node.name} ({node.address.ip}): EMULATED NVMe {config.nvme}{numa}, "
                     "containerd")
            node.boot()
            node.start_services()
            for name, spec in self._node_images().items():
                self._import(node, name, spec)
        self._await("kube-apiserver", lambda: self.control_plane.ready(config, creds),
                    "the API server")
        self.control_plane.start_controllers()
        for node in self.nodes():
            node.start_kubernetes()
        self._await_nodes_ready(config)
        log.info(f"cluster ready in {time.monotonic() - start:.0f}s; kubeconfig "
                 f"{self.layout.admin_kubeconfig}")
        return self.layout.admin_kubeconfig

    def _reusable(self) -> bool:
        """A running cluster is kept unless its CA cannot serve on: every pod trusts the
        CA (its service account's ca.crt), so a new CA would leave them failing, while
        a new cluster takes minutes and leaves none behind."""
        down = self.not_running()
        if down:
            if self.layout.root.exists():
                log.info(f"the cluster in {self.layout.root} is not whole: "
                         f"{', '.join(down)} not running")
            return False
        problem = self.ca.problem()
        if problem is not None:
            log.warning(f"the cluster CA cannot serve on ({problem}): the cluster is made "
                        "anew")
        return problem is None

    def _renew_certificates(self, config: ClusterConfig) -> None:
        """A kept cluster's certificates come near their end while it runs (or lack a
        name this code now gives them): issue those afresh and restart what reads them,
        as a component reads its certificates only when it starts."""
        creds, reissued = self.control_plane.issue(config)
        if not reissued:
            return
        for name, why in sorted(reissued.items()):
            log.info(f"issued {name} afresh: {why}")
        stale = self.control_plane.readers(reissued)
        if stale:
            log.info(f"restarting {', '.join(stale)} with the new certificates")
            self.control_plane.stop(stale)
            self.control_plane.start(config, creds)  # starts what is not running
            self._await("kube-apiserver", lambda: self.control_plane.ready(config, creds),
                        "the API server")
            self.control_plane.start_controllers()
        for node in self.nodes():
            if reissued.keys() & _certificates_read_on(node):
                log.info(f"{node.name}: new certificates; restarting its kubelet and "
                         "kube-proxy")
                write_node_credentials(node.root_file, node.address,
                                       self._node_credentials(node, creds))
                node.restart_kubernetes()
        self._await_nodes_ready(config)

    def _node_credentials(self, node: HermeticNode, creds: Credentials) -> NodeCredentials:
        return NodeCredentials(self.ca.cert_path, creds[f"kubelet-{node.name}"],
                               creds[f"kubelet-serving-{node.name}"], creds["kube-proxy"])

    def _prepare_node(self, node: HermeticNode, config: ClusterConfig,
                      creds: Credentials) -> None:
        """The node's disk before it boots: its files and its EMULATED hardware."""
        write_node_root(lambda path: self.layout.node_file(node.name, path), node.address,
                        self._node_credentials(node, creds), self.bins)
        (self.layout.node(node.name) / "containerd").mkdir(parents=True, exist_ok=True)
        emulation = self.layout.emulation(node.name)
        self.supervisor.start(ProcessSpec(f"emulated-nvme-{node.name}", [
            str(self.bins["nvme-sysfs-emulator"]), f"--root={emulation}",
            f"--device-state={emulation / 'devices'}", f"--numa-nodes={config.numa_nodes}",
            *[f"--nvme={size}" for size in config.nvme],
        ]))
        self._await(f"emulated-nvme-{node.name}", (emulation / "dev" / "vfio").is_dir,
                    f"the EMULATED NVMe controllers of {node.name}")

    def _await(self, name: str, condition: Callable[[], bool], what: str) -> None:
        self.supervisor.wait_until_ready(name, condition, Timeout.COMPONENT_READY, what)

    def kube(self) -> Kube:
        """An API client for the cluster's own work (not a test run's)."""
        from core.kube import Kube, load_api_client

        return Kube(load_api_client(self.layout.admin_kubeconfig, None), "cluster")

    def _await_nodes_ready(self, config: ClusterConfig) -> None:
        kube = self.kube()

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
            # Pods can be created once the default service account exists.
            return ready_nodes >= set(config.nodes) and kube.find(
                "ServiceAccount", "default", "default") is not None

        log.info(f"waiting for {', '.join(config.nodes)} to be Ready")
        self._await(f"{config.nodes[-1]}-kubelet", ready, "nodes")
        # The first node is the control-plane node, as in kubevirtci and kind (kubeadm
        # labels it; a kubelet may not label itself node-role.*). KubeVirt places its
        # operator and control plane there. No taint: tests schedule on every node.
        kube.patch("Node", config.nodes[0],
                   {"metadata": {"labels": {CONTROL_PLANE_LABEL: ""}}})

    def down(self, force: bool = False) -> list[str]:
        """Stop everything in reverse order; returns what was cleaned. ``force`` also
        removes the state folder."""
        cleaned = []
        nodes = self.nodes() if self.layout.config_file.exists() else []
        for node in nodes:
            node.stop()
            self.supervisor.stop(f"emulated-nvme-{node.name}")
        self.control_plane.stop()
        for name in self.supervisor.names():
            self.supervisor.stop(name)
            cleaned.append(f"process {name}")
        cleaned += network.remove([n.address for n in nodes])
        cleaned += [f"cgroup {c}" for c in remove_cgroup(V2_SLICE if unified_only()
                                                         else CGROUP_PARENT)]
        if force:
            shutil.rmtree(self.layout.root, ignore_errors=True)
            cleaned.append(f"state {self.layout.root}")
        return cleaned

    def status(self) -> dict[str, object]:
        names = self.supervisor.names()
        return {
            "state": str(self.layout.root),
            "kubeconfig": str(self.layout.admin_kubeconfig),
            "nodes": [n.name for n in self.nodes()],
            "processes": {n: ("running" if self.supervisor.pid(n) else "dead") for n in names},
            "running": self.running(),
        }

    # --- images ------------------------------------------------------------------------
    def _node_images(self) -> dict[str, images.ImageSpec]:
        """What every node has from the start, as a kind node image has its pause image."""
        return {PAUSE_IMAGE: images.pause_image(PAUSE_IMAGE, self.bins["pause"]),
                BUSYBOX_IMAGE: images.busybox_image(BUSYBOX_IMAGE)}

    def _import(self, node: HermeticNode, name: str, spec: images.ImageSpec) -> None:
        node.import_image(self.image_archive(name.replace("/", "_").replace(":", "_"),
                                             lambda: spec))

    def image_archive(self, key: str, spec: Callable[[], images.ImageSpec]) -> Path:
        """The OCI archive ``<key>.tar`` in the cluster's images folder, written from
        ``spec()`` (which may build the programs) only when it is not there yet: the key
        names the content (a version or a source hash)."""
        archive = self.layout.images / f"{key}.tar"
        if not archive.exists():
            images.write_oci_archive(spec(), archive)
        return archive

    def load_image_archive(self, archive: Path) -> list[str]:
        """``kind load image-archive``: import an OCI or Docker archive into every node
        that lacks its images as they are; returns the nodes it was imported into. Pods
        those nodes run from an older content of the same image name are deleted, so that
        their controllers recreate them from the new one (a tag such as ``:dev`` keeps
        its name across rebuilds)."""
        if not archive.is_file():
            raise SuiteUsageError(f"no image archive at {archive}",
                                  "pass the path of an OCI or `docker save` tarball")
        wanted = images.archive_images(archive)

        def import_into(node: HermeticNode) -> tuple[bool, bool]:
            """(imported, an older content of the image was there)."""
            held = node.image_digests()
            if wanted and all(held.get(name) == digest for name, digest in wanted.items()):
                return False, False
            older = [name for name in wanted if name in held]
            if older:
                # An import over an existing name keeps the record's CRI labels, so the
                # CRI never records the new content's image id, and image volumes of it
                # (KubeVirt's kernel boot, its launcher volume) fail to mount: start anew.
                node.remove_images(older)
            node.import_image(archive)
            return True, bool(older)

        nodes = self.nodes()
        # Nodes import at once: unpacking is most of the time for a large image.
        with ThreadPoolExecutor(max_workers=max(1, len(nodes))) as pool:
            outcomes = list(pool.map(import_into, nodes))
        for node, (_, replaced) in zip(nodes, outcomes, strict=True):
            if replaced:
                self._replace_pods_running(set(wanted), node.name)
        return [node.name for node, (imported, _) in zip(nodes, outcomes, strict=True)
                if imported]

    def _replace_pods_running(self, image_names: set[str], node: str) -> None:
        kube = self.kube()
        for pod in kube.list("Pod"):
            spec = pod["spec"]
            if spec.get("nodeName") == node and any(
                    c["image"] in image_names for c in spec["containers"]):
                log.info(f"{node}: replacing pod {pod['metadata']['namespace']}/"
                         f"{pod['metadata']['name']} (its image changed)")
                kube.delete("Pod", pod["metadata"]["name"], pod["metadata"]["namespace"])

    def load_known_image(self, name: str) -> bool:
        """Build and load an image this project knows how to build; False if unknown."""
        known = KNOWN_IMAGES.get(name)
        if known is None:
            return False
        program = name.rsplit("/", 1)[-1].split(":", 1)[0]
        self.load_image_archive(self.image_archive(f"{program}-{known.version()}",
                                                   lambda: known.spec(name)))
        return True
