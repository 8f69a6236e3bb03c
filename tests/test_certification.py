"""Results per requirement, the certification bundle and its verification, and the
refusal of an uncertifiable cluster before the first test."""

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from core.commands import QUIET
from core.timeouts import Timeout
from fixtures import certification
from fixtures.plugin import SESSION_KEY
from kubevirtci.capabilities import Capabilities, Capability
from reports import bundle
from reports.catalog import REQUIREMENTS
from reports.results import NOT_RUN, catalog_key, certification_failures, fold, outcome

EMULATED = "NVMe controllers are EMULATED"

pytest_plugins = ["pytester"]


def passing_outcomes():
    return {f"suites/{t}": "passed" for r in REQUIREMENTS for t in [f"test_{r.id}.py::t"]}


def requirement_tests():
    return {r.id: [f"test_{r.id}.py::t"] for r in REQUIREMENTS}


def test_a_requirement_takes_the_worst_outcome_of_its_tests():
    outcomes = {"suites/test_a.py::t[1]": "passed", "suites/test_a.py::t[2]": "skipped",
                "suites/test_b.py::u": "xfailed"}
    results = fold(outcomes, {"PERSIST-001": ["test_a.py::t"], "PERSIST-006": ["test_b.py::u"]})
    assert results["PERSIST-001"]["status"] == "skipped"
    assert results["PERSIST-006"]["status"] == "xfailed"
    assert results["MIXED-001"]["status"] == NOT_RUN
    assert catalog_key("suites/test_a.py::t[1]") == "test_a.py::t"


def test_only_required_requirements_that_did_not_pass_fail_certification():
    results = fold({"suites/test_a.py::t": "skipped", "suites/test_b.py::u": "skipped"},
                   {"PERSIST-001": ["test_a.py::t"], "PERSIST-009": ["test_b.py::u"]})
    failures = certification_failures(results)
    assert "PERSIST-001: skipped" in failures
    assert not any(f.startswith("PERSIST-009") for f in failures)  # optional


def test_phase_reports_give_the_test_outcome():
    xfail = SimpleNamespace(wasxfail="no promise", skipped=True, failed=False, when="call")
    assert outcome(xfail) == "xfailed"
    setup_ok = SimpleNamespace(skipped=False, failed=False, when="setup")
    assert outcome(setup_ok) is None


def make_bundle(tmp_path, emulated=(EMULATED,), folders=None):
    tmp_path.mkdir(parents=True, exist_ok=True)
    junit = tmp_path / "junit.xml"
    junit.write_text('<testsuites><testsuite name="pytest"><properties>'
                     '<property name="kubernetes_version" value="v1.37.2"/>'
                     '<property name="driver" value="nvme.dra"/></properties></testsuite>'
                     '</testsuites>')
    failures = tmp_path / "failures" / "test_x"
    failures.mkdir(parents=True, exist_ok=True)
    (failures / "events.txt").write_text("no events")
    facts = {"kubernetes_version": "v1.37.2", "driver": "nvme.dra", "emulated": list(emulated)}
    results = fold(passing_outcomes(), requirement_tests())
    return bundle.write(tmp_path / "bundle", {bundle.JUNIT: junit, "report.html": None},
                        facts, results, tmp_path / "failures", folders)


def test_a_bundle_from_a_passing_run_verifies_and_says_it_was_emulated(tmp_path):
    path = make_bundle(tmp_path)
    assert (path / "failures" / "test_x" / "events.txt").is_file()
    problems, notes = bundle.verify(path)
    assert problems == []
    assert notes == [f"{bundle.NOT_FOR_HARDWARE} ({EMULATED})"]
    assert bundle.verify(make_bundle(tmp_path / "real", emulated=()))[1] == []


def test_a_flipped_result_is_rejected(tmp_path):
    path = make_bundle(tmp_path)
    results = json.loads((path / bundle.RESULTS).read_text())
    results["PERSIST-001"]["status"] = "failed"
    (path / bundle.RESULTS).write_text(json.dumps(results))
    assert bundle.verify(path)[0] == [f"edited after the run: {bundle.RESULTS}"]


def test_an_edited_and_a_missing_file_are_rejected(tmp_path):
    path = make_bundle(tmp_path)
    (path / "failures" / "test_x" / "events.txt").write_text("nothing to see")
    (path / bundle.JUNIT).unlink()
    (path / "extra.txt").write_text("added later")
    problems, _ = bundle.verify(path)
    assert problems == [f"missing file: {bundle.JUNIT}", "file not in SHA256SUMS: extra.txt",
                        "edited after the run: failures/test_x/events.txt"]


