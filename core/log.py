"""The project's log lines: one logger per topic under ``kdc`` (``kdc`` for the run's
set-up, ``kdc.local`` for the hermetic cluster, ``kdc.build``, ``kdc.install``,
``kdc.cleanup``, and ``kdc.<label>`` for a command's streamed output). Under pytest
they reach the terminal through its live log (``log_cli`` in pyproject.toml, the same
format); scripts and command-line tools call ``log_to_stderr``."""

from __future__ import annotations

import logging

FORMAT = "[%(name)s] %(message)s"  # as log_cli_format in pyproject.toml


def log_to_stderr(level: int = logging.INFO) -> None:
    """Outside pytest: the project's records on stderr, as the live log shows them."""
    logging.basicConfig(level=level, format=FORMAT)
