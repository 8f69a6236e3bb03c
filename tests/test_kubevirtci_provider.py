import base64
import json
import os
import shlex
from pathlib import Path

import pytest

from core.commands import CommandFailed, CommandResult
from core.errors import SuiteUsageError
from kubevirtci.kubevirtci_provider import (
    JOURNAL_LINES,
    KubevirtciProvider,
    KubevirtciSettings,
    cluster_image,
    node_command,
    parse_last_line,
)
from kubevirtci.provider import NVME_PER_NODE, SANITY_CLIENT_IMAGE


class RecordingRunner:
    """Records every command; answers from a script keyed by the command's first args."""

    def __init__(self, answers=None, cluster_running=False):
        self.calls = []
        self.answers = answers or {}
        self.cluster_running = cluster_running

    def run(self, argv, timeout, *, env=None, cwd=None, label="", stdin=None):
        if list(argv) == ["cluster-up/cli.sh", "ports", "k8s"]:  # is the cluster up?
            return CommandResult(tuple(argv), 0 if self.cluster_running else 1, "")
        self.calls.append({"argv": list(argv), "env": dict(env or {}), "cwd": cwd})
        code, out = self.answers.get(tuple(argv[:2]), (0, ""))
        return CommandResult(tuple(argv), code, out)


@pytest.fixture
def checkout(tmp_path):
    (tmp_path / "cluster-up").mkdir()
    return tmp_path


def provider(checkout, runner, **kw):
    settings = KubevirtciSettings(kubevirt_version="v1.9.0", tag="2611201503-abcdef0",
                                  checkout=checkout, **kw)
    return KubevirtciProvider(settings, runner, base_env={"PATH": "/usr/bin"})


def test_cluster_up_runs_up_sh_with_the_nvme_layout_and_two_nodes(checkout):
    runner = RecordingRunner()
    provider(checkout, runner).up()
    check, call = runner.calls
    assert check["argv"] == ["cluster-up/check.sh"]  # as kubevirtci's `make cluster-up`
    assert call["argv"] == ["cluster-up/up.sh"]
    assert call["cwd"] == checkout
    env = call["env"]
    assert env["KUBEVIRT_PROVIDER_EXTRA_ARGS"].split() == ["--nvme", "1G"] * NVME_PER_NODE
    assert env["KUBEVIRT_NUM_NODES"] == "2"
    assert env["KUBEVIRT_PROVIDER"] == "k8s-1.36"
    assert env["KUBEVIRTCI_TAG"] == "2611201503-abcdef0"
    assert env["PATH"] == "/usr/bin"


def test_settings_from_env_honour_kubevirtci_variables():
    s = KubevirtciSettings.from_env(
        {"KDC_KUBEVIRTCI_TAG": "t1", "KUBEVIRT_PROVIDER": "k8s-1.35", "KUBEVIRT_NUM_NODES": "3",
         "KUBEVIRT_PROVIDER_EXTRA_ARGS": "--nvme 2G"}, "v1.8.4", None, keep_cluster=True)
    assert (s.kubevirt_version, s.tag, s.k8s_provider, s.num_nodes, s.nvme_args,
            s.keep_cluster) == ("v1.8.4", "t1", "k8s-1.35", 3, "--nvme 2G", True)


def test_a_checkout_without_version_txt_needs_a_tag(checkout):
    settings = KubevirtciSettings(kubevirt_version="v1.9.0", checkout=checkout)
    with pytest.raises(SuiteUsageError, match="KDC_KUBEVIRTCI_TAG"):
        KubevirtciProvider(settings, RecordingRunner(), base_env={}).up()


def release_module(tmp_path):
    """A stand-in for the module folder `go mod download` names: kubevirtci/ pinned."""
    module = tmp_path / "module"
    scripts = module / "kubevirtci" / "cluster-up"
    scripts.mkdir(parents=True)
    (scripts / "version.txt").write_text("2606300938-ede497bd\n")
    (scripts / "up.sh").write_text("#!/bin/bash\n")
    (module / "kubevirtci" / "stable_provider.txt").write_text("k8s-1.35\n")
    return module


