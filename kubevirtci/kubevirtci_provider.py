"""The kubevirtci provider: QEMU-based nodes with emulated NVMe and intel-iommu, so VFIO
passthrough is real inside them. Needs nested KVM; every command it runs goes through
an injectable runner so its command and environment building are unit-tested."""

from __future__ import annotations

import base64
import copy
import json
import os
import shlex
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import filelock

from core.commands import CommandFailed, CommandRunner, Stdin, check
from core.errors import SuiteUsageError
from core.timeouts import Timeout
from kubevirtci.capabilities import Capabilities, Capability
from kubevirtci.provider import (
    BIND_DEVICE_PLUGIN_NVME,
    NVME_PER_NODE,
    Node,
    NodeCommandFailed,
    Provider,
)

DEFAULT_K8S_PROVIDER = "k8s-1.36"  # when a checkout names no stable provider
DEFAULT_NUM_NODES = 2
DEFAULT_NVME_ARGS = " ".join(["--nvme 1G"] * NVME_PER_NODE)
CLUSTER_REGISTRY = "registry:5000"  # the in-cluster name of kubevirtci's registry
JOURNAL_UNITS = ("kubelet", "crio")  # kubevirtci's nodes run CRI-O under systemd
JOURNAL_LINES = 5000  # the time around a failure
PODMAN_SOCKET = "/run/podman/podman.sock"  # kubevirtci's default KUBEVIRTCI_PODMAN_SOCKET
CACHE_ROOT = Path(os.environ.get("KDC_CACHE", Path.home() / ".cache" / "kdc"))


@dataclass(frozen=True)
class KubevirtciSettings:
    kubevirt_version: str  # whose module's kubevirtci/ folder is used by default
    checkout: Path | None = None  # a kubevirtci checkout (--kubevirtci-path) instead
    tag: str | None = None  # KUBEVIRTCI_TAG; default: the checkout's cluster-up/version.txt
    k8s_provider: str | None = None  # default: the checkout's stable_provider.txt
    num_nodes: int = DEFAULT_NUM_NODES
    nvme_args: str = DEFAULT_NVME_ARGS
    keep_cluster: bool = False

    @classmethod
    def from_env(
        cls, env: Mapping[str, str], kubevirt_version: str, checkout: Path | None,
        keep_cluster: bool,
    ) -> KubevirtciSettings:
        return cls(
            kubevirt_version=kubevirt_version,
            checkout=checkout,
            tag=env.get("KDC_KUBEVIRTCI_TAG") or env.get("KUBEVIRTCI_TAG") or None,
            k8s_provider=env.get("KUBEVIRT_PROVIDER") or None,
            num_nodes=int(env.get("KUBEVIRT_NUM_NODES", DEFAULT_NUM_NODES)),
            nvme_args=env.get("KUBEVIRT_PROVIDER_EXTRA_ARGS", DEFAULT_NVME_ARGS),
            keep_cluster=keep_cluster,
        )


