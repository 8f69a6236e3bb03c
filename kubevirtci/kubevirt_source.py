"""Which KubeVirt a run judges, built how and deployed how, for every provider: a
release, a KubeVirt tree, what the cluster already runs, or none. Providers keep only
infrastructure (bring up, tear down, kubeconfig, nodes, load an image); this is the one
place that knows where KubeVirt comes from."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.commands import CommandRunner, Runner, check
from core.errors import SuiteUsageError
from core.kube import Kube
from core.timeouts import Timeout
from kubevirtci.capabilities import Capabilities, Capability
from kubevirtci.kubevirt_code import KubeVirtCode, release_code, tree_code
from kubevirtci.kubevirt_install import (
    KubeVirtInstaller,
    release_operator_manifest,
    supports_virt_template_switch,
)
from kubevirtci.provider import Provider

if TYPE_CHECKING:
    from kubevirtci.local.kubevirt_module import BuildModule

NO_KUBEVIRT = (
    "KubeVirt is not installed (--without-kubevirt); run without it to deploy KubeVirt, "
    "or use --provider existing on a cluster that runs it"
)
NOT_NEEDED = "no selected test needs KubeVirt, so none was built or deployed"
# What --without-kubevirt takes away (discovery would say only "not installed").
KUBEVIRT_CAPABILITIES = (
    Capability.KUBEVIRT, Capability.KUBEVIRT_DRA_GATES, Capability.RUNNING_VMS,
    Capability.GUEST_ACCESS, Capability.HOST_DEVICE_VMS, Capability.DEVICE_PLUGIN_NVME,
    Capability.LAUNCHER_METADATA, Capability.KUBEVIRT_DEVICE_STATUS,
    Capability.PERSISTENT_DRA_CLAIMS,
)


@dataclass(frozen=True)
class KubeVirtIdentity:
    """Which KubeVirt ran, as every result names it."""

    origin: str  # release | tree | deployed | none
    why_none: str = "--without-kubevirt"  # origin none: why
    version: str = ""
    commit: str = ""
    dirty: bool = False
    content_hash: str = ""
    path: str = ""

    @classmethod
    def of(cls, code: KubeVirtCode) -> KubeVirtIdentity:
        return cls("tree" if code.tree else "release", version=code.version,
                   commit=code.commit, dirty=code.dirty, content_hash=code.content_hash,
                   path=str(code.source) if code.tree else "")

    def describe(self) -> str:
        if self.origin == "tree":
            state = f"dirty, content {self.content_hash[:12]}" if self.dirty else "clean"
            return f"tree {self.path} at {self.commit[:14]} ({state}), built as {self.version}"
        if self.origin == "release":
            return f"release {self.version} (commit {self.commit[:14]})"
        if self.origin == "deployed":
            return f"as deployed on the cluster{f' ({self.version})' if self.version else ''}"
        return f"none ({self.why_none})"

    def properties(self) -> dict[str, str]:
        """JUnit run properties (and the certification bundle's facts)."""
        props = {"kubevirt_origin": self.origin, "kubevirt_build": self.version or "-"}
        if self.commit:
            props["kubevirt_commit"] = self.commit
        if self.origin == "tree":
            props |= {"kubevirt_tree": self.path, "kubevirt_tree_dirty": str(self.dirty).lower(),
                      "kubevirt_content_hash": self.content_hash}
        return props


class KubeVirtSource(ABC):
    """Which KubeVirt, built how, deployed how."""

    installs = True

    @abstractmethod
    def identity(self) -> KubeVirtIdentity: ...

    def notes(self, provider: Provider) -> tuple[str, ...]:
        """How it is built for the provider, where that differs from KubeVirt's own
        build (for the report header)."""
        return ()

    def declared_capabilities(self) -> Capabilities:
        return Capabilities()

    def prepare(self, provider: Provider) -> None:
        """Build what deploying onto the provider's cluster needs (cached), so that the
        long work happens before the tests, where its progress shows."""
        return

    @abstractmethod
    def deploy(self, kube: Kube, provider: Provider, await_node_agents: bool) -> str:
        """Deploy (or redeploy) onto the provider's cluster; what was done, for the log."""

    def check_deployed(self, deployed_version: str | None) -> None:
        """Refuse (SuiteUsageError) a cluster whose KubeVirt this source cannot judge as
        asked, once, before any test; the sources that deploy replace what runs."""
        return


def cluster_configuration(provider: Provider, built_here: bool, version: str
                          ) -> dict[str, Any]:
    """``spec.configuration`` the cluster needs: software emulation where nodes have no
    usable KVM; virt-template left out where KubeVirt is built here (its images are
    not built from KubeVirt's module)."""
    config: dict[str, Any] = {}
    if not provider.node_kvm:
        config["developerConfiguration"] = {"useEmulation": True}
    if built_here and supports_virt_template_switch(version):
        config["virtTemplateDeployment"] = {"enabled": False}
    return config


class BuiltSource(KubeVirtSource):
    """KubeVirt code (a release or a tree): built here for a cluster that pulls from no
    registry; elsewhere deployed as released (a release) or as KubeVirt developers
    deploy a tree (its ``make cluster-sync``)."""

    def __init__(self, code: KubeVirtCode, runner: CommandRunner | None = None) -> None:
        self.code = code
        self._module: BuildModule | None = None
        self._built: tuple[list[Path], list[dict[str, Any]]] | None = None
        self.runner = runner or Runner()

    def build_module(self) -> BuildModule:
        from kubevirtci.local import components, kubevirt_module

        if self._module is None:
            self._module = kubevirt_module.build_module(self.code, components.CACHE_ROOT)
        return self._module

    def identity(self) -> KubeVirtIdentity:
        return KubeVirtIdentity.of(self.code)

    def notes(self, provider: Provider) -> tuple[str, ...]:
        """The build's exceptions once ``prepare`` has made its module: reporting never
        starts (or repeats) a build, nor raises for one that failed."""
        if provider.pulls_public_images or self._module is None:
            return ()
        from kubevirtci.local import kubevirt as hermetic

        return tuple(hermetic.build_notes(self._module))

    def deploy(self, kube: Kube, provider: Provider, await_node_agents: bool) -> str:
        code = self.code
        built_here = not provider.pulls_public_images
        if built_here:
            manifest = self._build_here(provider)
        elif code.tree:
            return self._cluster_sync(kube, provider, await_node_agents)
        else:
            manifest = release_operator_manifest(code.version)
        installer = KubeVirtInstaller(kube, code.version, lambda: manifest,
                                      cluster_configuration(provider, built_here, code.version),
                                      await_node_agents)
        return installer.install()

    def prepare(self, provider: Provider) -> None:
        """Built from its code here (cached by content) where nodes pull no images."""
        if provider.pulls_public_images or self._built is not None:
            return
        from kubevirtci.local import kubevirt as hermetic

        front = provider.emulated_vfio_front()
        if front is None:
            raise SuiteUsageError(f"provider {provider.name} cannot run KubeVirt built here",
                                  "use --provider local")
        self._built = hermetic.build(self.build_module(), front)

    def _build_here(self, provider: Provider) -> list[dict[str, Any]]:
        """Its images loaded onto the nodes, as kind loads an image archive."""
        self.prepare(provider)
        assert self._built is not None
        archives, manifest = self._built
        provider.load_image_archives(archives)
        return manifest

    def _cluster_sync(self, kube: Kube, provider: Provider, await_node_agents: bool) -> str:
        """The tree's ``make cluster-sync`` against the provider's cluster, as KubeVirt
        developers run it; then the DRA gates as for any installed KubeVirt."""
        env = provider.tooling_env()
        if env is None:
            raise SuiteUsageError(
                f"provider {provider.name} cannot deploy a KubeVirt tree",
                "use --provider kubevirtci or local, or deploy the tree yourself and run "
                "--provider existing against it")
        check(self.runner.run(["make", "cluster-sync"], Timeout.CLUSTER_SYNC, env=env,
                              cwd=self.code.source, label="cluster-sync"),
              "see `make cluster-sync` above; it needs the tree's build prerequisites "
              "(docker or podman)")
        installer = KubeVirtInstaller(kube, self.code.version, None, {}, await_node_agents)
        return f"{self.code.version} deployed by its make cluster-sync; " + installer.install()


class DeployedSource(KubeVirtSource):
    """What the cluster already runs (provider ``existing``): nothing is installed. A
    version asked for explicitly must be the one deployed."""

    installs = False

    def __init__(self, asked_version: str | None = None) -> None:
        self.asked_version = asked_version

    def check_deployed(self, deployed_version: str | None) -> None:
        asked = self.asked_version
        if asked is None or deployed_version == asked:
            return
        runs = f"runs KubeVirt {deployed_version}" if deployed_version else "runs no KubeVirt"
        raise SuiteUsageError(
            f"--kubevirt-version {asked} asks for a KubeVirt the cluster does not run (it "
            f"{runs}), and provider 'existing' installs nothing",
            f"deploy {asked} on the cluster first, or leave --kubevirt-version out to judge "
            "what it runs, or use --provider local to have the suite deploy it")

    def identity(self) -> KubeVirtIdentity:
        return KubeVirtIdentity("deployed")

    def deploy(self, kube: Kube, provider: Provider, await_node_agents: bool) -> str:
        return "KubeVirt as deployed on the cluster"


class NoKubeVirt(KubeVirtSource):
    """--without-kubevirt, or no selected test needs KubeVirt: pod-level and driver
    suites only."""

    installs = False

    def __init__(self, why: str = NO_KUBEVIRT) -> None:
        self.why = why

    def identity(self) -> KubeVirtIdentity:
        short = "--without-kubevirt" if self.why == NO_KUBEVIRT else "not needed"
        return KubeVirtIdentity("none", why_none=short)

    def declared_capabilities(self) -> Capabilities:
        caps = Capabilities()
        for cap in KUBEVIRT_CAPABILITIES:
            caps.deny(cap, self.why)
        return caps

    def deploy(self, kube: Kube, provider: Provider, await_node_agents: bool) -> str:
        return f"KubeVirt not installed ({self.identity().why_none})"


def kubevirt_source(provider: str, version: str, tree: Path | None, without: bool,
                    version_given: bool = False) -> KubeVirtSource:
    """The source the options ask for, its code resolved (a release's download, a tree's
    layout, describe and content hash): bad input is one usage error, before any cluster
    or build work."""
    if provider == "existing":
        if tree is not None:
            raise SuiteUsageError(
                "--kubevirt-source builds and deploys a tree, and provider 'existing' "
                "installs nothing",
                "deploy the tree yourself (its `make cluster-sync`), then run --provider "
                "existing against it; or use --provider local or kubevirtci")
        return DeployedSource(version if version_given else None)
    if without:
        if tree is not None:
            raise SuiteUsageError("--kubevirt-source and --without-kubevirt contradict",
                                  "pass one of them")
        return NoKubeVirt()
    return BuiltSource(tree_code(tree) if tree is not None else release_code(version))
