"""The one command runner: named timeouts that stop the whole command, stdin from any
source, stderr apart, and one error that says what failed and why."""

import io
import logging
import re
import time
from pathlib import Path

import pytest

from core.commands import QUIET, CommandFailed, Runner, check, output
from core.timeouts import Timeout

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def short_timeouts(monkeypatch):
    """Every named timeout a hundredth of itself: LOCAL_COMMAND is 1.2 s."""
    monkeypatch.setenv("KDC_TIMEOUT_SCALE", "0.01")


def test_a_hung_command_is_stopped_at_its_named_timeout_with_its_children(
        short_timeouts, tmp_path):
    pid_file = tmp_path / "child"
    result = QUIET.run(["sh", "-c", f"sleep 600 & echo $! > {pid_file}; wait"],
                       Timeout.LOCAL_COMMAND)
    with pytest.raises(CommandFailed) as err:
        check(result, "look at the script")
    assert result.timed_out is Timeout.LOCAL_COMMAND
    message = str(err.value)
    assert "LOCAL_COMMAND" in message and "sleep 600" in message
    assert "Fix: look at the script" in message
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 5  # SIGKILL is delivered, not awaited, by killpg
    while running(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not running(child)  # the sleep went with its shell


def running(pid: int) -> bool:
    """Alive and not a zombie (a killed orphan waits for init to reap it)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def test_a_failure_names_the_command_its_exit_status_and_its_stderr_tail():
    result = QUIET.run(["sh", "-c", "echo out; for i in $(seq 1 40); do echo err$i >&2; done;"
                        " exit 3"], Timeout.LOCAL_COMMAND)
    assert result.stdout == "out\n"
    assert "out" not in result.stderr
    with pytest.raises(CommandFailed) as err:
        check(result)
    message = str(err.value)
    assert "exited 3" in message and "err40" in message
    assert "err1\n" not in message  # a tail, not the whole output
    assert result.summary().endswith("exited 3: err40")


def test_a_missing_program_is_reported_not_raised_as_an_os_error():
    with pytest.raises(CommandFailed, match=r"no-such-program-kdc.* could not start"):
        output(["no-such-program-kdc"], Timeout.LOCAL_COMMAND)


@pytest.mark.parametrize("kind", ["bytes", "text", "file", "stream"])
def test_stdin_comes_from_bytes_text_a_file_or_a_stream(kind, tmp_path):
    data = b"line\n" * 50_000  # larger than a pipe's buffer
    source = tmp_path / "input"
    source.write_bytes(data)
    stdin = {"bytes": data, "text": data.decode(), "file": source,
             "stream": io.BytesIO(data)}[kind]
    assert output(["wc", "-c"], Timeout.LOCAL_COMMAND, stdin=stdin).strip() == str(len(data))


def test_echoed_output_is_logged_line_by_line_under_the_label(caplog):
    caplog.set_level(logging.INFO)
    Runner(echo=True).run(["sh", "-c", "echo progress; echo trouble >&2"],
                          Timeout.LOCAL_COMMAND, label="build x")
    assert sorted((r.name, r.getMessage()) for r in caplog.records) == [
        ("kdc.build x", "progress"), ("kdc.build x", "trouble")]


def test_no_module_runs_a_process_but_through_the_runner():
    direct = re.compile(r"subprocess\.(run|Popen|call|check_call|check_output)\(")
    offenders = [str(path.relative_to(ROOT)) for folder in
                 ("core", "fixtures", "kubevirtci", "reports", "scripts", "suites", "tests")
                 for path in (ROOT / folder).rglob("*.py")
                 if direct.search(path.read_text()) and path != ROOT / "core" / "commands.py"]
    assert offenders == []
