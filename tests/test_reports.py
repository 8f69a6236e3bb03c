from types import SimpleNamespace

from fixtures.artifacts import artifact_dir_name, redact, write
from kubevirtci.capabilities import SKIP_CAUSES
from reports.html import diagnostics_extras
from reports.skips import group_skips


def test_redaction_removes_tokens_keys_and_passwords():
    text = (
        "Authorization: Bearer abc.def.ghi\n"
        "client-key-data: LS0tLS1CRUdJTi\n"
        "token: s3cr3t\n"
        '"password": "fedora"\n'
        "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEE\n-----END EC PRIVATE KEY-----\n"
        "jwt eyJhbGciOiJSUzI1NiJ9.eyJpc3MiOiJrdWJlcm5ldGVzIn0.c2lnbmF0dXJlc2lnbmF0dXJl\n"
        "pciBusID: 0000:00:05.0\n"
    )
    out = redact(text)
    for secret in ("abc.def.ghi", "LS0tLS1CRUdJTi", "s3cr3t", "fedora", "MHcCAQEE",
                   "eyJpc3MiOiJrdWJlcm5ldGVzIn0"):
        assert secret not in out
    assert "pciBusID: 0000:00:05.0" in out


def test_diagnostics_are_written_and_attached_as_html_extras(tmp_path):
    diagnostics = {"ResourceClaim.yaml": "items: []", "events.txt": "Warning FailedScheduling"}
    paths = write(diagnostics, tmp_path / artifact_dir_name("suites/test_x.py::test_y[a/b]"))
    assert {p.name for p in paths} == set(diagnostics)
    assert (paths[0].parent / "index.json").exists()
    assert paths[0].parent.name == "suites_test_x.py_test_y_a_b"
    extras = diagnostics_extras(diagnostics)
    assert [e["name"] for e in extras] == ["ResourceClaim.yaml", "events.txt"]
    assert all(e["format_type"] == "text" for e in extras)
    assert extras[1]["content"] == "Warning FailedScheduling"


def test_skips_are_grouped_by_root_cause_with_the_capabilities_it_takes_away():
    def skipped(causes):
        return SimpleNamespace(longrepr=("file.py", 1, "Skipped: ..."),
                               user_properties=[(SKIP_CAUSES, causes)])

    no_kubevirt = "the hermetic cluster cannot run KubeVirt"
    reports = [
        skipped({no_kubevirt: ["kubevirt", "kubevirt-dra-gates"]}),
        skipped({no_kubevirt: ["kubevirt", "guest-access"]}),
        skipped({"PCI is emulated": ["vfio"], no_kubevirt: ["kubevirt"]}),
        SimpleNamespace(longrepr=("file.py", 1, "Skipped: the cluster has one node"),
                        user_properties=[]),
    ]
    grouped = [(c.reason, c.tests, sorted(c.capabilities)) for c in group_skips(reports)]
    assert grouped == [
        (no_kubevirt, 3, ["guest-access", "kubevirt", "kubevirt-dra-gates"]),
        ("PCI is emulated", 1, ["vfio"]),
        ("the cluster has one node", 1, []),
    ]