def test_without_a_checkout_the_releases_own_kubevirtci_is_used_as_pinned(tmp_path,
                                                                         monkeypatch):
    monkeypatch.setattr("kubevirtci.kubevirtci_provider.CACHE_ROOT", tmp_path / "cache")
    download = ("go", "mod")
    printed = "go: a warning\n" + json.dumps({"Dir": str(release_module(tmp_path))}, indent=1)
    runner = RecordingRunner({download: (0, printed)})
    p = KubevirtciProvider(KubevirtciSettings(kubevirt_version="v1.9.0"), runner, base_env={})
    p.up()
    assert runner.calls[0]["argv"] == ["go", "mod", "download", "-json",
                                       "kubevirt.io/kubevirt@v1.9.0"]
    assert p.checkout == tmp_path / "cache" / "kubevirtci-of-kubevirt-v1.9.0"
    assert os.access(p.checkout / "cluster-up" / "up.sh", os.X_OK)
    # The scripts write _ci-configs/ into the copy's own top folder.
    assert p.checkout.stat().st_mode & 0o777 == 0o755
    up = runner.calls[2]
    assert up["argv"] == ["cluster-up/up.sh"] and up["cwd"] == p.checkout
    assert up["env"]["KUBEVIRTCI_TAG"] == "2606300938-ede497bd"
    assert up["env"]["KUBEVIRT_PROVIDER"] == "k8s-1.35"  # the release's stable provider


def test_a_read_only_leftover_of_an_interrupted_copy_is_replaced(tmp_path, monkeypatch):
    monkeypatch.setattr("kubevirtci.kubevirtci_provider.CACHE_ROOT", tmp_path / "cache")
    leftover = tmp_path / "cache" / "kubevirtci-of-kubevirt-v1.9.0.partial" / "cluster-up"
    leftover.mkdir(parents=True)
    leftover.chmod(0o555)
    leftover.parent.chmod(0o555)
    runner = RecordingRunner({("go", "mod"): (0, json.dumps({"Dir": str(release_module(
        tmp_path))}))})
    p = KubevirtciProvider(KubevirtciSettings(kubevirt_version="v1.9.0"), runner, base_env={})
    p.up()
    assert (p.checkout / "cluster-up" / "version.txt").is_file()
    assert not leftover.exists()


def test_go_output_without_a_module_folder_is_one_clear_error(tmp_path, monkeypatch):
    monkeypatch.setattr("kubevirtci.kubevirtci_provider.CACHE_ROOT", tmp_path)
    runner = RecordingRunner({("go", "mod"): (0, "go: nothing\n")})
    p = KubevirtciProvider(KubevirtciSettings(kubevirt_version="v1.9.0"), runner, base_env={})
    with pytest.raises(SuiteUsageError, match="printed no module folder"):
        p.up()


def test_given_path_that_is_not_a_checkout_is_refused(tmp_path):
    with pytest.raises(SuiteUsageError, match="not a kubevirtci checkout"):
        provider(tmp_path, RecordingRunner()).up()


def test_kubeconfig_and_registry_port_are_parsed_from_the_helpers(checkout):
    runner = RecordingRunner({
        ("cluster-up/kubeconfig.sh",): (
            0, "selecting podman\n/ci/_ci-configs/k8s-1.36/.kubeconfig\n"),
        ("cluster-up/cli.sh", "ports"): (0, "5000\n"),
    })
    p = provider(checkout, runner)
    assert p.kubeconfig() == Path("/ci/_ci-configs/k8s-1.36/.kubeconfig")
    assert p.registry_port() == 5000
    assert runner.calls[1]["argv"] == ["cluster-up/cli.sh", "ports", "registry"]


def test_images_are_pushed_to_the_cluster_registry_and_pulled_by_its_name(checkout,
                                                                          monkeypatch):
    built = []
    monkeypatch.setattr("kubevirtci.local.known_images.build_known_archive",
                        lambda name, archive: built.append((name, archive)))
    runner = RecordingRunner({("cluster-up/cli.sh", "ports"): (0, "41234\n")})
    p = provider(checkout, runner)
    p.load_images(["localhost/kdc/nvme-dra-driver:dev"])
    assert built[0][0] == "localhost/kdc/nvme-dra-driver:dev"
    push = runner.calls[-1]["argv"]
    assert push[:3] == ["skopeo", "copy", "--dest-tls-verify=false"]
    assert push[-1] == "docker://localhost:41234/kdc/nvme-dra-driver:dev"
    assert cluster_image("localhost/kdc/nvme-dra-driver:dev") == \
        "registry:5000/kdc/nvme-dra-driver:dev"
    # The sanity client's pods name the image as the nodes pull it, like the driver's.
    p.load_images([SANITY_CLIENT_IMAGE])
    assert built[-1][0] == SANITY_CLIENT_IMAGE
    assert runner.calls[-1]["argv"][-1] == "docker://localhost:41234/kdc/dra-sanity:dev"
    assert p.node_image(SANITY_CLIENT_IMAGE) == "registry:5000/kdc/dra-sanity:dev"


