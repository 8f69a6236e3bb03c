"""Device nodes by identity (fixtures/device_nodes.py): the container's and the node's
stat answers, compared by type and major:minor."""

from __future__ import annotations

import json

import pytest

from core.commands import output
from core.timeouts import Timeout
from fixtures.device_nodes import (
    DeviceNumber,
    assert_the_nodes_devices,
    identity_problems,
    node_device_numbers,
    parse_stat,
    stat_script,
)
from tests.test_driver_sanity_logic import _client

GROUP = DeviceNumber("char", 243, 2)


def test_stat_output_of_busybox_and_coreutils_is_read_in_hex():
    out = ("/dev/vfio/12|character special file|f3|2\n/dev/vfio/vfio|character special file|a|c4\n"
           "/dev/sda|block special file|8|0\n/dev/x|missing||\n/dev/d|directory|0|0\n")
    assert parse_stat(out) == {
        "/dev/vfio/12": GROUP, "/dev/vfio/vfio": DeviceNumber("char", 10, 196),
        "/dev/sda": DeviceNumber("block", 8, 0), "/dev/x": DeviceNumber("missing"),
        "/dev/d": DeviceNumber("other")}


def test_the_stat_script_reports_what_is_missing(tmp_path):
    gone = tmp_path / "it's gone"
    out = output(["sh", "-c", stat_script(["/dev/null", str(gone)])], Timeout.LOCAL_COMMAND)
    assert parse_stat(out) == {"/dev/null": DeviceNumber("char", 1, 3),
                               str(gone): DeviceNumber("missing")}


def test_a_node_at_the_right_path_backed_by_another_device_is_named():
    node = {"/dev/vfio/12": GROUP, "/dev/vfio/vfio": DeviceNumber("char", 10, 196)}
    assert identity_problems(dict(node), node, "the container") == []
    wrong = {**node, "/dev/vfio/12": DeviceNumber("char", 243, 3)}
    assert identity_problems(wrong, node, "the container") == [
        "/dev/vfio/12: the container has char 243:3, the node has char 243:2"]
    assert identity_problems({}, {"/dev/vfio/12": GROUP}, "the container") == [
        "/dev/vfio/12: the container has missing, the node has char 243:2"]
    assert identity_problems({}, {"/dev/x": DeviceNumber("missing")}, "c") == [
        "/dev/x on the node is missing, not a device node"]


def test_the_node_is_asked_through_a_pod_that_sees_only_the_nodes_folders():
    report = {"/node/dev/vfio/12": {"type": "char", "major": 243, "minor": 2},
              "/node/dev/vfio/vfio": {"type": "char", "major": 10, "minor": 196}}
    kube, client = _client({"status": {"phase": "Succeeded"}}, json.dumps(report))
    created = []
    kube.create = lambda manifest: created.append(manifest) or manifest
    numbers = node_device_numbers(client, ["/dev/vfio/12", "/dev/vfio/vfio"])
    assert numbers["/dev/vfio/12"] == GROUP
    [pod] = created
    container = pod["spec"]["containers"][0]
    assert container["command"][1:] == ["stat", "/node/dev/vfio/12", "/node/dev/vfio/vfio"]
    extra = [v for v in pod["spec"]["volumes"] if v["name"].startswith("node-")]
    assert [v["hostPath"]["path"] for v in extra] == ["/dev/vfio"]
    mount = next(m for m in container["volumeMounts"] if m["name"] == extra[0]["name"])
    assert mount == {"name": extra[0]["name"], "mountPath": "/node/dev/vfio", "readOnly": True}


def test_whether_the_numbers_tell_the_nodes_devices_apart_is_recorded():
    recorded = {}
    emulated = {"/dev/vfio/vfio": DeviceNumber("char", 1, 3), "/dev/vfio/12": DeviceNumber(
        "char", 1, 3)}
    assert_the_nodes_devices(dict(emulated), emulated, "c", recorded.__setitem__)
    assert recorded["device_numbers_tell_devices_apart"].startswith(
        "no: /dev/vfio/12, /dev/vfio/vfio share their numbers")
    real = {"/dev/vfio/vfio": DeviceNumber("char", 10, 196), "/dev/vfio/12": GROUP}
    assert_the_nodes_devices(dict(real), real, "c", recorded.__setitem__)
    assert recorded["device_numbers_tell_devices_apart"] == "yes"


def test_a_sanity_client_older_than_the_suite_is_named_not_a_type_error():
    from fixtures.sanity import host_path_entries

    entries = [{"path": "/dev/vfio/12", "hostPath": "/dev/vfio/12"}]
    assert host_path_entries({"deviceNodes": entries}) == entries
    with pytest.raises(pytest.fail.Exception, match="older than this suite"):
        host_path_entries({"deviceNodes": ["/dev/vfio/12"]})
