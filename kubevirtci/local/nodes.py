"""A hermetic node: a small machine of its own, as a kind node container is. Its init
(``node_init.py``) holds the node's network, mount, UTS, IPC and PID namespaces; the
node's containerd, kubelet and kube-proxy run inside them, and so does every command the
suite runs on the node."""

from __future__ import annotations

import sys
from pathlib import Path

from core.commands import QUIET, CommandFailed, Stdin
from core.errors import SuiteUsageError
from core.timeouts import Timeout
from kubevirtci.local.layout import Layout
from kubevirtci.local.network import NodeAddress, netns_path
from kubevirtci.local.node_config import (
    CONTAINERD_SOCKET,
    EMULATED_PCI_NRI_PLUGIN,
    EMULATED_PCI_NRI_REGISTERED,
    kubelet_args,
)
from kubevirtci.local.node_init import remove_cgroup, unified_only
from kubevirtci.local.processes import ProcessSpec, Supervisor, read_proc
from kubevirtci.provider import Node, NodeCommandFailed

NODE_INIT = Path(__file__).resolve().parent / "node_init.py"
NODE_SERVICE = Path(__file__).resolve().parent / "node_service.py"
# cgroup v1: kdc/<node> in every hierarchy, made by the node's init and removed with the
# node. cgroup v2: a scope per node in this slice, which systemd delegates to the node
# (Delegate=yes, as a container runtime's containers get theirs): every controller
# reaches the node's pods, and systemd leaves what is below the scope alone.
CGROUP_PARENT = "kdc"
V2_SLICE = "kdc.slice"
SYSTEMD_RUNNING = Path("/run/systemd/system")  # sd_booted(3)
SERVICES = ("containerd", EMULATED_PCI_NRI_PLUGIN, "kubelet", "kube-proxy")
NODE_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}