class KubevirtciProvider(Provider):
    name = "kubevirtci"
    emulated_devices = (
        "NVMe controllers are QEMU-emulated (1b36:0010) inside kubevirtci nodes",)

    def __init__(
        self, settings: KubevirtciSettings, runner: CommandRunner,
        base_env: Mapping[str, str] | None = None,
    ) -> None:
        self.settings = settings
        self.runner = runner
        self.base_env = dict(os.environ if base_env is None else base_env)
        self.started_here = False  # down() removes only a cluster this run brought up

    @property
    def checkout(self) -> Path:
        """A folder holding ``cluster-up/``: the given checkout, or the kubevirtci folder
        of the KubeVirt release's module, which KubeVirt's own CI runs."""
        return self.settings.checkout or (
            CACHE_ROOT / f"kubevirtci-of-kubevirt-{self.settings.kubevirt_version}")

    def _pinned(self, name: str, fallback: str | None, fix: str) -> str:
        path = self.checkout / name
        if path.is_file():
            return path.read_text().strip()
        if fallback is None:
            raise SuiteUsageError(f"{self.checkout} has no {name} to pin kubevirtci", fix)
        return fallback

    def tag(self) -> str:
        return self.settings.tag or self._pinned(
            "cluster-up/version.txt", None,
            "export KDC_KUBEVIRTCI_TAG=<kubevirtci tag> for a checkout without version.txt")

    def k8s_provider(self) -> str:
        return self.settings.k8s_provider or self._pinned(
            "stable_provider.txt", DEFAULT_K8S_PROVIDER, "")

    def env(self) -> dict[str, str]:
        s = self.settings
        return {
            **self.base_env,
            "KUBEVIRTCI_TAG": self.tag(),
            "KUBEVIRT_PROVIDER": self.k8s_provider(),
            "KUBEVIRT_NUM_NODES": str(s.num_nodes),
            "KUBEVIRT_PROVIDER_EXTRA_ARGS": s.nvme_args,
        }

    def fetch_release_scripts(self) -> None:
        """Copy the release module's kubevirtci/ folder out of the read-only module cache
        (the scripts write their configuration beside themselves, and must be runnable).
        One copy at a time: pytest-xdist workers all bring the cluster up."""
        module = f"kubevirt.io/kubevirt@{self.settings.kubevirt_version}"
        fix = ("check that Go is installed, that the Go module proxy is reachable (`go env "
               "GOPROXY`) and that --kubevirt-version names a KubeVirt release")
        self.checkout.parent.mkdir(parents=True, exist_ok=True)
        with filelock.FileLock(str(self.checkout) + ".lock"):
            if (self.checkout / "cluster-up").is_dir():
                return
            result = self.runner.run(["go", "mod", "download", "-json", module],
                                     Timeout.GO_MODULES, env=self.base_env, label="go")
            source = module_dir(check(result, fix).stdout, module) / "kubevirtci"
            staging = self.checkout.with_name(self.checkout.name + ".partial")
            remove_tree(staging)
            shutil.copytree(source, staging)
            for path in [staging, *staging.rglob("*")]:
                path.chmod(0o755 if path.is_dir() or path.suffix == ".sh" else 0o644)
            staging.rename(self.checkout)

    def tooling_env(self) -> dict[str, str]:
        """What a KubeVirt tree's ``make cluster-sync`` needs to reach this cluster: the
        same kubevirtci settings and configuration folder the cluster was brought up
        with."""
        return {**self.env(), "KUBEVIRTCI_CONFIG_PATH": str(self.checkout / "_ci-configs")}

    def run(self, argv: list[str], hint: str,
            timeout: Timeout = Timeout.KUBEVIRTCI_SCRIPT) -> str:
        result = self.runner.run(argv, timeout, env=self.env(),
                                 cwd=self.checkout, label="kubevirtci")
        return check(result, hint).stdout

    def preflight(self) -> None:
        """kubevirtci runs its nodes as containers, on podman when its socket answers,
        else on docker when ``docker ps`` works
        (cluster-up/cluster/ephemeral-provider-common.sh): the same test, up front."""
        podman_socket = Path(self.base_env.get("KUBEVIRTCI_PODMAN_SOCKET", PODMAN_SOCKET))
        if self.base_env.get("KUBEVIRTCI_RUNTIME") != "docker" and podman_socket.is_socket():
            return
        if shutil.which("docker", path=self.base_env.get("PATH")):
            probe = self.runner.run(["docker", "ps"], Timeout.CONTAINER_RUNTIME_PROBE,
                                    env=self.base_env, label="kubevirtci")
            if not probe.failed:
                return
            why = probe.summary()
        else:
            why = "no docker on PATH"
        raise SuiteUsageError(
            f"provider kubevirtci runs its nodes in containers and finds no working runtime "
            f"here: {why}, no podman socket at {podman_socket}",
            "start docker or podman's socket (and give it /dev/kvm), or use the hermetic "
            "cluster instead: --provider local")

    def up(self) -> None:
        if self.settings.checkout is None:
            self.fetch_release_scripts()
        elif not (self.checkout / "cluster-up").is_dir():
            raise SuiteUsageError(
                f"{self.checkout} is not a kubevirtci checkout (no cluster-up/)",
                "pass --kubevirtci-path with the root of a kubevirtci clone, or leave it "
                "out to use the kubevirtci of the KubeVirt release (--kubevirt-version)",
            )
        if self.running():
            return  # a kept cluster: this run neither provisions nor removes it
        self.started_here = True
        # What kubevirtci's `make cluster-up` runs.
        for script in ("cluster-up/check.sh", "cluster-up/up.sh"):
            self.run([script], "kubevirtci needs docker or podman and nested KVM (/dev/kvm); "
                     "see the output of cluster-up/check.sh above")

    def kubeconfig(self) -> Path:
        out = self.run(["cluster-up/kubeconfig.sh"], "bring the cluster up first")
        return Path(parse_last_line(out))

    def running(self) -> bool:
        """Whether the cluster's containers run: gocli's ``ports`` inspects them."""
        probe = self.runner.run(["cluster-up/cli.sh", "ports", "k8s"],
                                Timeout.CONTAINER_RUNTIME_PROBE, env=self.env(),
                                cwd=self.checkout, label="kubevirtci")
        return not probe.failed

    def registry_port(self) -> int:
        out = self.run(["cluster-up/cli.sh", "ports", "registry"], "is the cluster up?")
        return int(parse_last_line(out))

    def push_command(self, archive: Path, image: str, port: int) -> list[str]:
        """Copy a locally built OCI archive to the cluster registry (skopeo, no daemon)."""
        name = image.split("/", 1)[1] if "/" in image else image
        return ["skopeo", "copy", "--dest-tls-verify=false", f"oci-archive:{archive}",
                f"docker://localhost:{port}/{name}"]

    def load_images(self, images: list[str]) -> None:
        """Build each image as an OCI archive here and push it to the cluster registry."""
        from kubevirtci.local.known_images import build_known_archive

        port = self.registry_port()
        for image in images:
            archive = CACHE_ROOT / "images" / (image.replace("/", "_").replace(":", "_") + ".tar")
            build_known_archive(image, archive)
            check(self.runner.run(self.push_command(archive, image, port), Timeout.IMAGE_PUSH,
                                  label="push"),
                  "install skopeo (apt-get install skopeo)")

    def node_image(self, image: str) -> str:
        return cluster_image(image)

    def adapt_manifest(self, doc: dict[str, Any]) -> dict[str, Any]:
        """Images pushed by load_images are pulled by the nodes from ``registry:5000``."""
        if doc.get("kind") != "DaemonSet":
            return doc
        out = copy.deepcopy(doc)
        for container in out["spec"]["template"]["spec"]["containers"]:
            container["image"] = self.node_image(container["image"])
        return out

    def prepare_device_plugin_devices(self, nodes: list[str]) -> None:
        """Give KubeVirt's PCI device plugin one controller per node: it only offers
        functions bound to vfio-pci, and the DRA driver leaves alone what others bound."""
        for node in nodes:
            self.node(node).run(["sudo", "sh", "-c",
                                 f"modprobe vfio-pci; {BIND_DEVICE_PLUGIN_NVME}"])

    def node(self, name: str) -> Node:
        return SshNode(name, self)

    def declared_capabilities(self) -> Capabilities:
        caps = Capabilities()
        for cap in (Capability.NODE_ACCESS, Capability.GUEST_ACCESS, Capability.VFIO,
                    Capability.HOST_DEVICE_VMS, Capability.DRIVER_PLUGIN_SOCKET,
                    Capability.KUBELET_RESTART, Capability.DRIVER_DISRUPTION):
            caps.grant(cap)
        return caps

    def collect_logs(self, dest: Path) -> list[Path]:
        """Each node's kubelet and container runtime journal (the last lines of each),
        as kind's ``export logs`` takes them; a node that does not answer is written
        down, not raised."""
        dest.mkdir(parents=True, exist_ok=True)
        written = []
        for index in range(1, self.settings.num_nodes + 1):
            node = f"node{index:02d}"
            for unit in JOURNAL_UNITS:
                path = dest / f"{node}-{unit}.log"
                try:
                    text = self.node(node).run(["sudo", "journalctl", "--no-pager", "-u", unit,
                                                "-n", str(JOURNAL_LINES)])
                except (NodeCommandFailed, CommandFailed) as err:
                    text = f"(not exported: {err})\n"
                path.write_text(text)
                written.append(path)
        return written

    def down(self) -> None:
        if self.settings.keep_cluster or not self.started_here:
            return
        self.run(["cluster-up/down.sh"], "remove the cluster's containers by hand")


