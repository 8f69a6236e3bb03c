"""Sonobuoy plugin mode (reports/sonobuoy.py): the plugin definition, and the entry point
that hands the results to Sonobuoy's worker."""

from __future__ import annotations

import sys
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
        "Job", "junit", ["kubevirt-dra-conformance-junit.xml"])
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
    assert plugin["config-map"] == {"vendor.yaml": VENDOR}  # its name: the profile's default
    env = {e["name"]: e["value"] for e in plugin["spec"]["env"]}
    assert env["KDC_PROFILE"] == "/tmp/sonobuoy/config/vendor.yaml"


def test_a_vendor_profile_that_installs_manifests_is_refused_with_the_fix(tmp_path):
    (tmp_path / "driver.yaml").write_text("kind: List\n")
    profile = tmp_path / "vendor.yaml"
    profile.write_text(VENDOR + "install:\n  manifests: [driver.yaml]\n")
    with pytest.raises(SuiteUsageError, match=r"drop install\.manifests"):
        sonobuoy.plugin_definition(profile=str(profile))


def _fake_suite(monkeypatch, junit: str | None, returncode: int):
    """The suite's command replaced by one that prints, writes ``junit`` and exits."""
    calls = []
    real = sonobuoy.suite_argv

    def argv(results, extra):
        calls.append(real(results, extra))
        write = f"open({str(results / sonobuoy.JUNIT)!r}, 'w').write({junit!r}); " \
            if junit is not None else ""
        return [sys.executable, "-c",
                f"{write}print('ERROR: bad profile'); raise SystemExit({returncode})"]

    monkeypatch.setattr(sonobuoy, "suite_argv", argv)
    return calls


PASSED = '<testsuites><testsuite name="pytest" tests="1"><testcase name="t"/></testsuite>' \
    '</testsuites>'


def test_the_results_are_packed_and_named_in_the_done_file(tmp_path, monkeypatch):
    calls = _fake_suite(monkeypatch, PASSED, 0)
    assert sonobuoy.run({"SONOBUOY_RESULTS_DIR": str(tmp_path),
                         "KDC_PYTEST_ARGS": "-m 'driver_sanity and not slow'"}) == 0
    [argv] = calls
    assert argv[3].endswith("/suites") and argv[4:7] == ["--provider", "existing",
                                                         "--in-cluster"]
    assert argv[-2:] == ["-m", "driver_sanity and not slow"]
    tarball = (tmp_path / "done").read_text()
    assert tarball == str(tmp_path / "kubevirt-dra-conformance.tar.gz")
    with tarfile.open(tarball) as tar:
        assert sonobuoy.JUNIT in tar.getnames()
    assert ET.parse(tmp_path / sonobuoy.JUNIT).find(".//failure") is None


@pytest.mark.parametrize(("junit", "returncode"), [
    (None, 4),  # bad input: no JUnit at all
    ('<testsuites><testsuite name="pytest" tests="0"/></testsuites>', 3),  # refused
    (PASSED, 1),  # every test passed, a required requirement did not
])
def test_a_run_that_did_not_pass_says_so_in_a_failed_session_test(tmp_path, monkeypatch,
                                                                   junit, returncode):
    _fake_suite(monkeypatch, junit, returncode)
    sonobuoy.run({"SONOBUOY_RESULTS_DIR": str(tmp_path)})
    failure = ET.parse(tmp_path / sonobuoy.JUNIT).find(".//testcase[@name='session']/failure")
    assert failure is not None and f"exited {returncode}" in failure.get("message", "")
    assert "bad profile" in (failure.text or "")


def test_failed_tests_speak_for_themselves(tmp_path, monkeypatch):
    failed = PASSED.replace('<testcase name="t"/>',
                            '<testcase name="t"><failure message="m"/></testcase>')
    _fake_suite(monkeypatch, failed, 1)
    sonobuoy.run({"SONOBUOY_RESULTS_DIR": str(tmp_path)})
    assert ET.parse(tmp_path / sonobuoy.JUNIT).find(".//testcase[@name='session']") is None
