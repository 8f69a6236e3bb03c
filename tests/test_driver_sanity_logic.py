"""The driver sanity suites' logic against recorded plugin answers: the node-side
client pod, answers per claim (gRPC errors included) and who can read the metadata."""

from __future__ import annotations

from typing import Any

import pytest

from core.timeouts import WaitFailed
from fixtures.devices import Device
from fixtures.node_client import HOST_PATH_POD_SECURITY, NodeClient, client_pod
from fixtures.sanity import answer_for, metadata_disagreements, metadata_readers, with_uid
from kubevirtci.provider import NodeCommandFailed, NodePaths

CLAIM = {"metadata": {"namespace": "ns", "name": "c", "uid": "u1"}}


def test_the_client_pod_sees_only_plugin_registry_and_cdi_folders_read_only():
    pod = client_pod("p", "node01", "img", ["prepare", "ns/c/u1"], NodePaths())
    spec = pod["spec"]
    assert spec["nodeName"] == "node01" and spec["restartPolicy"] == "Never"
    assert spec["automountServiceAccountToken"] is False
    paths = {v["hostPath"]["path"] for v in spec["volumes"]}
    assert paths == {"/var/lib/kubelet/plugins", "/var/lib/kubelet/plugins_registry",
                     "/etc/cdi", "/var/run/cdi"}
    container = spec["containers"][0]
    assert all(m["readOnly"] for m in container["volumeMounts"])
    assert container["command"] == ["/usr/bin/dra-sanity", "prepare", "ns/c/u1"]
    security = container["securityContext"]
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert security["allowPrivilegeEscalation"] is False
    assert security["readOnlyRootFilesystem"] is True
    assert "privileged" not in security


class FakeKube:
    """Answers a client pod's watch with a recorded final state and log."""

    def __init__(self, final: dict[str, Any], log: str = "") -> None:
        self.final, self.log = final, log
        self.patched: list[tuple[str, dict]] = []
        self.deleted: list[str] = []

    def patch(self, kind, name, body, namespace=None):
        self.patched.append((name, body))

    def create(self, manifest):
        return manifest

    def list_with_version(self, kind, namespace, field_selector):
        return [self.final], "1"

    def logs(self, name, namespace, container=None, tail=500):
        return self.log

    def delete(self, kind, name, namespace=None):
        self.deleted.append(name)
        return True


class FakeObjects:
    namespace = "kdc-test"

    def __init__(self, kube: FakeKube) -> None:
        self.kube = kube

    def create(self, manifest):
        return self.kube.create(manifest)


def _client(final, log=""):
    kube = FakeKube(final, log)
    return kube, NodeClient(kube, FakeObjects(kube), "node01", "img")  # type: ignore[arg-type]


def test_a_finished_client_pod_gives_its_log_and_is_deleted():
    kube, client = _client({"status": {"phase": "Succeeded"}}, '{"claims": {}}')
    assert client.json(["prepare"]) == {"claims": {}}
    assert kube.patched == [("kdc-test", {"metadata": {"labels": HOST_PATH_POD_SECURITY}})]
    assert len(kube.deleted) == 1


def test_a_failed_client_names_node_call_and_output():
    _, client = _client({"status": {"phase": "Failed"}}, "dra-sanity: no DRA plugin x")
    with pytest.raises(NodeCommandFailed, match="prepare on node node01 failed: dra-sanity: no"):
        client.run(["prepare"])


def test_a_client_image_the_node_lacks_fails_at_once_with_the_fix():
    _, client = _client({"status": {"phase": "Pending", "containerStatuses": [
        {"name": "ctr", "state": {"waiting": {"reason": "ErrImageNeverPull",
                                              "message": "image not present"}}}]}})
    with pytest.raises(NodeCommandFailed, match="--sanity-image") as err:
        client.run(["prepare"])
    assert isinstance(err.value.__cause__, WaitFailed)


def test_a_grpc_error_answers_for_every_claim_of_the_call():
    response = {"grpcError": {"code": "Unknown", "message": "claim ns/c not allocated"}}
    answer = answer_for(response, CLAIM)
    assert answer["error"] == "gRPC Unknown: claim ns/c not allocated"
    assert answer["grpc"] == "Unknown"


def test_an_answer_per_claim_and_a_missing_one():
    response = {"claims": {"u1": {"devices": [{"device_name": "d"}]}}}
    assert answer_for(response, CLAIM) == {"devices": [{"device_name": "d"}]}
    assert answer_for({"claims": {"u1": {}}}, CLAIM) == {}  # an empty answer: success
    missing = answer_for(response, with_uid(CLAIM, "u2"))
    assert missing["missing"] and "no answer" in missing["error"]


def _report(*objects: tuple[str, bool, str]) -> dict[str, Any]:
    return {"objects": [{"apiVersion": f"metadata.resource.k8s.io/{v}", "decodes": ok,
                         "validationError": invalid} for v, ok, invalid in objects]}


def test_kubevirt_reads_a_file_only_with_a_valid_v1alpha1_object():
    readers = metadata_readers(_report(("v1beta1", True, ""), ("v1alpha1", True, "")))
    assert set(readers) == {"v1.8.1/v1.8.2", "v1.8.3", "v1.8.4", "v1.9.0"}
    assert all(readers.values())
    # A driver that writes only the newer version breaks KubeVirt silently.
    assert not any(metadata_readers(_report(("v1beta1", True, ""))).values())
    assert not any(metadata_readers(_report(
        ("v1alpha1", True, "requests[0].devices[0].driver: Required"))).values())


DRIVER = "nvme.example.com"
SLICE_DEVICE = Device(DRIVER, "node01", "nvme-0", "node01", {
    "resource.kubernetes.io/pciBusID": "0000:00:04.0", f"{DRIVER}/serial": "nvme-0"})


def _metadata(attributes: dict[str, Any], name: str = "nvme-0") -> dict[str, Any]:
    return {"requests": [{"name": "dev", "devices": [
        {"driver": DRIVER, "pool": "node01", "name": name, "attributes": attributes}]}]}


def test_metadata_that_names_another_function_is_a_disagreement():
    compared, differing = metadata_disagreements(_metadata({
        "resource.kubernetes.io/pciBusID": {"string": "0000:00:05.0"},
        "serial": {"string": "nvme-0"}}), SLICE_DEVICE)
    assert compared == 2
    assert len(differing) == 1 and "0000:00:05.0" in differing[0] \
        and "0000:00:04.0" in differing[0]


def test_metadata_is_compared_only_where_the_slice_carries_the_attribute():
    compared, differing = metadata_disagreements(_metadata({
        "resource.kubernetes.io/pciBusID": {"string": "0000:00:04.0"},
        "firmware": {"version": "1.0.0"}}), SLICE_DEVICE)
    assert (compared, differing) == (1, [])


def test_metadata_of_other_devices_is_not_held_against_this_one():
    compared, differing = metadata_disagreements(_metadata(
        {"resource.kubernetes.io/pciBusID": {"string": "0000:00:05.0"}}, name="nvme-1"),
        SLICE_DEVICE)
    assert (compared, differing) == (0, [])
