"""The hermetic cluster's own logic, without starting it."""

import datetime
import json
import logging
import os
import tarfile
from pathlib import Path

import pytest
import yaml
from cryptography import x509

from core.errors import SuiteUsageError
from kubevirtci.capabilities import Capability
from kubevirtci.local import cluster as cluster_module
from kubevirtci.local import processes
from kubevirtci.local.cluster import LocalCluster
from kubevirtci.local.images import ImageSpec, archive_images, write_oci_archive
from kubevirtci.local.layout import ClusterConfig, Layout
from kubevirtci.local.network import node_addresses
from kubevirtci.local.node_config import (
    EMULATED_PCI_NRI_PLUGIN,
    NODE_PROGRAMS,
    NodeCredentials,
    write_node_credentials,
    write_node_root,
)
from kubevirtci.local.nodes import HermeticNode
from kubevirtci.local.pki import CA_LIFETIME, LEAF_LIFETIME
from kubevirtci.local.processes import ProcessSpec, Supervisor
from kubevirtci.local.provider import LocalProvider

DAY = datetime.timedelta(days=1)


def test_node_root_holds_standard_paths_and_no_host_state(tmp_path):
    """A node's files sit where a kubeadm/kind node has them; nothing points at the
    host's state folder (the node cannot see where the host keeps it)."""
    creds = {}
    for stem in ("ca", "client", "serving", "proxy"):
        for ext in ("crt", "key"):
            (tmp_path / f"{stem}.{ext}").write_text(stem)
        creds[stem] = (tmp_path / f"{stem}.crt", tmp_path / f"{stem}.key")
    programs = {}
    for name in (*NODE_PROGRAMS, EMULATED_PCI_NRI_PLUGIN):
        programs[name] = tmp_path / "bin" / name
        programs[name].parent.mkdir(exist_ok=True)
        programs[name].write_text(name)
    layer = tmp_path / "layer"
    node = node_addresses(2)[1]
    write_node_root(lambda p: layer / p.lstrip("/"), node,
                    NodeCredentials(creds["ca"][0], creds["client"], creds["serving"],
                                    creds["proxy"]), programs)
    kubelet = yaml.safe_load((layer / "var/lib/kubelet/config.yaml").read_text())
    assert kubelet["containerRuntimeEndpoint"] == "unix:///run/containerd/containerd.sock"
    assert "rootDir" not in kubelet  # the kubelet's default, /var/lib/kubelet
    containerd = (layer / "etc/containerd/config.toml").read_text()
    assert 'cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]' in containerd
    assert "root =" not in containerd  # /var/lib/containerd and /run/containerd
    cni = json.loads((layer / "etc/cni/net.d/10-kdc.conflist").read_text())
    assert cni["plugins"][0]["ipam"]["ranges"] == [[{"subnet": "10.244.2.0/24"}]]
    conf = yaml.safe_load((layer / "etc/kubernetes/kubelet.conf").read_text())
    assert conf["clusters"][0]["cluster"]["server"] == "https://172.30.0.1:6443"
    assert (layer / "usr/local/bin/kubelet").read_text() == "kubelet"
    assert (layer / "usr/local/bin/nri-emulated-pci").read_text() == EMULATED_PCI_NRI_PLUGIN
    assert not (layer / "opt/nri/plugins").exists()  # containerd would kill it on a timeout
    assert (layer / "etc/kubernetes/pki/kubelet-client.key").stat().st_mode & 0o777 == 0o600
    for path in layer.rglob("*"):
        if path.is_file() and path.suffix not in (".crt", ".key"):
            assert str(tmp_path) not in path.read_text(errors="replace"), path


def test_local_provider_declares_what_it_emulates_and_lacks(tmp_path):
    provider = LocalProvider(tmp_path)
    caps = provider.declared_capabilities()
    assert caps.has(Capability.NODE_ACCESS) and caps.has(Capability.DRIVER_PLUGIN_SOCKET)
    assert "emulated" in caps.reason_missing(Capability.VFIO)
    assert caps.has(Capability.HOST_DEVICE_VMS)  # through the EMULATED VFIO hop
    assert caps.has(Capability.GUEST_ACCESS)
    # KubeVirt's own capabilities are discovered from the cluster, never declared here.
    assert Capability.RUNNING_VMS not in caps.missing and Capability.KUBEVIRT not in caps.missing
    nvme = provider.emulated_parts("1b36:0010", vms=True)
    assert any("VFIO hop is EMULATED" in note for note in nvme)
    assert any("TCG" in note for note in nvme)
    # A run of another driver's devices uses neither the NVMe tree nor the VFIO hop.
    gpu = provider.emulated_parts("10de:2236", vms=True)
    assert not any("NVMe" in note or "VFIO" in note for note in gpu)
    assert any("TCG" in note for note in gpu)
    # Without VMs: neither TCG nor the VFIO hop, the NVMe tree still.
    pods = provider.emulated_parts("1b36:0010", vms=False)
    assert not any("TCG" in note or "VFIO hop" in note for note in pods)
    assert any("NVMe" in note for note in pods)
    assert provider.emulated_parts(None, vms=False) == ()
    assert not provider.pulls_public_images and not provider.node_kvm