class SshNode(Node):
    """A kubevirtci node, reached through ``cluster-up/ssh.sh``."""

    def __init__(self, name: str, provider: KubevirtciProvider) -> None:
        self.name = name
        self.provider = provider

    def run(self, argv: list[str], stdin: Stdin = None,
            timeout: Timeout = Timeout.NODE_COMMAND) -> str:
        if stdin is not None:
            raise NodeCommandFailed(f"on {self.name}: ssh.sh takes no input")
        return self.provider.run(["cluster-up/ssh.sh", self.name, "--", node_command(argv)],
                                 f"is node {self.name} up?", timeout)


    def restart_kubelet(self) -> None:
        self.run(["sudo", "systemctl", "restart", "kubelet"])


def node_command(argv: list[str]) -> str:
    """One command line for ssh.sh. Its words pass, unquoted, through the node
    container's ssh.sh and ssh, which joins them with spaces: separate words would lose
    their quoting (and glob in the container). The command travels base64-encoded, which
    has neither spaces nor glob characters, and the node's shell decodes and runs it."""
    encoded = base64.b64encode(shlex.join(argv).encode()).decode()
    return f"echo {encoded} | base64 -d | sh"


def module_dir(output: str, module: str) -> Path:
    """The module's folder from `go mod download -json` output (which may carry Go's
    own messages around the JSON object)."""
    start = output.find("{")
    try:
        return Path(json.JSONDecoder().raw_decode(output[start:])[0]["Dir"])
    except (ValueError, KeyError) as err:
        raise SuiteUsageError(f"`go mod download -json {module}` printed no module folder: "
                              f"{output.strip()[:300]}", "run it by hand to see why") from err


def remove_tree(path: Path) -> None:
    """Remove a folder even where a copy from the module cache left it read-only."""
    if not path.exists():
        return
    for folder in [path, *(p for p in path.rglob("*") if p.is_dir() and not p.is_symlink())]:
        folder.chmod(0o755)
    shutil.rmtree(path)


def cluster_image(image: str) -> str:
    """``localhost/kdc/x:tag`` as kubevirtci nodes pull it: ``registry:5000/kdc/x:tag``."""
    name = image.split("/", 1)[1] if "/" in image else image
    return f"{CLUSTER_REGISTRY}/{name}"


def parse_last_line(output: str) -> str:
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    if not lines:
        raise ValueError("command printed nothing")
    return lines[-1]
