"""Which KubeVirt a run judges, for every provider: the source the options pick, bad
combinations refused before any work, what every result says about it, the
configuration a cluster gets, and a tree deployed by its own make cluster-sync on
kubevirtci."""

from pathlib import Path

import pytest

from core.commands import CommandResult
from core.errors import SuiteUsageError
from kubevirtci.capabilities import Capability
from kubevirtci.discovery import DRA_GATES
from kubevirtci.existing import ExistingProvider
from kubevirtci.kubevirt_code import KubeVirtCode
from kubevirtci.kubevirt_install import kubevirt_cr
from kubevirtci.kubevirt_source import (
    BuiltSource,
    KubeVirtIdentity,
    NoKubeVirt,
    cluster_configuration,
    kubevirt_source,
)
from kubevirtci.kubevirtci_provider import KubevirtciProvider, KubevirtciSettings
from kubevirtci.local.provider import LocalProvider

RELEASE = KubeVirtCode("v1.8.2", Path("/mod/kubevirt@v1.8.2"), "3203e9d1ce77af32f6a9ce",
                       "2026-04-20T08:35:48Z")
TREE = KubeVirtCode("v1.9.0-2-g0123-dirty-abcdef012345", Path("/src/kubevirt"), "0123abcd",
                    "2026-11-01T00:00:00Z", tree=True, dirty=True,
                    content_hash="abcdef0123456789")


def test_existing_clusters_are_judged_as_deployed_and_take_no_tree(tmp_path):
    assert kubevirt_source("existing", "v1.9.0", None, False).identity().origin == "deployed"
    with pytest.raises(SuiteUsageError, match="installs nothing") as err:
        kubevirt_source("existing", "v1.9.0", tmp_path, False)
    assert "--provider existing against it" in err.value.fix  # the alternative, named


def test_an_existing_cluster_running_another_kubevirt_than_asked_is_refused_up_front():
    asked = kubevirt_source("existing", "v1.8.4", None, False, version_given=True)
    asked.check_deployed("v1.8.4")
    with pytest.raises(SuiteUsageError, match=r"does not run \(it runs KubeVirt v1.9.0\)") \
            as err:
        asked.check_deployed("v1.9.0")
    assert "leave --kubevirt-version out" in err.value.fix
    with pytest.raises(SuiteUsageError, match="runs no KubeVirt"):
        asked.check_deployed(None)
    # The default version, not asked for, judges whatever is deployed.
    kubevirt_source("existing", "v1.9.0", None, False).check_deployed("v1.8.1")


def test_without_kubevirt_takes_away_what_needs_it_and_says_how_to_get_it(tmp_path):
    source = kubevirt_source("local", "v1.9.0", None, True)
    assert not source.installs and source.identity().origin == "none"
    caps = source.declared_capabilities()
    assert "--without-kubevirt" in caps.reason_missing(Capability.KUBEVIRT)
    assert not caps.has(Capability.GUEST_ACCESS)
    with pytest.raises(SuiteUsageError, match="contradict"):
        kubevirt_source("local", "v1.9.0", tmp_path, True)


def test_every_result_names_the_release_or_the_trees_commit_state_and_content():
    release = KubeVirtIdentity.of(RELEASE)
    assert release.properties() == {"kubevirt_origin": "release", "kubevirt_build": "v1.8.2",
                                     "kubevirt_commit": "3203e9d1ce77af32f6a9ce"}
    assert "release v1.8.2" in release.describe()
    tree = KubeVirtIdentity.of(TREE).properties()
    assert tree["kubevirt_origin"] == "tree" and tree["kubevirt_tree_dirty"] == "true"
    assert tree["kubevirt_content_hash"] == "abcdef0123456789"
    assert tree["kubevirt_tree"] == "/src/kubevirt" and tree["kubevirt_commit"] == "0123abcd"
    assert "dirty" in KubeVirtIdentity.of(TREE).describe()


def test_the_hermetic_cluster_gets_emulation_and_no_virt_template(tmp_path):
    local = LocalProvider(tmp_path)
    config = cluster_configuration(local, built_here=True, version="v1.9.0")
    cr = kubevirt_cr("kubevirt", config)["spec"]["configuration"]
    assert cr["developerConfiguration"]["featureGates"] == list(DRA_GATES)
    assert cr["developerConfiguration"]["useEmulation"] is True
    assert cr["permittedHostDevices"]["pciHostDevices"][0]["resourceName"] == \
        "devices.kubevirt.io/nvme"
    assert cr["virtTemplateDeployment"] == {"enabled": False}
    # the field arrived in v1.9; a release deployed as released keeps virt-template
    assert "virtTemplateDeployment" not in cluster_configuration(local, True, "v1.8.4")
    assert cluster_configuration(ExistingProvider(None), False, "v1.9.0") == {}


