"""Sonobuoy plugin mode (reports/sonobuoy.py): the plugin definition, and the entry point
that hands the results to Sonobuoy's worker."""

from __future__ import annotations

import subprocess
import tarfile
import xml.etree.ElementTree as ET

import pytest
import yaml

from core.errors import SuiteUsageError
from reports import sonobuoy


def test_the_plugin_runs_the_suite_image_with_a_profile_of_the_image():
    plugin = yaml.safe_load(sonobuoy.plugin_yaml(profile="reference-nvme", certify=True,
                                                 pytest_args="-m driver_sanity"))
    config = plugin["sonobuoy-config"]
    assert (config["driver"], config["result-format"], config["result-files"]) == (
        "Job", "junit", ["junit.xml"])
    spec = plugin["spec"]
    assert spec["image"] == "localhost/kdc/conformance:dev"
    assert spec["command"] == ["python3", "-m", "reports.sonobuoy"]
    env = {e["name"]: e["value"] for e in spec["env"]}
    assert env == {"KDC_PROFILE": "reference-nvme", "KDC_CERTIFY": "true",
                   "KDC_SANITY_IMAGE": "localhost/kdc/dra-sanity:dev",
                   "KDC_PYTEST_ARGS": "-m driver_sanity"}
    assert spec["volumeMounts"] == [{"mountPath": "/tmp/sonobuoy/results", "name": "results"}]
    assert "config-map" not in plugin


VENDOR = """driver: gpu.example.com
deviceClass: gpu.example.com
deviceKind: gpu
identityAttribute: gpu.example.com/uuid
"""


def test_a_vendor_profile_travels_in_the_config_map(tmp_path):
    profile = tmp_path / "vendor.yaml"
    profile.write_text(VENDOR)
    plugin = sonobuoy.plugin_definition(profile=str(profile))
    assert plugin["config-map"] == {"profile.yaml": VENDOR}
    env = {e["name"]: e["value"] for e in plugin["spec"]["env"]}
    assert env["KDC_PROFILE"] == "/tmp/sonobuoy/config/profile.yaml"


def test_a_vendor_profile_that_installs_manifests_is_refused_with_the_fix(tmp_path):
    (tmp_path / "driver.yaml").write_text("kind: List\n")
    profile = tmp_path / "vendor.yaml"
    profile.write_text(VENDOR + "install:\n  manifests: [driver.yaml]\n")
    with pytest.raises(SuiteUsageError, match=r"drop install\.manifests"):
        sonobuoy.plugin_definition(profile=str(profile))


def _fake_pytest(monkeypatch, writes_junit: bool, returncode: int = 1):
    calls = []

    def run(argv, **kwargs):
        calls.append(argv)
        junit = next(a.split("=", 1)[1] for a in argv if a.startswith("--junitxml="))
        if writes_junit:
            ET.ElementTree(ET.Element("testsuites")).write(junit)
        return subprocess.CompletedProcess(argv, returncode, stdout="ERROR: bad profile\n")

    monkeypatch.setattr(sonobuoy.subprocess, "run", run)
    return calls


def test_the_results_are_packed_and_named_in_the_done_file(tmp_path, monkeypatch):
    calls = _fake_pytest(monkeypatch, writes_junit=True)
    assert sonobuoy.run({"SONOBUOY_RESULTS_DIR": str(tmp_path),
                         "KDC_PYTEST_ARGS": "-m 'driver_sanity and not slow'"}) == 0
    [argv] = calls
    assert argv[3:7] == ["suites", "--provider", "existing", "--in-cluster"]
    assert argv[-2:] == ["-m", "driver_sanity and not slow"]
    tarball = (tmp_path / "done").read_text()
    assert tarball == str(tmp_path / "kubevirt-dra-conformance.tar.gz")
    with tarfile.open(tarball) as tar:
        assert "junit.xml" in tar.getnames()


def test_a_run_that_wrote_no_junit_is_reported_as_one_failed_test(tmp_path, monkeypatch):
    _fake_pytest(monkeypatch, writes_junit=False, returncode=4)
    sonobuoy.run({"SONOBUOY_RESULTS_DIR": str(tmp_path)})
    failure = ET.parse(tmp_path / "junit.xml").find(".//failure")
    assert failure is not None and "exited 4" in failure.get("message", "")
    assert "bad profile" in (failure.text or "")
