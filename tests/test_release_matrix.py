"""The release matrix document, from bundles as runs write them."""

import json
from pathlib import Path

from reports.matrix import document, read_run

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest">
<testcase classname="suites.test_device_info" name="test_domain_xml_hostdev_source">
<skipped type="pytest.xfail" message="KubeVirt v1.8.4 bug: virt-controller refuses
 (kubevirt/kubevirt#17385, fixed in v1.9.0)"/></testcase>
<testcase classname="suites.test_admission" name="test_rule[claim-name-not-dns-label]">
<skipped type="pytest.skip" message="KubeVirt v1.8.4 does not check claim-name-not-dns-label"/>
</testcase>
<testcase classname="suites.test_vm_basics" name="test_boot"/>
<testcase classname="suites.test_mixed_allocation" name="test_gpus_rejected">
<failure message="AssertionError: the webhook accepted a VMI mixing DRA and device-plugin GPUs">
trace</failure></testcase>
</testsuite></testsuites>
"""


def bundle(folder: Path, build: str, statuses: dict[str, tuple[str, dict[str, str]]]) -> Path:
    folder.mkdir(parents=True)
    (folder / "facts.json").write_text(json.dumps({
        "kubevirt_build": build, "kubevirt_version": build,
        "header": [f"install: KubeVirt: replaced v1.9.0: installed {build} (141 s)"]}))
    (folder / "requirements.json").write_text(json.dumps({
        rid: {"level": "required", "status": status, "tests": tests}
        for rid, (status, tests) in statuses.items()}))
    (folder / "junit.xml").write_text(JUNIT)
    return folder


def test_the_matrix_has_a_column_per_release_and_says_why_an_entry_is_not_a_pass(tmp_path):
    old = bundle(tmp_path / "a", "v1.8.4", {
        "INFO-005": ("xfailed", {
            "suites/test_device_info.py::test_domain_xml_hostdev_source": "xfailed"}),
        "ADMIT-001": ("skipped", {
            "suites/test_admission.py::test_rule[claim-name-not-dns-label]": "skipped"}),
        "VM-001": ("passed", {"suites/test_vm_basics.py::test_boot": "passed"}),
        "MIXED-003": ("failed", {
            "suites/test_mixed_allocation.py::test_gpus_rejected": "failed"}),
    })
    new = bundle(tmp_path / "b", "v1.9.0", {
        "INFO-005": ("passed", {}), "ADMIT-001": ("passed", {}), "VM-001": ("passed", {}),
        "MIXED-003": ("passed", {})})
    text = document([read_run(new), read_run(old)], "python scripts/release_matrix.py")
    assert "| requirement | v1.8.4 | v1.9.0 |" in text  # releases in order
    info = next(line for line in text.splitlines() if line.startswith("| INFO-005"))
    assert info.endswith("| xfail | pass |")
    mixed = next(line for line in text.splitlines() if line.startswith("| MIXED-003"))
    assert "**FAIL**" in mixed
    assert "kubevirt/kubevirt#17385" in text
    assert "does not check claim-name-not-dns-label" in text
    assert "the webhook accepted a VMI mixing DRA and device-plugin GPUs" in text
    assert "### v1.9.0" not in text  # nothing to explain where everything passed
    assert "- v1.8.4: replaced v1.9.0: installed v1.8.4 (141 s)" in text