class Recording:
    def __init__(self) -> None:
        self.calls: list[tuple[list[str], dict[str, str], Path | None]] = []

    def run(self, argv, timeout, *, env=None, cwd=None, label="", stdin=None):
        self.calls.append((list(argv), dict(env or {}), cwd))
        return CommandResult(tuple(argv), 0, "")


class NoInstall:
    def install(self) -> str:
        return "gates enabled"


def test_a_tree_on_kubevirtci_is_deployed_by_its_own_cluster_sync(tmp_path, monkeypatch):
    from kubevirtci import kubevirt_source as module

    checkout = tmp_path / "kubevirtci"
    (checkout / "cluster-up").mkdir(parents=True)
    (checkout / "cluster-up" / "version.txt").write_text("2606300938-ede497bd\n")
    provider = KubevirtciProvider(KubevirtciSettings("v1.9.0", checkout=checkout), Recording(),
                                  base_env={"PATH": "/usr/bin"})
    runner = Recording()
    installers = []
    monkeypatch.setattr(module, "KubeVirtInstaller",
                        lambda *args: installers.append(args) or NoInstall())
    log = BuiltSource(TREE, runner).deploy(object(), provider, await_node_agents=True)
    [(argv, env, cwd)] = runner.calls
    assert argv == ["make", "cluster-sync"] and cwd == Path("/src/kubevirt")
    assert env["KUBEVIRTCI_TAG"] == "2606300938-ede497bd"
    assert env["KUBEVIRT_NUM_NODES"] == "2"
    assert env["KUBEVIRTCI_CONFIG_PATH"] == str(checkout / "_ci-configs")
    [(_, version, manifest, _, _)] = installers
    assert manifest is None and version == TREE.version  # the gates only, nothing replaced
    assert "make cluster-sync" in log


def test_a_provider_that_cannot_deploy_a_tree_says_so(tmp_path):
    with pytest.raises(SuiteUsageError, match="cannot deploy a KubeVirt tree"):
        BuiltSource(TREE, Recording()).deploy(object(), ExistingProvider(None), True)
    assert NoKubeVirt().deploy(object(), LocalProvider(tmp_path), True).startswith(
        "KubeVirt not installed")


class DeploymentKube:
    """find() answers one Deployment; its pods are none (nothing failing)."""

    def __init__(self, deployment: dict) -> None:
        self.deployment = deployment

    def find(self, kind, name, namespace=None):
        return self.deployment

    def list(self, kind, namespace=None, label_selector=None):
        return []


def test_an_operator_is_ready_only_once_its_new_template_rolled_out():
    from kubevirtci.kubevirt_install import deployment_available

    rolling = {"metadata": {"generation": 2, "namespace": "kubevirt"},
               "spec": {"selector": {"matchLabels": {"k": "v"}}},
               "status": {"observedGeneration": 2, "replicas": 3, "updatedReplicas": 1,
                          "readyReplicas": 2,
                          "conditions": [{"type": "Available", "status": "True"}]}}
    # the old release's pods still answer: not the operator that was applied
    assert not deployment_available(DeploymentKube(rolling), "virt-operator", "kubevirt")
    done = {**rolling, "status": {**rolling["status"], "replicas": 2, "updatedReplicas": 2}}
    assert deployment_available(DeploymentKube(done), "virt-operator", "kubevirt")


def test_a_build_that_failed_leaves_the_report_header_alone(tmp_path, monkeypatch):
    from kubevirtci.local import kubevirt_module

    def refused(code, cache_root):
        raise SuiteUsageError("KubeVirt v1.6.1 cannot be built here", "serve the module")

    monkeypatch.setattr(kubevirt_module, "build_module", refused)
    source, local = BuiltSource(RELEASE, Recording()), LocalProvider(tmp_path)
    assert source.notes(local) == ()  # before the build: nothing to say, nothing built
    monkeypatch.setattr(local, "emulated_vfio_front", lambda: tmp_path / "front")
    with pytest.raises(SuiteUsageError):
        source.prepare(local)
    assert source.notes(local) == ()  # the failure is the session's error, not the header's
