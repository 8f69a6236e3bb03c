"""The kubevirtci provider: QEMU-based nodes with emulated NVMe and intel-iommu, so VFIO
passthrough is real inside them. Needs nested KVM; every command it runs goes through
an injectable runner so its command and environment building are unit-tested."""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.errors import SuiteUsageError
from kubevirtci.capabilities import Capabilities, Capability
from kubevirtci.provider import BIND_DEVICE_PLUGIN_NVME, Node, NodeCommandFailed, Provider
from kubevirtci.runner import CommandRunner, check

KUBEVIRTCI_REPO = "https://github.com/kubevirt/kubevirtci.git"
DEFAULT_K8S_PROVIDER = "k8s-1.36"  # newest k8s provider of kubevirtci main (Aug 2026)
DEFAULT_NUM_NODES = 2
DEFAULT_NVME_ARGS = "--nvme 1G --nvme 1G"
CLUSTER_REGISTRY = "registry:5000"  # the in-cluster name of kubevirtci's registry
CACHE_ROOT = Path(os.environ.get("KDC_CACHE", Path.home() / ".cache" / "kdc"))


@dataclass(frozen=True)
class KubevirtciSettings:
    tag: str  # kubevirtci release tag: clone ref and KUBEVIRTCI_TAG (gocli image tag)
    checkout: Path | None = None
    k8s_provider: str = DEFAULT_K8S_PROVIDER
    num_nodes: int = DEFAULT_NUM_NODES
    nvme_args: str = DEFAULT_NVME_ARGS
    keep_cluster: bool = False

    @classmethod
    def from_env(
        cls, env: Mapping[str, str], checkout: Path | None, keep_cluster: bool
    ) -> KubevirtciSettings:
        tag = env.get("KDC_KUBEVIRTCI_TAG") or env.get("KUBEVIRTCI_TAG")
        if not tag:
            raise SuiteUsageError(
                "provider 'kubevirtci' needs a pinned kubevirtci tag",
                "export KDC_KUBEVIRTCI_TAG=<tag> (a kubevirtci release tag, e.g. the "
                "kubevirtci_git_hash of your KubeVirt checkout's hack/config-default.sh)",
            )
        return cls(
            tag=tag,
            checkout=checkout,
            k8s_provider=env.get("KUBEVIRT_PROVIDER", DEFAULT_K8S_PROVIDER),
            num_nodes=int(env.get("KUBEVIRT_NUM_NODES", DEFAULT_NUM_NODES)),
            nvme_args=env.get("KUBEVIRT_PROVIDER_EXTRA_ARGS", DEFAULT_NVME_ARGS),
            keep_cluster=keep_cluster,
        )


class KubevirtciProvider(Provider):
    name = "kubevirtci"
    emulated = ("NVMe controllers are QEMU-emulated (1b36:0010) inside kubevirtci nodes",)

    def __init__(
        self, settings: KubevirtciSettings, runner: CommandRunner,
        base_env: Mapping[str, str] | None = None,
    ) -> None:
        self.settings = settings
        self.runner = runner
        self.base_env = dict(os.environ if base_env is None else base_env)

    @property
    def checkout(self) -> Path:
        return self.settings.checkout or CACHE_ROOT / f"kubevirtci-{self.settings.tag}"

    def env(self) -> dict[str, str]:
        s = self.settings
        return {
            **self.base_env,
            "KUBEVIRTCI_TAG": s.tag,
            "KUBEVIRT_PROVIDER": s.k8s_provider,
            "KUBEVIRT_NUM_NODES": str(s.num_nodes),
            "KUBEVIRT_PROVIDER_EXTRA_ARGS": s.nvme_args,
        }

    def clone_command(self) -> list[str]:
        return ["git", "clone", "--depth", "1", "--branch", self.settings.tag, KUBEVIRTCI_REPO,
                str(self.checkout)]

    def run(self, argv: list[str], hint: str) -> str:
        result = self.runner.run(argv, env=self.env(), cwd=self.checkout, label="kubevirtci")
        return check(result, hint).stdout

    def up(self) -> None:
        if not (self.checkout / "cluster-up").is_dir():
            if self.settings.checkout is not None:
                raise SuiteUsageError(
                    f"{self.checkout} is not a kubevirtci checkout (no cluster-up/)",
                    "pass --kubevirtci-path with the root of a kubevirtci clone",
                )
            self.checkout.parent.mkdir(parents=True, exist_ok=True)
            check(
                self.runner.run(self.clone_command(), env=self.env(), label="git"),
                f"check that tag {self.settings.tag} exists in kubevirt/kubevirtci",
            )
        self.run(["make", "cluster-up"], "kubevirtci needs docker or podman and nested KVM "
                  "(/dev/kvm); see cluster-up/check.sh output above")

    def kubeconfig(self) -> Path:
        out = self.run(["cluster-up/kubeconfig.sh"], "run `make cluster-up` first")
        return Path(parse_last_line(out))

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
        from kubevirtci.local.cluster import build_driver_archive

        port = self.registry_port()
        for image in images:
            archive = CACHE_ROOT / "images" / (image.replace("/", "_").replace(":", "_") + ".tar")
            build_driver_archive(image, archive)
            check(self.runner.run(self.push_command(archive, image, port), label="push"),
                  "install skopeo (apt-get install skopeo)")

    def adapt_manifest(self, doc: dict[str, Any]) -> dict[str, Any]:
        """Images pushed by load_images are pulled by the nodes from ``registry:5000``."""
        if doc.get("kind") != "DaemonSet":
            return doc
        out = copy.deepcopy(doc)
        for container in out["spec"]["template"]["spec"]["containers"]:
            container["image"] = cluster_image(container["image"])
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
                    Capability.HOST_DEVICE_VMS, Capability.DRIVER_PLUGIN_SOCKET):
            caps.grant(cap)
        return caps

    def down(self) -> None:
        if self.settings.keep_cluster:
            return
        self.run(["make", "cluster-down"], "remove the cluster's containers by hand")


class SshNode(Node):
    """A kubevirtci node, reached through ``cluster-up/ssh.sh``."""

    def __init__(self, name: str, provider: KubevirtciProvider) -> None:
        self.name = name
        self.provider = provider

    def run(self, argv: list[str], stdin: bytes | None = None) -> str:
        if stdin is not None:
            raise NodeCommandFailed(f"on {self.name}: ssh.sh takes no input")
        return self.provider.run(["cluster-up/ssh.sh", self.name, "--", *argv],
                                  f"is node {self.name} up?")


def cluster_image(image: str) -> str:
    """``localhost/kdc/x:tag`` as kubevirtci nodes pull it: ``registry:5000/kdc/x:tag``."""
    name = image.split("/", 1)[1] if "/" in image else image
    return f"{CLUSTER_REGISTRY}/{name}"


def parse_last_line(output: str) -> str:
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    if not lines:
        raise ValueError("command printed nothing")
    return lines[-1]
