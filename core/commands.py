"""The one way the project runs a command: every call names its timeout (a ``Timeout``,
as waits do) and is killed when it runs out; stdin comes from bytes, text, a file or a
stream (a file is streamed, never read into memory); stdout and stderr are kept apart;
a failure is one error type, ``CommandFailed``, naming the command, its exit status (or
the timeout that stopped it) and the tail of its stderr. Long work shows its output as
it comes, each line a record of the logger ``kdc.<label>``. Providers take a
``CommandRunner`` so that unit tests can inject a recording one."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import subprocess
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Protocol

from core.timeouts import Timeout

Stdin = bytes | str | Path | IO[bytes] | None
Process = subprocess.Popen[bytes]  # a started process (``start``), owned by its caller
TAIL_LINES = 15
KILLED_OUTPUT_SECONDS = 5  # for the output of a command stopped at its timeout


@dataclass(frozen=True)
class CommandResult:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str = ""
    timed_out: Timeout | None = None

    @property
    def status(self) -> str:
        """How the command ended, in words."""
        if self.timed_out is not None:
            return (f"was stopped after {self.timed_out.seconds:.0f} s "
                    f"(timeout {self.timed_out.name}: {self.timed_out.value[0]})")
        if self.returncode == NOT_FOUND and not self.stdout:
            return "could not start (not found)"
        return f"exited {self.returncode}"

    @property
    def failed(self) -> bool:
        return self.returncode != 0 or self.timed_out is not None

    @property
    def output_tail(self) -> list[str]:
        """The last lines of stderr, or of stdout where it wrote nothing to stderr."""
        output = self.stderr.strip() or self.stdout.strip()
        return output.splitlines()[-TAIL_LINES:]

    def summary(self) -> str:
        """One line: the command, how it ended, and its last line of output."""
        last = next(iter(self.output_tail[-1:]), "")
        return f"`{' '.join(self.argv)}` {self.status}" + (f": {last.strip()}" if last else "")


NOT_FOUND = 127  # as a shell reports a command it cannot find


class CommandFailed(RuntimeError):
    """A command that failed or ran out of time: its command line, how it ended, its
    stderr's last lines (its stdout's where it wrote nothing to stderr), and the fix."""

    def __init__(self, result: CommandResult, hint: str = "") -> None:
        tail = "\n".join(result.output_tail)
        fix = f". Fix: {hint}" if hint else ""
        super().__init__(f"`{' '.join(result.argv)}` {result.status}{fix}"
                         + (f"\n{tail}" if tail else ""))
        self.result = result


class CommandRunner(Protocol):
    def run(
        self,
        argv: Sequence[str],
        timeout: Timeout,
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        label: str = "",
        stdin: Stdin = None,
    ) -> CommandResult: ...


class Runner:
    """Runs a command in a session of its own, so that a timeout (or an interrupt of the
    run) ends the whole process group, the children of ``nsenter`` or ``make`` included.
    With ``echo``, every line of output is logged as it comes (logger ``kdc.<label>``)."""

    def __init__(self, echo: bool = True) -> None:
        self.echo = echo

    def run(
        self,
        argv: Sequence[str],
        timeout: Timeout,
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        label: str = "",
        stdin: Stdin = None,
    ) -> CommandResult:
        argv = tuple(str(a) for a in argv)
        source = open(stdin, "rb") if isinstance(stdin, Path) else None  # noqa: SIM115
        try:
            return self._run(argv, timeout, env, cwd, label or Path(argv[0]).name,
                             source or stdin)
        finally:
            if source is not None:
                source.close()

    def _run(self, argv: tuple[str, ...], timeout: Timeout, env: Mapping[str, str] | None,
             cwd: Path | None, label: str, stdin: Stdin) -> CommandResult:
        feeds = isinstance(stdin, (bytes, str)) or (stdin is not None and not _has_fd(stdin))
        try:
            proc = subprocess.Popen(
                argv, env=dict(env) if env is not None else None, cwd=cwd,
                stdin=subprocess.PIPE if feeds else (stdin or subprocess.DEVNULL),
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
            )
        except FileNotFoundError as err:
            return CommandResult(argv, NOT_FOUND, "", f"{err.strerror}: {err.filename}")
        with proc:
            out: list[str] = []
            err: list[str] = []
            threads = [self._reader(proc.stdout, out, label),
                       self._reader(proc.stderr, err, label)]
            if feeds:
                threads.append(_writer(proc.stdin, stdin))
            try:
                proc.wait(timeout=timeout.seconds)
                timed_out = None
            except subprocess.TimeoutExpired:
                _kill_group(proc)
                timed_out = timeout
            except BaseException:  # an interrupted run leaves no command behind
                _kill_group(proc)
                raise
            for thread in threads:
                # A child that left the group may hold a pipe open: not waited for long.
                thread.join(timeout=None if timed_out is None else KILLED_OUTPUT_SECONDS)
        return CommandResult(argv, proc.returncode, "".join(out), "".join(err), timed_out)

    def _reader(self, stream: IO[bytes] | None, lines: list[str], label: str) -> threading.Thread:
        output_log = logging.getLogger(f"kdc.{label}")

        def read() -> None:
            assert stream is not None
            for raw in stream:
                line = raw.decode(errors="replace")
                lines.append(line)
                if self.echo:
                    output_log.info(line.rstrip("\n"))
        return _started(read)


QUIET = Runner(echo=False)


def output(argv: Sequence[str], timeout: Timeout, hint: str = "", *,
           env: Mapping[str, str] | None = None, cwd: Path | None = None,
           stdin: Stdin = None) -> str:
    """The stdout of a command that must succeed, run quietly; ``CommandFailed`` else."""
    return check(QUIET.run(argv, timeout, env=env, cwd=cwd, stdin=stdin), hint).stdout


def check(result: CommandResult, hint: str = "") -> CommandResult:
    if result.failed:
        raise CommandFailed(result, hint)
    return result


def start(argv: Sequence[str], *, log: IO[bytes] | None = None,
          env: Mapping[str, str] | None = None,
          cwd: Path | None = None) -> Process:
    """A long-running process in a session of its own (a daemon, or a run to be
    signalled), its output into ``log`` or inherited; the caller owns its lifetime."""
    return subprocess.Popen(
        [str(a) for a in argv], env=dict(env) if env is not None else None, cwd=cwd,
        stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT if log else None,
        start_new_session=True,
    )


def _kill_group(proc: Process) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _has_fd(stream: object) -> bool:
    try:
        stream.fileno()  # type: ignore[attr-defined]
    except (AttributeError, OSError, ValueError):
        return False
    return True


def _writer(pipe: IO[bytes] | None, data: Stdin) -> threading.Thread:
    def write() -> None:
        assert pipe is not None
        try:
            if isinstance(data, str):
                pipe.write(data.encode())
            elif isinstance(data, bytes):
                pipe.write(data)
            else:
                shutil.copyfileobj(data, pipe)  # type: ignore[arg-type]
        except BrokenPipeError:  # the command ended without reading it all
            return
        finally:
            with contextlib.suppress(BrokenPipeError):
                pipe.close()
    return _started(write)


def _started(target: Callable[[], None]) -> threading.Thread:
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread
