"""What a conformance run does before its first test and when it is stopped, seen from
a real pytest process: bad input is one line and no cluster work; ``--collect-only``
builds and writes nothing; SIGTERM cleans up as Ctrl-C does, and a second one ends it."""

import os
import signal
import sys
import time
from pathlib import Path

from core.commands import QUIET, CommandResult, Process, start
from core.timeouts import Timeout

ROOT = Path(__file__).resolve().parent.parent


def run_suites(*args: str, cwd: Path) -> CommandResult:
    """A real run that must end at once (bad input, --collect-only)."""
    return QUIET.run([sys.executable, "-m", "pytest", str(ROOT / "suites"), "--rootdir",
                      str(ROOT), "-c", str(ROOT / "pyproject.toml"), *args],
                     Timeout.LOCAL_COMMAND, cwd=cwd)


def test_a_kubeconfig_that_is_not_yaml_is_one_error_line_not_a_traceback(tmp_path):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nclusters: [\n  - a: : b\n")
    result = run_suites("--provider", "existing", "--kubeconfig", str(kubeconfig),
                        "--artifacts-dir", str(tmp_path / "out"), cwd=tmp_path)
    output = result.stdout + result.stderr
    assert result.returncode == 4, output  # pytest's usage error
    assert "INTERNALERROR" not in output and "Traceback" not in output
    errors = [line for line in output.splitlines() if line.startswith("ERROR:")]
    assert len(errors) == 1 and "is not valid YAML at line 3" in errors[0], output
    assert not (tmp_path / "out").exists()  # refused before anything was written


def test_collect_only_builds_nothing_and_writes_no_bundle(tmp_path):
    out = tmp_path / "out"
    result = run_suites("--collect-only", "-q", "--artifacts-dir", str(out), cwd=tmp_path)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "tests collected" in output
    assert "[kdc.build]" not in output and "[kdc.local]" not in output  # no cluster, no build
    assert "certification bundle" not in output and not (out / "bundle").exists()


SLOW_TEST = """
import time
from pathlib import Path

import pytest

@pytest.fixture
def held():
    yield
    Path("teardown").write_text("the test's objects were deleted")
    time.sleep(float(__import__("os").environ.get("TEARDOWN_SECONDS", "0")))

def test_holds_a_device(held):
    Path("started").write_text("")
    time.sleep(60)
"""
CLEANUP_HOOK = """
from pathlib import Path

def pytest_keyboard_interrupt(excinfo):
    Path("interrupted").write_text(str(excinfo.value))
"""
SIGNAL_TIMEOUT = 30  # seconds for a signalled run to end


def start_slow_run(tmp_path: Path, teardown_seconds: int) -> Process:
    (tmp_path / "test_slow.py").write_text(SLOW_TEST)
    (tmp_path / "conftest.py").write_text(CLEANUP_HOOK)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TEARDOWN_SECONDS": str(teardown_seconds)}
    with (tmp_path / "output").open("wb") as log:
        run = start([sys.executable, "-m", "pytest", "-p", "fixtures.signals",
                     "-p", "no:cacheprovider", "test_slow.py"], log=log, cwd=tmp_path, env=env)
    deadline = time.monotonic() + SIGNAL_TIMEOUT
    while not (tmp_path / "started").exists():
        assert time.monotonic() < deadline and run.poll() is None, "the test never started"
        time.sleep(0.1)
    return run


def test_sigterm_ends_a_run_as_ctrl_c_does_tearing_down_what_it_made(tmp_path):
    run = start_slow_run(tmp_path, teardown_seconds=0)
    run.send_signal(signal.SIGTERM)
    run.wait(timeout=SIGNAL_TIMEOUT)
    output = (tmp_path / "output").read_text()
    assert run.returncode == 2, output  # pytest's "interrupted"
    assert (tmp_path / "teardown").exists()  # fixtures torn down
    assert "SIGTERM" in (tmp_path / "interrupted").read_text()  # the Ctrl-C hooks ran
    assert "Traceback" not in output


def test_a_second_sigterm_ends_the_run_at_once(tmp_path):
    run = start_slow_run(tmp_path, teardown_seconds=60)
    run.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + SIGNAL_TIMEOUT
    while not (tmp_path / "teardown").exists():  # now in a slow teardown
        assert time.monotonic() < deadline, "teardown never began"
        time.sleep(0.1)
    run.send_signal(signal.SIGTERM)
    run.wait(timeout=SIGNAL_TIMEOUT)  # well before the teardown's 60 s
    assert run.returncode == -signal.SIGTERM


def test_a_hung_test_fails_at_the_hard_limit_with_its_stack(tmp_path):
    (tmp_path / "test_hung.py").write_text(
        "import time\n\ndef test_hangs():\n    time.sleep(600)\n")
    result = QUIET.run([sys.executable, "-m", "pytest", "-c", str(ROOT / "pyproject.toml"),
                        "--rootdir", str(tmp_path), "--timeout=2", "test_hung.py"],
                       Timeout.LOCAL_COMMAND, cwd=tmp_path)
    assert result.returncode == 1, result.stdout  # a failure, not an error or a hang
    assert "Timeout" in result.stdout and "time.sleep(600)" in result.stdout
