"""A failing test's state is captured before any fixture tears it down."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

pytest_plugins = ["pytester"]


def test_the_report_of_a_failed_call_carries_the_state_before_teardown(pytester):
    pytester.makeconftest('''
import pytest
from fixtures import plugin
from reports import DIAGNOSTICS_KEY

pytest_plugins = ["fixtures.plugin"]
STATE = {"claim": "prepared"}

class FakeTest:
    def capture(self, nodeid, failure):
        STATE["failure"] = failure
        return {"claim.txt": STATE["claim"]}

@pytest.fixture
def prepared_claim(request):
    request.node.stash[plugin._TEST_NAMESPACE_KEY] = FakeTest()
    yield
    STATE["claim"] = "unprepared"  # what teardown does to the evidence
    captured = request.node.stash.get(DIAGNOSTICS_KEY, {})
    (request.config.rootpath / "seen.txt").write_text(captured.get("claim.txt", "none"))
    (request.config.rootpath / "failure.txt").write_text(STATE.get("failure", "none"))
''')
    pytester.makepyfile(test_x='''
def test_fails(prepared_claim):
    assert False, "device missing in the guest"

def test_passes(prepared_claim):
    pass
''')
    result = pytester.runpytest_inprocess("-p", "no:randomly", "test_x.py::test_fails")
    result.assert_outcomes(failed=1)
    assert (pytester.path / "seen.txt").read_text() == "prepared"
    assert "device missing in the guest" in (pytester.path / "failure.txt").read_text()
    result = pytester.runpytest_inprocess("-p", "no:randomly", "test_x.py::test_passes")
    result.assert_outcomes(passed=1)
    assert (pytester.path / "seen.txt").read_text() == "none"


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_providers_and_reports_import_neither_the_fixtures_nor_pytest_internals():
    offenders = {
        str(path.relative_to(ROOT)): sorted(
            n for n in _imports(path)
            if n.split(".")[0] in ("fixtures", "_pytest"))
        for package in ("kubevirtci", "reports", "core")
        for path in (ROOT / package).rglob("*.py")
    }
    assert {k: v for k, v in offenders.items() if v} == {}