def test_a_failed_required_requirement_and_inconsistent_versions_are_named(tmp_path):
    junit = tmp_path / "junit.xml"
    junit.write_text('<testsuite><properties><property name="kubernetes_version" '
                     'value="v1.36.0"/></properties></testsuite>')
    outcomes = passing_outcomes() | {"suites/test_PERSIST-004.py::t": "failed"}
    path = bundle.write(tmp_path / "b", {bundle.JUNIT: junit},
                        {"kubernetes_version": "v1.37.2"},
                        fold(outcomes, requirement_tests()), None)
    problems, _ = bundle.verify(path)
    assert problems == ["required requirement PERSIST-004: failed",
                        "versions inconsistent: kubernetes_version is 'v1.37.2' in facts.json, "
                        "'v1.36.0' in junit.xml"]


def test_a_run_outside_certification_mode_is_a_record_naming_what_it_did_not_pass(tmp_path):
    junit = tmp_path / "junit.xml"
    junit.write_text('<testsuite><properties/></testsuite>')
    outcomes = passing_outcomes() | {"suites/test_PERSIST-004.py::t": "xfailed"}
    results = fold(outcomes, requirement_tests())
    record = bundle.write(tmp_path / "record", {bundle.JUNIT: junit}, {"certify": "false"},
                          results, None)
    problems, notes = bundle.verify(record)
    assert problems == []
    assert notes[-1].startswith(bundle.NOT_A_CERTIFICATION)
    assert "PERSIST-004: xfailed" in notes[-1]
    certified = bundle.write(tmp_path / "certified", {bundle.JUNIT: junit}, {"certify": "true"},
                             results, None)
    assert bundle.verify(certified)[0] == ["required requirement PERSIST-004: xfailed"]


def test_not_a_bundle(tmp_path):
    assert bundle.verify(tmp_path) == (["SHA256SUMS is missing: not a bundle"], [])


class Item:
    def __init__(self, requirement, *caps):
        self.marks = {"requirement": [SimpleNamespace(args=[requirement])],
                      "requires": [SimpleNamespace(args=[c.value for c in caps])]}

    def iter_markers(self, name):
        return iter(self.marks.get(name, []))


def loop_session(certify, *items):
    caps = Capabilities()
    caps.deny(Capability.RUNNING_VMS, "virt-handler is not ready")
    cluster = SimpleNamespace(options=SimpleNamespace(certify=certify), error=None,
                              capabilities=caps, kube=object())
    config = SimpleNamespace(stash={SESSION_KEY: cluster})
    return SimpleNamespace(config=config, items=list(items))


def test_certify_refuses_before_the_first_test_naming_what_is_missing():
    session = loop_session(True, Item("VM-001", Capability.RUNNING_VMS),
                           Item("PERSIST-009", Capability.RUNNING_VMS))
    with pytest.raises(pytest.exit.Exception) as refused:
        certification.pytest_runtestloop(session)
    message = str(refused.value)
    assert "running-vms: virt-handler is not ready (needed by VM-001)" in message
    assert "PERSIST-009" not in message  # optional: may skip


def test_without_certify_or_with_everything_present_the_run_goes_on():
    certification.pytest_runtestloop(loop_session(False, Item("VM-001", Capability.RUNNING_VMS)))
    certification.pytest_runtestloop(loop_session(True, Item("VM-001")))


def test_verify_from_the_command_line(tmp_path):
    path = make_bundle(tmp_path)
    verify = [sys.executable, "-m", "reports", "verify", str(path)]
    ok = QUIET.run(verify, Timeout.LOCAL_COMMAND, cwd=Path(__file__).parent.parent)
    assert ok.returncode == 0, ok.stderr
    assert "bundle verified" in ok.stdout and bundle.NOT_FOR_HARDWARE in ok.stdout
    (path / bundle.FACTS).write_text("{}")
    bad = QUIET.run(verify, Timeout.LOCAL_COMMAND, cwd=Path(__file__).parent.parent)
    assert bad.returncode == 1 and "edited after the run: facts.json" in bad.stdout


