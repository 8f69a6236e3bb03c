"""Supervised host processes of the hermetic cluster: started detached (so a kept
cluster outlives pytest), logs to files, tracked by pid files."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from core import commands
from core.timeouts import Timeout, WaitFailed, WaitTimeout
from core.waits import Stop, Verdict, poll


@dataclass(frozen=True)
class ProcessSpec:
    name: str
    argv: list[str]
    env: dict[str, str] | None = None


class Supervisor:
    def __init__(self, pid_dir: Path, log_dir: Path) -> None:
        self.pid_dir = pid_dir
        self.log_dir = log_dir

    def pid_file(self, name: str) -> Path:
        return self.pid_dir / f"{name}.pid"

    def log_file(self, name: str) -> Path:
        return self.log_dir / f"{name}.log"

    def pid(self, name: str) -> int | None:
        try:
            pid = int(self.pid_file(name).read_text())
        except (FileNotFoundError, ValueError):
            return None
        return pid if _alive(pid) else None

    def start(self, spec: ProcessSpec) -> int:
        running = self.pid(spec.name)
        if running:
            return running
        self.pid_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        with self.log_file(spec.name).open("ab") as log:
            proc = commands.start(spec.argv, log=log, env={**os.environ, **(spec.env or {})})
        self.pid_file(spec.name).write_text(str(proc.pid))
        return proc.pid

    def names(self) -> list[str]:
        return sorted(p.stem for p in self.pid_dir.glob("*.pid"))

    def stop(self, name: str) -> None:
        pid = self.pid(name)
        if pid:
            _terminate(pid)
        self.pid_file(name).unlink(missing_ok=True)

    def wait_until_ready(self, name: str, ready: Callable[[], bool], timeout: Timeout,
                    what: str) -> None:
        """Wait until ``ready()``; end at once when process ``name`` exits. A failure
        says why with the process's last log lines."""
        def settled() -> Verdict:
            if ready():
                return True
            return Stop(f"{name} exited") if self.pid(name) is None else False

        try:
            poll(settled, timeout, what)
        except (WaitTimeout, WaitFailed) as err:
            raise RuntimeError(f"{err}. Last log lines of {name}:\n{self.tail(name)}\n"
                               f"Fix: see {self.log_file(name)}") from err

    def export_logs(self, dest: Path, max_bytes: int) -> list[Path]:
        """Every process's log, its last ``max_bytes`` from a line's start, into ``dest``."""
        dest.mkdir(parents=True, exist_ok=True)
        written = []
        for log in sorted(self.log_dir.glob("*.log")):
            with log.open("rb") as source:
                size = source.seek(0, os.SEEK_END)
                source.seek(max(0, size - max_bytes))
                data = source.read()
            if size > max_bytes:  # from the first whole line, saying what was left out
                data = (f"(the first {size - len(data)} bytes left out)\n".encode()
                        + data.split(b"\n", 1)[-1])
            (dest / log.name).write_bytes(data)
            written.append(dest / log.name)
        return written

    def tail(self, name: str, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_file(name).read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"


def read_proc(pid: int, name: str) -> str | None:
    """``/proc/<pid>/<name>``, or None once the process has ended: before the file is
    opened (ENOENT) or while it is read (ESRCH)."""
    try:
        return Path(f"/proc/{pid}/{name}").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    stat = read_proc(pid, "stat")  # a zombie child of ours is not alive
    return stat is not None and stat.split(")")[-1].split()[0] != "Z"


def _terminate(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        poll(lambda: not _alive(pid), Timeout.PROCESS_EXIT, f"process {pid} to exit")
    except WaitTimeout:
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        with contextlib.suppress(WaitTimeout):
            poll(lambda: not _alive(pid), Timeout.PROCESS_KILLED, f"process {pid} to go")
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
