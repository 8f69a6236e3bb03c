"""``python -m reports catalog [--check]``: write (or check) docs/requirements.md.
``python -m reports verify BUNDLE``: check a run's certification bundle.
``python -m reports sonobuoy-plugin``: the Sonobuoy plugin definition (docs/profiles.md,
Sonobuoy)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from core.errors import SuiteUsageError
from core.log import log_to_stderr
from kubevirtci.provider import SANITY_CLIENT_IMAGE, SUITE_IMAGE
from reports import bundle, sonobuoy
from reports.catalog import document, marked_tests

ROOT = Path(__file__).resolve().parent.parent
DOCUMENT = ROOT / "docs" / "requirements.md"


def main() -> int:
    log_to_stderr()
    parser = argparse.ArgumentParser(prog="python -m reports")
    commands = parser.add_subparsers(dest="command", required=True)
    catalog = commands.add_parser("catalog", help="write the requirements reference")
    catalog.add_argument("--check", action="store_true",
                         help="fail if docs/requirements.md is not up to date")
    verify = commands.add_parser("verify", help="check a certification bundle")
    verify.add_argument("bundle", type=Path)
    plugin = commands.add_parser("sonobuoy-plugin", help="print the Sonobuoy plugin definition")
    plugin.add_argument("--profile", default="reference-nvme",
                        help="a profile of profiles/ or a vendor's profile file (sent along)")
    plugin.add_argument("--image", default=SUITE_IMAGE, help="the suite image, as nodes pull it")
    plugin.add_argument("--sanity-image", default=SANITY_CLIENT_IMAGE,
                        help="the sanity client image, as nodes pull it")
    plugin.add_argument("--pytest-args", default="",
                        help='further pytest arguments, e.g. "-m driver_sanity"')
    plugin.add_argument("--certify", action="store_true", help="certification mode")
    args = parser.parse_args()
    if args.command == "sonobuoy-plugin":
        try:
            print(sonobuoy.plugin_yaml(profile=args.profile, image=args.image,
                                       sanity_image=args.sanity_image,
                                       pytest_args=args.pytest_args, certify=args.certify),
                  end="")
        except SuiteUsageError as err:
            print(err, file=sys.stderr)
            return 2
        return 0
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
