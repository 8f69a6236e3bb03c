"""The requirements catalog and the suites stay in step."""

from pathlib import Path

from reports.catalog import BY_ID, REQUIREMENTS, document, marked_tests, untested_and_unknown

ROOT = Path(__file__).resolve().parent.parent


def test_every_requirement_has_a_test_and_every_test_a_known_requirement():
    untested, unknown, unmarked = untested_and_unknown(ROOT / "suites")
    assert not untested, f"requirements no test proves: {untested}"
    assert not unknown, f"tests name requirements the catalog lacks: {unknown}"
    assert not unmarked, f"conformance tests that name no requirement: {unmarked}"


def test_ids_are_unique_and_stable_in_form():
    assert len(BY_ID) == len(REQUIREMENTS)
    for r in REQUIREMENTS:
        prefix, number = r.id.rsplit("-", 1)
        assert prefix.isupper() and len(number) == 3 and number.isdigit(), r.id
        assert r.text.endswith("."), r.id


def test_the_reference_document_is_generated_and_up_to_date():
    text = document(marked_tests(ROOT / "suites"))
    assert (ROOT / "docs" / "requirements.md").read_text() == text, \
        "run `python -m reports catalog`"
    assert "| PERSIST-001 |" in text and "test_precreated_claim_survives_vm_cycle" in text


def test_the_scanner_reports_what_is_missing(tmp_path):
    (tmp_path / "test_x.py").write_text(
        "from fixtures import markers\n\n"
        "@markers.requirement('NOPE-001')\ndef test_a():\n    pass\n\n"
        "def test_b():\n    pass\n")
    untested, unknown, unmarked = untested_and_unknown(tmp_path)
    assert unknown == ["NOPE-001"] and unmarked == ["test_x.py::test_b"]
    assert len(untested) == len(REQUIREMENTS)
