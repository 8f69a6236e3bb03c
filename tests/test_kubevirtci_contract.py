"""The kubevirtci provider against kubevirtci's real cluster-up scripts: the ones the
KubeVirt release's Go module carries (KubeVirt's own CI runs them), with a stand-in
container runtime (tests/kubevirtci_stub/docker) in place of the cluster."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from core.commands import CommandFailed, Runner, output
from core.kube import load_api_client, tls_unverified
from core.timeouts import Timeout
from fixtures.options import DEFAULT_KUBEVIRT_VERSION
from kubevirtci.discovery import parse_version
from kubevirtci.kubevirt_code import download
from kubevirtci.kubevirtci_provider import KubevirtciProvider, KubevirtciSettings
from kubevirtci.provider import BIND_DEVICE_PLUGIN_NVME, NVME_PER_NODE
from kubevirtci.releases import release_for

STUB = Path(__file__).parent / "kubevirtci_stub"
SUDO = """#!/usr/bin/env python3
import json, os, sys
with open(os.environ["STUB_LOG"], "a") as out:
    out.write(json.dumps({"bin": "sudo", "argv": sys.argv[1:]}) + "\\n")
"""


@pytest.fixture(scope="module")
def release_scripts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The release's kubevirtci folder, fetched once as the provider fetches it."""
    settings = KubevirtciSettings(kubevirt_version=DEFAULT_KUBEVIRT_VERSION)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("kubevirtci.kubevirtci_provider.CACHE_ROOT", tmp_path_factory.mktemp("c"))
        provider = KubevirtciProvider(settings, Runner(echo=False))
        provider.fetch_release_scripts()
        return provider.checkout


class Cluster:
    """The provider on a copy of the release's scripts, the stub runtime first on PATH."""

    def __init__(self, tmp_path: Path, scripts: Path) -> None:
        self.log = tmp_path / "calls.jsonl"
        node_bin = tmp_path / "node-bin"
        node_bin.mkdir()
        (node_bin / "sudo").write_text(SUDO)
        (node_bin / "sudo").chmod(0o755)
        env = {
            # The interpreter of this test first: the stub's kubectl needs PyYAML.
            "PATH": f"{STUB}:{Path(sys.executable).parent}:/usr/bin:/bin",
            "HOME": str(tmp_path), "STUB_LOG": str(self.log), "STUB_NODE_BIN": str(node_bin),
            # Pin the runtime: detection would otherwise probe a host podman socket.
            "KUBEVIRTCI_RUNTIME": "docker",
        }
        checkout = tmp_path / "kubevirtci"  # each test's own: up.sh writes beside itself
        shutil.copytree(scripts, checkout)
        settings = KubevirtciSettings(kubevirt_version=DEFAULT_KUBEVIRT_VERSION,
                                      checkout=checkout)
        self.provider = KubevirtciProvider(settings, Runner(echo=False), base_env=env)

    def calls(self, kind: str) -> list[dict]:
        lines = self.log.read_text().splitlines() if self.log.exists() else []
        return [c for c in map(json.loads, lines) if c["bin"] == kind]

    def gocli(self) -> list[list[str]]:
        return [c["gocli"] for c in self.calls("docker") if c["gocli"]]


@pytest.fixture
def cluster(tmp_path: Path, release_scripts: Path) -> Cluster:
    return Cluster(tmp_path, release_scripts)


def test_the_release_pins_kubevirtci_and_our_table_agrees(release_scripts):
    tag = (release_scripts / "cluster-up" / "version.txt").read_text().strip()
    assert tag == release_for(parse_version(DEFAULT_KUBEVIRT_VERSION)).kubevirtci_tag
    assert os.access(release_scripts / "cluster-up" / "ssh.sh", os.X_OK)
    stable = (release_scripts / "stable_provider.txt").read_text().strip()
    assert (release_scripts / "cluster-up" / "cluster" / stable / "provider.sh").is_file()


def test_up_runs_gocli_with_the_nvme_layout_and_leaves_an_insecure_kubeconfig(cluster):
    provider = cluster.provider
    provider.up()
    run = next(g for g in cluster.gocli() if g[0] == "run")
    stable = provider.k8s_provider()
    assert run[run.index("--nodes") + 1] == "2"
    assert run[run.index("--prefix") + 1:][:1] == [stable]
    assert " ".join(run).count("--nvme 1G") == NVME_PER_NODE
    images = {a for c in cluster.calls("docker") for a in c["argv"] if a.startswith("quay.io")}
    assert images == {f"quay.io/kubevirtci/gocli:{provider.tag()}"}
    kubeconfig = provider.kubeconfig()
    assert kubeconfig == provider.checkout / "_ci-configs" / stable / ".kubeconfig"
    api = load_api_client(kubeconfig, None)
    assert api.configuration.host == "https://127.0.0.1:33002"
    assert "insecure-skip-tls-verify" in tls_unverified(api.configuration)


