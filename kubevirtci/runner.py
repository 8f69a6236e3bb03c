"""Running host commands with progress: output is streamed line by line so that long
work (cluster bring-up, builds) is never silent. Providers take a runner so that unit
tests can inject a recording one."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol


@dataclass(frozen=True)
class CommandResult:
    argv: tuple[str, ...]
    returncode: int
    stdout: str


class CommandFailed(RuntimeError):
    def __init__(self, result: CommandResult, hint: str) -> None:
        tail = "\n".join(result.stdout.strip().splitlines()[-15:])
        super().__init__(
            f"`{' '.join(result.argv)}` exited {result.returncode}. Fix: {hint}\n{tail}"
        )
        self.result = result


class CommandRunner(Protocol):
    def run(
        self,
        argv: Sequence[str],
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        label: str = "",
        timeout: float | None = None,
    ) -> CommandResult: ...


class StreamingRunner:
    """Runs a command, echoing each output line prefixed by ``label`` to stderr; one that
    outlives ``timeout`` seconds is killed and reported as failed."""

    def __init__(self, echo: bool = True) -> None:
        self.echo = echo

    def run(
        self,
        argv: Sequence[str],
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        label: str = "",
        timeout: float | None = None,
    ) -> CommandResult:
        lines: list[str] = []
        with subprocess.Popen(
            list(argv),
            env=dict(env) if env is not None else None,
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        ) as proc:
            # The output is read as it comes, so the deadline is a timer that kills.
            killer = threading.Timer(timeout, proc.kill) if timeout else None
            if killer:
                killer.start()
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.append(line)
                if self.echo:
                    sys.stderr.write(f"[{label or argv[0]}] {line}")
            returncode = proc.wait()
            if killer:
                killer.cancel()
        if killer and returncode < 0:
            lines.append(f"(killed: still running after {timeout:.0f} s)\n")
        return CommandResult(tuple(argv), returncode, "".join(lines))


def check(result: CommandResult, hint: str) -> CommandResult:
    if result.returncode != 0:
        raise CommandFailed(result, hint)
    return result