def test_a_worker_not_yet_on_the_cluster_leaves_the_verdict_to_the_per_test_gate():
    """An xdist worker reaches the cluster at its first test, after the controller's
    set-up: before that its capabilities say nothing."""
    session = loop_session(True, Item("VM-001", Capability.RUNNING_VMS))
    session.config.stash[SESSION_KEY].kube = None
    assert certification.pytest_runtestloop(session) is None


def test_a_bundle_folder_reused_by_a_later_run_holds_only_that_run(tmp_path):
    path = make_bundle(tmp_path)
    (path / "stale.txt").write_text("from an earlier run")
    path = make_bundle(tmp_path)
    assert not (path / "stale.txt").exists()
    assert bundle.verify(path)[0] == []


def test_a_bundle_without_its_facts_is_rejected_not_crashed(tmp_path):
    path = make_bundle(tmp_path)
    (path / bundle.FACTS).unlink()
    sums = path / bundle.SUMS
    sums.write_text("".join(line + "\n" for line in sums.read_text().splitlines()
                            if not line.endswith(bundle.FACTS)))
    assert bundle.verify(path)[0] == [f"missing file: {bundle.FACTS}"]


def report(nodeid, when, outcome, longrepr=None, **extra):
    made = pytest.TestReport(nodeid, ("f.py", 1, nodeid), {}, outcome, longrepr, when,
                             sections=extra.pop("sections", ()), duration=1.25)
    for key, value in extra.items():
        setattr(made, key, value)
    return made


def test_the_console_record_holds_progress_results_failures_and_counts(tmp_path):
    import logging

    from fixtures.console import PROJECT_LOGGER, ConsoleRecord

    record = ConsoleRecord(tmp_path / "console.log")
    logger = logging.getLogger(PROJECT_LOGGER)
    logger.setLevel(logging.INFO)
    logger.addHandler(record.handler)
    try:
        logging.getLogger("kdc.local").info("reusing the running cluster")
        for made in [report("t::ok", "setup", "passed"), report("t::ok", "call", "passed"),
                     report("t::bad", "call", "failed", "assert 1 == 2",
                            sections=[("Captured log call", "kdc.cleanup: gone")]),
                     report("t::skip", "setup", "skipped", ("f.py", 1, "Skipped: no KVM")),
                     report("t::xf", "call", "skipped", None, wasxfail="kubevirt#1"),
                     report("t::td", "teardown", "failed", "namespace stuck")]:
            record.pytest_runtest_logreport(made)
        record.pytest_terminal_summary(exitstatus=1)
    finally:
        logger.removeHandler(record.handler)
        record.close()
    text = (tmp_path / "console.log").read_text()
    assert "[kdc.local] reusing the running cluster" in text
    assert "t::ok PASSED 1.2s" in text and "t::bad FAILED" in text
    assert "assert 1 == 2" in text and "kdc.cleanup: gone" in text
    assert "t::skip SKIPPED (at setup)" in text and "Skipped: no KVM" in text
    assert "t::xf XFAILED" in text and "t::td ERROR (at teardown)" in text
    assert text.rstrip().endswith(
        "== 1 error, 1 failed, 1 passed, 1 skipped, 1 xfailed; exit status 1")


FLAKY_TEST = """
import itertools
attempts = itertools.count()

def test_passes_on_its_second_attempt():
    assert next(attempts) == 1

def test_always_fails():
    assert False
"""


def test_a_test_that_passed_only_when_retried_is_flaky_never_passed(pytester):
    """With pytest-rerunfailures' --reruns, the attempts reach the outcome recorder."""
    pytester.makeconftest("""
import json
from reports.results import Outcomes

recorder = Outcomes()

def pytest_configure(config):
    config.pluginmanager.register(recorder, "kdc-outcomes")

def pytest_sessionfinish(session):
    with open("outcomes.json", "w") as out:
        json.dump(recorder.by_test, out)
""")
    pytester.makepyfile(test_flaky=FLAKY_TEST)
    pytester.runpytest("-p", "rerunfailures", "--reruns", "1", "-p", "no:randomly")
    outcomes = json.loads((pytester.path / "outcomes.json").read_text())
    assert outcomes == {"test_flaky.py::test_passes_on_its_second_attempt": "flaky",
                        "test_flaky.py::test_always_fails": "failed"}
    results = fold({f"suites/{k}": v for k, v in outcomes.items()},
                   {"PERSIST-001": ["test_flaky.py::test_passes_on_its_second_attempt"]})
    assert "PERSIST-001: flaky" in certification_failures(results)