def test_oci_archive_is_a_valid_image_layout(tmp_path):
    binary = tmp_path / "hello"
    binary.write_bytes(b"\x7fELF")
    archive = write_oci_archive(
        ImageSpec("localhost/kdc/x:1", files={"/bin/hello": binary},
                  symlinks={"/bin/hi": "hello"}, entrypoint=["/bin/hello"]),
        tmp_path / "x.tar")
    with tarfile.open(archive) as tar:
        names = tar.getnames()
        index = json.load(tar.extractfile("index.json"))
        manifest_desc = index["manifests"][0]
        manifest = json.load(tar.extractfile(
            "blobs/sha256/" + manifest_desc["digest"].split(":")[1]))
        config = json.load(tar.extractfile(
            "blobs/sha256/" + manifest["config"]["digest"].split(":")[1]))
    assert "oci-layout" in names
    assert manifest_desc["annotations"]["io.containerd.image.name"] == "localhost/kdc/x:1"
    assert config["config"]["Entrypoint"] == ["/bin/hello"]
    assert len(config["rootfs"]["diff_ids"]) == len(manifest["layers"]) == 1
    again = write_oci_archive(
        ImageSpec("localhost/kdc/x:1", files={"/bin/hello": binary},
                  symlinks={"/bin/hi": "hello"}, entrypoint=["/bin/hello"]),
        tmp_path / "y.tar")
    assert again.read_bytes() == archive.read_bytes(), "image builds are reproducible"


class RecordingSupervisor(Supervisor):
    """Every process runs until stopped; nothing is spawned, starts and stops are
    recorded."""

    def __init__(self, root: Path) -> None:
        super().__init__(root / "pids", root / "logs")
        self.stopped: set[str] = set()
        self.restarted: list[str] = []

    def pid(self, name: str) -> int | None:
        return None if name in self.stopped else 1

    def start(self, spec: ProcessSpec) -> int:
        if spec.name in self.stopped:
            self.stopped.discard(spec.name)
            self.restarted.append(spec.name)
        return 1

    def stop(self, name: str) -> None:
        self.stopped.add(name)


@pytest.fixture
def kept_cluster(tmp_path, monkeypatch) -> LocalCluster:
    """A cluster that runs (as far as its supervisor says), without processes: the
    waits pass at once and a node's files are its layer."""
    cluster = LocalCluster(Layout(tmp_path / "state"))
    cluster.supervisor = cluster.control_plane.supervisor = RecordingSupervisor(tmp_path)
    cluster.bins.update({name: tmp_path / name for name in (
        "etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")})
    monkeypatch.setattr(cluster, "_await", lambda *_: None)
    monkeypatch.setattr(cluster, "_await_nodes_ready", lambda _: None)
    monkeypatch.setattr(HermeticNode, "enter", lambda _: [])
    monkeypatch.setattr(HermeticNode, "root_file",
                        lambda node, path: cluster.layout.node_file(node.name, path))
    return cluster


def test_up_on_a_kept_cluster_renews_certificates_near_their_end_and_restarts_their_readers(
        kept_cluster):
    config = kept_cluster.config()
    year_ago = datetime.datetime.now(datetime.UTC) - LEAF_LIFETIME + 10 * DAY
    creds, _ = kept_cluster.control_plane.issue(config, year_ago)
    for node in kept_cluster.nodes():
        write_node_credentials(node.root_file, node.address,
                               kept_cluster._node_credentials(node, creds))
    supervisor = kept_cluster.supervisor

    kept_cluster._renew_certificates(config)

    # Every leaf was near its end; the CA and the port forwarder read none of them.
    assert supervisor.restarted == [
        "etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler",
        "node01-kubelet", "node01-kube-proxy", "node02-kubelet", "node02-kube-proxy"]
    assert not supervisor.stopped
    node_cert = kept_cluster.layout.node_file("node02", "/var/lib/kubelet/pki/kubelet.crt")
    assert node_cert.read_bytes() == creds["kubelet-serving-node02"][0].read_bytes()
    served = x509.load_pem_x509_certificate(node_cert.read_bytes())
    assert served.not_valid_after_utc - datetime.datetime.now(datetime.UTC) > 300 * DAY

    supervisor.restarted.clear()
    kept_cluster._renew_certificates(config)
    assert supervisor.restarted == [], "certificates that serve restart nothing"