def test_registry_port_comes_from_gocli_ports(cluster):
    cluster.provider.up()
    assert cluster.provider.registry_port() == 33001
    assert cluster.gocli()[-1][-2:] == ["ports", "registry"]


def test_a_multi_word_node_command_reaches_the_node_as_one_command(cluster):
    argv = ["sudo", "sh", "-c", "modprobe vfio-pci; echo '*  two spaces'"]
    cluster.provider.node("node01").run(argv)
    (ssh,) = [g for g in cluster.gocli() if "ssh" in g]
    assert ssh[ssh.index("ssh") + 1:ssh.index("ssh") + 3] == ["node01", "--"]
    (sudo,) = cluster.calls("sudo")
    assert sudo["argv"] == argv[1:]


def test_separate_words_would_lose_their_quoting_through_ssh_sh(cluster):
    """Why node commands travel as one line: kubevirtci's own ssh.sh behaviour."""
    cluster.provider.run(["cluster-up/ssh.sh", "node01", "--", "sudo", "sh", "-c",
                          "modprobe vfio-pci; echo hi"], "")
    (sudo,) = cluster.calls("sudo")
    assert sudo["argv"] == ["sh", "-c", "modprobe", "vfio-pci"]  # and `echo hi` ran unprivileged


def test_device_plugin_binding_reaches_every_node_intact(cluster):
    cluster.provider.prepare_device_plugin_devices(["node01", "node02"])
    nodes = [c["node"] for c in cluster.calls("node")]
    assert nodes == ["node01", "node02"]
    scripts = [c["argv"] for c in cluster.calls("sudo")]
    assert scripts == [["sh", "-c", f"modprobe vfio-pci; {BIND_DEVICE_PLUGIN_NVME}"]] * 2


def test_down_removes_the_cluster_by_its_prefix(cluster):
    cluster.provider.up()
    cluster.provider.down()
    assert cluster.gocli()[-1] == ["rm", "--prefix", cluster.provider.k8s_provider()]


def test_node_output_and_failure_come_back(cluster):
    out = cluster.provider.node("node02").run(["sh", "-c", "echo hello"])
    assert out.strip() == "hello"
    with pytest.raises(CommandFailed, match="is node node02 up"):
        cluster.provider.node("node02").run(["sh", "-c", "exit 3"])


def test_a_trees_cluster_sync_reaches_the_cluster_the_provider_brought_up(tmp_path):
    """What `make cluster-sync` of a KubeVirt tree (v1.9.0's, from its module) reads to
    find its cluster, under the environment the source gives it: the same kubevirtci
    settings, and the configuration folder where the provider's kubeconfig.sh looks."""
    tree = Path(str(download("kubevirt.io/kubevirt", DEFAULT_KUBEVIRT_VERSION)["Dir"]))
    assert "\ncluster-sync:\n\t./hack/cluster-sync.sh\n" in (tree / "Makefile").read_text()
    provider = KubevirtciProvider(
        KubevirtciSettings(DEFAULT_KUBEVIRT_VERSION, checkout=tree / "kubevirtci"),
        Runner(echo=False), base_env={"PATH": "/usr/bin:/bin"})
    env = provider.tooling_env()
    # hack/cluster-sync.sh sources hack/config-kubevirtci.sh, then hack/common.sh.
    script = ("source hack/config-kubevirtci.sh; source hack/common.sh >/dev/null 2>&1; "
              'echo "$KUBEVIRTCI_CONFIG_PATH|$KUBEVIRT_PROVIDER|$KUBEVIRT_NUM_NODES|'
              '$KUBEVIRTCI_TAG"')
    seen = output(["bash", "-c", script], Timeout.LOCAL_COMMAND, cwd=tree,
                  env=env).strip().splitlines()[-1]
    config_path, k8s_provider, nodes, tag = seen.split("|")
    assert Path(config_path) == tree / "kubevirtci" / "_ci-configs" == \
        Path(env["KUBEVIRTCI_CONFIG_PATH"])
    assert (k8s_provider, nodes, tag) == (provider.k8s_provider(), "2", provider.tag())


def test_a_second_run_on_a_kept_cluster_neither_provisions_it_again_nor_removes_it(
        cluster, release_scripts):
    cluster.provider.up()
    runs = [c for c in cluster.gocli() if "run" in c[:3]]
    assert runs  # the first up provisioned it
    later = KubevirtciProvider(cluster.provider.settings, Runner(echo=False),
                               base_env=cluster.provider.base_env)
    later.up()
    later.down()
    assert [c for c in cluster.gocli() if "run" in c[:3]] == runs
    assert not any("rm" in c[:3] for c in cluster.gocli())