def test_node_commands_go_through_ssh_sh_and_down_respects_keep_cluster(checkout):
    runner = RecordingRunner()
    p = provider(checkout, runner)
    p.node("node02").run(["readlink", "/sys/bus/pci/devices/0000:00:05.0/driver"])
    assert runner.calls[-1]["argv"] == [
        "cluster-up/ssh.sh", "node02", "--",
        node_command(["readlink", "/sys/bus/pci/devices/0000:00:05.0/driver"])]
    p.up()
    p.down()
    assert runner.calls[-1]["argv"] == ["cluster-up/down.sh"]
    kept = RecordingRunner()
    kept_provider = provider(checkout, kept, keep_cluster=True)
    kept_provider.up()
    kept_provider.down()
    assert kept.calls[-1]["argv"] == ["cluster-up/up.sh"]  # brought up, not taken down


def test_a_cluster_that_was_already_up_is_neither_provisioned_nor_removed(checkout):
    """Only the run that brought a cluster up takes it down (as the local provider)."""
    runner = RecordingRunner(cluster_running=True)
    p = provider(checkout, runner)
    p.up()
    p.down()
    assert runner.calls == []


def test_failed_cluster_up_names_the_command_and_the_fix(checkout):
    runner = RecordingRunner({("cluster-up/check.sh",): (2, "no /dev/kvm\n")})
    with pytest.raises(CommandFailed, match=r"`cluster-up/check.sh` exited 2. Fix: .*nested KVM"):
        provider(checkout, runner).up()


def test_parse_last_line_skips_blank_lines():
    assert parse_last_line("a\n\n  b  \n\n") == "b"
    with pytest.raises(ValueError):
        parse_last_line("\n")


def test_device_plugin_controllers_are_bound_to_vfio_on_every_node(checkout):
    runner = RecordingRunner()
    provider(checkout, runner).prepare_device_plugin_devices(["node01", "node02"])
    assert [c["argv"][:3] for c in runner.calls] == [
        ["cluster-up/ssh.sh", "node01", "--"], ["cluster-up/ssh.sh", "node02", "--"]]
    encoded = runner.calls[0]["argv"][3].split()[1]
    script = shlex.split(base64.b64decode(encoded).decode())
    assert script[:3] == ["sudo", "sh", "-c"]
    assert "= nvme-1 ]" in script[3]
    assert "vfio-pci > /sys/bus/pci/devices/$bdf/driver_override" in script[3]


def _docker_on_path(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    docker = bin_dir / "docker"
    docker.write_text("#!/bin/sh\n")
    docker.chmod(0o755)
    return str(bin_dir)


def _preflight(checkout, runner, env):
    settings = KubevirtciSettings(kubevirt_version="v1.9.0", checkout=checkout)
    KubevirtciProvider(settings, runner, base_env=env).preflight()


def test_preflight_refuses_a_machine_without_docker_or_podman_before_any_cluster_work(
        checkout, tmp_path):
    runner = RecordingRunner()
    with pytest.raises(SuiteUsageError, match="no docker on PATH") as err:
        _preflight(checkout, runner, {"PATH": str(tmp_path / "empty"),
                                      "KUBEVIRTCI_PODMAN_SOCKET": str(tmp_path / "none")})
    assert "--provider local" in err.value.fix
    assert runner.calls == []  # neither check.sh nor up.sh ran


def test_preflight_refuses_a_docker_whose_daemon_does_not_answer(checkout, tmp_path):
    refused = "Cannot connect to the Docker daemon at unix:///var/run/docker.sock."
    runner = RecordingRunner({("docker", "ps"): (1, refused + "\n")})
    with pytest.raises(SuiteUsageError, match="Cannot connect to the Docker daemon"):
        _preflight(checkout, runner, {"PATH": _docker_on_path(tmp_path),
                                      "KUBEVIRTCI_PODMAN_SOCKET": str(tmp_path / "none")})
    assert [c["argv"] for c in runner.calls] == [["docker", "ps"]]


def test_preflight_accepts_a_docker_that_answers(checkout, tmp_path):
    runner = RecordingRunner({("docker", "ps"): (0, "CONTAINER ID\n")})
    _preflight(checkout, runner, {"PATH": _docker_on_path(tmp_path),
                                  "KUBEVIRTCI_PODMAN_SOCKET": str(tmp_path / "none")})


def test_component_logs_are_each_nodes_kubelet_and_runtime_journal(checkout, tmp_path):
    runner = RecordingRunner(answers={("cluster-up/ssh.sh", "node02"): (255, "")})
    written = provider(checkout, runner).collect_logs(tmp_path / "logs")
    assert sorted(p.name for p in written) == [
        "node01-crio.log", "node01-kubelet.log", "node02-crio.log", "node02-kubelet.log"]
    assert [call["argv"] for call in runner.calls] == [
        ["cluster-up/ssh.sh", node, "--", node_command(
            ["sudo", "journalctl", "--no-pager", "-u", unit, "-n", str(JOURNAL_LINES)])]
        for node in ("node01", "node02") for unit in ("kubelet", "crio")]
    assert "not exported" in (tmp_path / "logs" / "node02-kubelet.log").read_text()