def test_a_certificate_only_the_scheduler_reads_restarts_the_scheduler_alone(kept_cluster):
    config = kept_cluster.config()
    kept_cluster.control_plane.issue(config)
    kept_cluster.ca.leaf_paths("scheduler")[1].unlink()

    kept_cluster._renew_certificates(config)

    assert kept_cluster.supervisor.restarted == ["kube-scheduler"]


def test_a_running_cluster_whose_ca_nears_its_end_is_made_anew_not_patched(
        kept_cluster, monkeypatch, caplog):
    monkeypatch.setattr(kept_cluster, "not_running", lambda: [])
    kept_cluster.control_plane.issue(kept_cluster.config())
    assert kept_cluster._reusable()
    kept_cluster.ca.cert_path.unlink()
    kept_cluster.ca.ensure(datetime.datetime.now(datetime.UTC) - CA_LIFETIME + 10 * DAY)
    assert not kept_cluster._reusable()
    assert "made anew" in caplog.text


def test_a_cluster_missing_a_process_is_not_reused_and_the_log_names_the_process(
        kept_cluster, monkeypatch, caplog):
    caplog.set_level(logging.INFO)
    monkeypatch.setattr(cluster_module.network, "exists", lambda: True)
    kept_cluster.control_plane.issue(kept_cluster.config())
    assert kept_cluster.not_running() == []
    kept_cluster.supervisor.stop("node02-kube-proxy")
    assert kept_cluster.not_running() == ["node02-kube-proxy"]
    assert not kept_cluster._reusable()
    assert "node02-kube-proxy not running" in caplog.text


def test_a_process_that_ends_while_its_status_is_read_is_not_alive(monkeypatch):
    class EndedWhileRead:
        """/proc/<pid>/stat opened, then read after the process ended (ESRCH)."""

        def __init__(self, path: str) -> None:
            pass

        def read_text(self) -> str:
            raise ProcessLookupError(3, "No such process")

    monkeypatch.setattr(processes, "Path", EndedWhileRead)
    assert not processes._alive(os.getpid())


def test_cluster_config_round_trips_with_kubevirtci_node_names(tmp_path):
    config = ClusterConfig.new(2, ["1G", "1G"])
    assert config.nodes == ["node01", "node02"]
    assert [a.ip for a in config.addresses()] == ["172.30.0.11", "172.30.0.12"]
    config.save(tmp_path / "c.json")
    assert ClusterConfig.load(tmp_path / "c.json") == config


def test_a_state_file_of_another_version_is_refused(tmp_path):
    (tmp_path / "c.json").write_text('{"nodes": ["127.0.2.1"], "etcd": 1}')
    with pytest.raises(ValueError, match="another version"):
        ClusterConfig.load(tmp_path / "c.json")


def test_an_archive_names_its_images_by_the_digest_containerd_will_show(tmp_path):
    binary = tmp_path / "hello"
    binary.write_bytes(b"\x7fELF")
    archive = write_oci_archive(ImageSpec("localhost/kdc/x:dev", files={"/bin/hello": binary}),
                                tmp_path / "x.tar")
    with tarfile.open(archive) as tar:
        digest = json.load(tar.extractfile("index.json"))["manifests"][0]["digest"]
    assert archive_images(archive) == {"localhost/kdc/x:dev": digest}
    binary.write_bytes(b"\x7fELF changed")
    rebuilt = write_oci_archive(ImageSpec("localhost/kdc/x:dev", files={"/bin/hello": binary}),
                                tmp_path / "y.tar")
    assert archive_images(rebuilt)["localhost/kdc/x:dev"] != digest, "same tag, new content"
    docker_save = tmp_path / "d.tar"
    with tarfile.open(docker_save, "w") as tar:
        tar.add(binary, "manifest.json")
    assert archive_images(docker_save) == {}


def test_a_kept_cluster_keeps_its_numa_nodes_and_refuses_another_count(tmp_path, monkeypatch):
    layout = Layout(tmp_path)
    assert LocalCluster(layout, numa_nodes=2).config().numa_nodes == 2
    assert LocalCluster(layout).config().numa_nodes == 2  # nothing asked: the kept one's
    asked_none = LocalCluster(layout, numa_nodes=0)
    monkeypatch.setattr(asked_none, "build", lambda: None)
    monkeypatch.setattr(asked_none, "_reusable", lambda: True)
    with pytest.raises(SuiteUsageError, match="have 2 NUMA nodes, 0 asked for") as err:
        asked_none.up()
    assert "--numa-nodes 2" in str(err.value)
    # a stopped cluster's state is swept, whatever it had: its config loads for that
    assert asked_none.config().numa_nodes == 2


def test_a_cluster_from_before_numa_nodes_has_none(tmp_path):
    layout = Layout(tmp_path)
    layout.root.mkdir(parents=True, exist_ok=True)
    layout.config_file.write_text(json.dumps({"nodes": ["node01"], "nvme": ["1G"],
                                              "apiserver": 6443}))
    assert LocalCluster(layout).config().numa_nodes == 0