class HermeticNode(Node):
    def __init__(self, address: NodeAddress, layout: Layout, supervisor: Supervisor) -> None:
        self.address = address
        self.name = address.name
        self.layout = layout
        self.supervisor = supervisor

    # --- the machine -----------------------------------------------------------------
    @property
    def cgroup(self) -> str:
        if unified_only():
            return f"{V2_SLICE}/{self.scope}"
        return f"{CGROUP_PARENT}/{self.name}"

    @property
    def scope(self) -> str:
        return f"kdc-{self.name}.scope"

    def delegated_scope(self) -> list[str]:
        """On cgroup v2: the prefix that starts the node's init in a scope of its own that
        systemd delegates to it; nothing on v1."""
        if not unified_only():
            return []
        if not SYSTEMD_RUNNING.is_dir():
            raise SuiteUsageError(
                "this cgroup v2 host does not run systemd, which would delegate the "
                "nodes' cgroups", "run the hermetic cluster on a host booted with systemd "
                "(as Debian, Ubuntu and Fedora are), or on a cgroup v1 host")
        return ["systemd-run", "--scope", "--quiet", "--collect", f"--slice={V2_SLICE}",
                f"--unit={self.scope}", "--property=Delegate=yes", "--"]

    def init_pid(self) -> int | None:
        """Host PID of the node's PID 1 (the child of the ``unshare`` we started)."""
        launcher = self.supervisor.pid(self.name)
        if launcher is None:
            return None
        children = (read_proc(launcher, f"task/{launcher}/children") or "").split()
        return int(children[0]) if children else None

    def boot(self) -> None:
        ready = self.layout.node(self.name) / "ready"
        ready.unlink(missing_ok=True)
        self.supervisor.start(ProcessSpec(self.name, [
            *self.delegated_scope(),
            "nsenter", f"--net={netns_path(self.address.netns)}", "--",
            sys.executable, str(NODE_INIT), f"--name={self.name}", f"--cgroup={self.cgroup}",
            f"--node-dir={self.layout.node(self.name)}",
            f"--emulation={self.layout.emulation(self.name)}",
        ]))
        self.supervisor.wait_until_ready(self.name, ready.exists, Timeout.NODE_BOOT,
                           f"node {self.name} to boot")

    def enter(self) -> list[str]:
        pid = self.init_pid()
        if pid is None:
            raise NodeCommandFailed(f"node {self.name} is not running "
                                    "(`python -m kubevirtci.local status`)")
        return ["nsenter", "-t", str(pid), "-m", "-u", "-i", "-n", "-p", "-C", "--"]

    def root_file(self, path: str) -> Path:
        """The host path of a file of the running node, through its own root: what its
        overlay shows (the layer below must not change under a mounted overlay)."""
        pid = self.init_pid()
        if pid is None:
            raise NodeCommandFailed(f"node {self.name} is not running "
                                    "(`python -m kubevirtci.local status`)")
        return Path(f"/proc/{pid}/root") / path.lstrip("/")

    def run(self, argv: list[str], stdin: Stdin = None,
            timeout: Timeout = Timeout.NODE_COMMAND) -> str:
        result = QUIET.run([*self.enter(), *argv], timeout, stdin=stdin, env=NODE_ENV)
        if result.failed:
            raise NodeCommandFailed(f"on {self.name}: {CommandFailed(result)}")
        return result.stdout

    # --- what runs on it -------------------------------------------------------------
    def service(self, name: str) -> str:
        return f"{self.name}-{name}"

    def start_service(self, name: str, argv: list[str]) -> None:
        """A service of the node: in a leaf of the node's cgroup (joined from the host,
        see node_service), then in the node's namespaces."""
        self.supervisor.start(ProcessSpec(self.service(name), [
            sys.executable, str(NODE_SERVICE), f"--cgroup={self.cgroup}/services/{name}",
            "--", *self.enter(), *argv], NODE_ENV))

    def start_services(self) -> None:
        self.start_service("containerd", ["containerd", "--config=/etc/containerd/config.toml"])
        self.supervisor.wait_until_ready(
            self.service("containerd"), lambda: self._has("-S", CONTAINERD_SOCKET),
            Timeout.NODE_SERVICE_READY, f"containerd of {self.name}")
        # Before the kubelet: every container must see the EMULATED PCI tree.
        self.start_service(EMULATED_PCI_NRI_PLUGIN, [EMULATED_PCI_NRI_PLUGIN])
        self.supervisor.wait_until_ready(
            self.service(EMULATED_PCI_NRI_PLUGIN),
            lambda: self._has("-f", EMULATED_PCI_NRI_REGISTERED), Timeout.NODE_SERVICE_READY,
            f"the EMULATED PCI plugin of {self.name} to register")

    def start_kubelet(self) -> None:
        self.start_service("kubelet", kubelet_args(self.address))

    def start_kubernetes(self) -> None:
        self.start_kubelet()
        self.start_service("kube-proxy", ["kube-proxy", "--config=/etc/kubernetes/kube-proxy.yaml"])

    def restart_kubernetes(self) -> None:
        """The kubelet and kube-proxy read their certificates only when they start. The
        node's pods go on running meanwhile: they are containerd's."""
        self.supervisor.stop(self.service("kubelet"))
        self.supervisor.stop(self.service("kube-proxy"))
        self.start_kubernetes()

    def restart_kubelet(self) -> None:
        self.supervisor.stop(self.service("kubelet"))
        self.start_kubelet()

    def _has(self, kind: str, path: str) -> bool:
        """``test KIND PATH`` on the node (``-S``: a socket, ``-f``: a file)."""
        try:
            self.run(["test", kind, path])
        except NodeCommandFailed:
            return False
        return True

    def not_running(self) -> list[str]:
        """The node's machine and services that are not running."""
        return [n for n in [self.name, *(self.service(s) for s in SERVICES)]
                if not self.supervisor.pid(n)]

    def stop(self) -> None:
        """Kubelet first (no restarts behind our back), then the containers, then the
        machine: when its PID 1 ends, the kernel ends every process inside."""
        self.supervisor.stop(self.service("kubelet"))
        self.supervisor.stop(self.service("kube-proxy"))
        if self.init_pid() is not None:
            # Best effort: whatever is left dies with the node's PID 1 below.
            QUIET.run([*self.enter(), "sh", "-c",
                       "for c in $(runc --root /run/containerd/runc/k8s.io list -q); do "
                       "runc --root /run/containerd/runc/k8s.io delete --force $c; done"],
                      Timeout.NODE_COMMAND, env=NODE_ENV)
        self.supervisor.stop(self.service(EMULATED_PCI_NRI_PLUGIN))
        self.supervisor.stop(self.service("containerd"))
        self.supervisor.stop(self.name)
        remove_cgroup(self.cgroup)

    # --- images ----------------------------------------------------------------------
    def ctr(self) -> list[str]:
        return ["ctr", "-a", CONTAINERD_SOCKET, "-n", "k8s.io"]

    def image_digests(self) -> dict[str, str]:
        """{image name: manifest digest} of what the node's containerd holds."""
        rows = self.run([*self.ctr(), "images", "ls"]).splitlines()[1:]
        return {ref: digest for ref, _, digest, *_ in (row.split() for row in rows if row)}

    def remove_images(self, names: list[str]) -> None:
        self.run([*self.ctr(), "images", "rm", *names])

    def import_image(self, archive: Path) -> None:
        """``ctr images import`` from the archive streamed in (read as it is sent, never
        whole into memory), as ``kind load`` does."""
        self.run([*self.ctr(), "images", "import", "--local", "-"], stdin=archive,
                 timeout=Timeout.IMAGE_IMPORT)
