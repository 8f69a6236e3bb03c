"""The hermetic cluster's own logic, without starting it."""

import json
import tarfile
from pathlib import Path

from cryptography import x509

from kubevirtci.capabilities import Capability
from kubevirtci.local.images import ImageSpec, write_oci_archive
from kubevirtci.local.layout import ClusterConfig
from kubevirtci.local.pki import CertificateAuthority, Identity
from kubevirtci.local.provider import LocalProvider, adapt_daemonset

DAEMONSET = {
    "kind": "DaemonSet", "metadata": {"name": "d", "namespace": "n"},
    "spec": {"template": {"spec": {
        "containers": [{
            "name": "plugin", "image": "localhost/kdc/nvme-dra-driver:dev",
            "args": ["--sysfs-root=/sys", "--cdi-dir=/var/run/cdi", "--host-proc=/host/proc"],
            "env": [{"name": "NODE_NAME",
                     "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
            "volumeMounts": [{"name": "sys", "mountPath": "/sys"},
                             {"name": "host-proc", "mountPath": "/host/proc"}],
        }],
        "volumes": [{"name": "sys", "hostPath": {"path": "/sys"}},
                    {"name": "host-proc", "hostPath": {"path": "/proc"}}],
    }}},
}


def test_driver_daemonset_is_pointed_at_per_node_emulated_paths():
    out = adapt_daemonset(DAEMONSET, Path("/state"), 6443, "localhost/kdc/nvme-dra-driver:abc")
    pod = out["spec"]["template"]["spec"]
    ctr = pod["containers"][0]
    assert pod["hostNetwork"] is True
    assert ctr["image"] == "localhost/kdc/nvme-dra-driver:abc"
    assert ctr["imagePullPolicy"] == "Never"
    assert ctr["args"] == [
        "--host-proc=/host/proc",
        "--sysfs-root=/state/emulation/$(NODE_NAME)/sys",
        "--dev-root=/state/emulation/$(NODE_NAME)/dev",
        "--cdi-dir=/state/nodes/$(NODE_NAME)/cdi",
        "--kubelet-dir=/state/nodes/$(NODE_NAME)/kubelet",
    ]
    env = {e["name"]: e.get("value") for e in ctr["env"]}
    assert env["KUBERNETES_SERVICE_HOST"] == "127.0.0.1"
    assert env["KUBERNETES_SERVICE_PORT"] == "6443"
    assert {v["name"] for v in pod["volumes"]} == {"host-proc", "hermetic-state"}
    assert DAEMONSET["spec"]["template"]["spec"].get("hostNetwork") is None


def test_local_provider_declares_what_it_emulates_and_lacks(tmp_path):
    provider = LocalProvider(tmp_path)
    caps = provider.declared_capabilities()
    assert caps.has(Capability.NODE_ACCESS) and caps.has(Capability.DRIVER_PLUGIN_SOCKET)
    assert "emulated" in caps.reason_missing(Capability.VFIO)
    assert "cannot run KubeVirt" in caps.reason_missing(Capability.KUBEVIRT)
    assert any("EMULATED" in note for note in provider.emulated)


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


def test_certificates_carry_their_identity_and_keys_are_private(tmp_path):
    ca = CertificateAuthority(tmp_path)
    ca.ensure()
    cert_path, key_path = ca.issue(Identity("kubelet-serving-127.0.2.1", "127.0.2.1",
                                            ips=("127.0.2.1",), server=True, client=False))
    cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["127.0.2.1"]
    assert key_path.stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "ca.key").stat().st_mode & 0o777 == 0o600
    client, _ = ca.issue(Identity("admin", "kdc-admin", organization="system:masters"))
    subject = x509.load_pem_x509_certificate(client.read_bytes()).subject.rfc4514_string()
    assert subject == "CN=kdc-admin,O=system:masters"


def test_cluster_config_round_trips_with_loopback_node_names(tmp_path):
    config = ClusterConfig.new(2, ["1G", "1G"])
    assert config.nodes == ["127.0.2.1", "127.0.2.2"]
    config.save(tmp_path / "c.json")
    assert ClusterConfig.load(tmp_path / "c.json") == config
