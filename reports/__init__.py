"""Report plugins: JUnit properties, self-contained HTML, skip summary.

They read what a run publishes under the stash keys below and import nothing of the
fixtures, so any plugin (or a vendor's) can feed them."""

from __future__ import annotations

from typing import Protocol

import pytest


class RunInfo(Protocol):
    """What the reports say about the run as a whole."""

    def header_lines(self) -> list[str]: ...

    def run_properties(self) -> dict[str, str]: ...


RUN_INFO_KEY = pytest.StashKey[RunInfo]()
# Per test: diagnostics captured when it failed, {name: text}, attached to its report.
DIAGNOSTICS_KEY = pytest.StashKey[dict[str, str]]()
