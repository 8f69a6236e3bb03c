"""``python -m reports catalog [--check]``: write (or check) docs/requirements.md.
``python -m reports verify BUNDLE``: check a run's certification bundle."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from reports import bundle
from reports.catalog import document, marked_tests

ROOT = Path(__file__).resolve().parent.parent
DOCUMENT = ROOT / "docs" / "requirements.md"


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m reports")
    commands = parser.add_subparsers(dest="command", required=True)
    catalog = commands.add_parser("catalog", help="write the requirements reference")
    catalog.add_argument("--check", action="store_true",
                         help="fail if docs/requirements.md is not up to date")
    verify = commands.add_parser("verify", help="check a certification bundle")
    verify.add_argument("bundle", type=Path)
    args = parser.parse_args()
    if args.command == "verify":
        problems, notes = bundle.verify(args.bundle)
        for line in problems:
            print(f"INVALID: {line}")
        for line in notes:
            print(f"NOTE: {line}")
        if not problems:
            print(f"bundle verified: {args.bundle}")
        return 1 if problems else 0
    text = document(marked_tests(ROOT / "suites"))
    if args.check:
        if not DOCUMENT.exists() or DOCUMENT.read_text() != text:
            print(f"{DOCUMENT} is out of date: run `python -m reports catalog`",
                  file=sys.stderr)
            return 1
        return 0
    DOCUMENT.parent.mkdir(exist_ok=True)
    DOCUMENT.write_text(text)
    print(f"wrote {DOCUMENT}")
    return 0


sys.exit(main())
