"""The driver under test is the subject, never a missing feature: a real run of the driver
tier and the pod-level suite against a faked cluster (tests/fake_cluster.py). A driver
whose plugin runs and publishes no device fails SANITY-001, naming what its nodes have,
and every test that needs a device fails naming that cause (exit 1, no --certify); a
driver that is not there at all stops the run before its first test (exit 4)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from core.profile import load
from kubevirtci.discovery import plugin_pods_path
from tests.conftest import RecordedApi
from tests.fake_cluster import RESPONSES, ROOT, SYSFS

pytest_plugins = ["pytester"]

PROFILE = load(str(ROOT / "profiles" / "reference-nvme.yaml"))
CONFTEST = '''
from fixtures.plugin import SESSION_KEY
from tests.fake_cluster import fake_session

pytest_plugins = ["fixtures.plugin", "fixtures.signals", "fixtures.leases",
                  "fixtures.node_client", "fixtures.sanity", "fixtures.console",
                  "fixtures.certification"]

def pytest_configure(config):
    config.stash[SESSION_KEY] = fake_session(config.rootpath, config.option.certify)
'''
# The suites' own tests and gate, collected here as they are in suites/.
SUITE = '''
from suites.conftest import *  # noqa
from suites.conftest import _device_lease  # noqa
from suites.{module} import *  # noqa
'''
SANITY_001 = "test_resource_slices_have_unique_devices_and_consistent_pools"


def plugin_pod(node: str) -> dict[str, Any]:
    return {"metadata": {"name": f"plugin-{node}", "namespace": "nvme-dra"},
            "spec": {"nodeName": node}, "status": {"phase": "Running", "containerStatuses": [
                {"name": "plugin", "state": {"running": {}}}]}}


def function(sysfs: Path, bdf: str, vendor_device: str, driver: str) -> None:
    folder = sysfs / "bus" / "pci" / "devices" / bdf
    folder.mkdir(parents=True)
    vendor, device = vendor_device.split(":")
    (folder / "vendor").write_text(f"0x{vendor}\n")
    (folder / "device").write_text(f"0x{device}\n")
    (folder / "driver").symlink_to(sysfs / "bus" / "pci" / "drivers" / driver)


def cluster(pytester: pytest.Pytester, plugin_nodes: list[str]) -> None:
    """The recorded KubeVirt 1.9 cluster with no ResourceSlice, the driver's plugin pods
    on ``plugin_nodes``, and a node sysfs with two of the profile's functions."""
    responses = dict(RecordedApi("cluster_kubevirt_1_9").responses)
    responses["/apis/resource.k8s.io/v1/resourceslices"] = {"items": []}
    if plugin_nodes:
        responses[plugin_pods_path(PROFILE.plugin_pod_selector)] = {
            "items": [plugin_pod(node) for node in plugin_nodes]}
    (pytester.path / RESPONSES).write_text(json.dumps(responses))
    sysfs = pytester.path / SYSFS
    function(sysfs, "0000:00:04.0", PROFILE.pci_vendor_device or "", "nvme")
    function(sysfs, "0000:00:05.0", PROFILE.pci_vendor_device or "", "vfio-pci")
    function(sysfs, "0000:00:02.0", "8086:100e", "e1000")  # not the profile's kind
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_sanity=SUITE.format(module="test_driver_sanity"),
                        test_pods=SUITE.format(module="test_pod_dra"))


@pytest.mark.parametrize("certify", [[], ["--certify"]], ids=["plain", "certify"])
def test_a_driver_that_runs_and_publishes_nothing_fails_every_test_that_needs_it(
    pytester, certify
):
    cluster(pytester, ["node01", "node02"])
    run = pytester.inline_run("-p", "no:randomly", *certify)
    assert run.ret == pytest.ExitCode.TESTS_FAILED  # run, not refused: no exit 4
    reports = [r for r in run.getreports("pytest_runtest_logreport") if r.when != "teardown"]
    assert not any(r.skipped or (r.passed and r.when == "call") for r in reports)
    failed = {r.nodeid: r.longreprtext for r in reports if r.failed}
    # SANITY-001 judges the driver: its name, where its plugin runs, what those nodes have.
    verdict = failed.pop(f"test_sanity.py::{SANITY_001}")
    assert PROFILE.driver in verdict and "node01 (Running)" in verdict
    assert "0000:00:04.0 (nvme)" in verdict and "0000:00:05.0 (vfio-pci)" in verdict
    assert "0000:00:02.0" not in verdict
    # Every other test of both suites fails naming that root cause.
    assert {nodeid.split("::")[0] for nodeid in failed} == {"test_sanity.py", "test_pods.py"}
    for nodeid, text in failed.items():
        assert f"driver {PROFILE.driver} publishes no device" in text, nodeid
        assert "SANITY-001" in text, nodeid


def test_a_driver_that_is_not_there_stops_the_run_before_the_first_test(pytester):
    cluster(pytester, [])
    run = pytester.runpytest_inprocess("-p", "no:randomly")
    assert run.ret == pytest.ExitCode.USAGE_ERROR
    lines = [line for line in run.outlines if "is not on this cluster" in line]
    assert len(lines) == 1 and PROFILE.driver in lines[0] and "Fix:" in lines[0]
    assert not any(word in run.stdout.str() for word in ("PASSED", "FAILED", "ERROR at"))
