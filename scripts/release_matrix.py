"""The release matrix: the KubeVirt suites against a list of KubeVirt releases on one
kept cluster, KubeVirt replaced between them, and docs/release-matrix.md written from
the runs' bundles (reports/matrix.py):

    python scripts/release_matrix.py --releases v1.8.1,v1.8.2,v1.8.3,v1.8.4,v1.9.0
    python scripts/release_matrix.py --write-only     # the document from earlier runs

Each release is one ordinary run (`pytest suites --kubevirt-version R --keep-cluster
--cleanup-stale`), so its bundle is what any user's run of that release would produce.
Further arguments after `--` go to every run (e.g. `-- -n 2`, `--provider kubevirtci`)."""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from core.commands import Runner  # noqa: E402
from core.log import log_to_stderr  # noqa: E402
from core.timeouts import Timeout  # noqa: E402
from reports.matrix import document, read_run  # noqa: E402

SERVED = ("v1.8.1", "v1.8.2", "v1.8.3", "v1.8.4", "v1.9.0")
# The suites that judge KubeVirt (the pod-level, cluster and driver suites do not).
KUBEVIRT_SUITES = "persistence or mixed or device_info or admission or lifecycle or vm"
OUTPUT = ROOT / "_output" / "release-matrix"
DOCUMENT = ROOT / "docs" / "release-matrix.md"


def run_release(release: str, extra: list[str]) -> tuple[int, float]:
    """One release's run, its output streamed; (exit status, seconds)."""
    folder = OUTPUT / release
    argv = [sys.executable, "-m", "pytest", "suites", "-m", KUBEVIRT_SUITES,
            "--kubevirt-version", release, "--keep-cluster", "--cleanup-stale",
            "--artifacts-dir", str(folder),
            f"--junitxml={folder / 'junit.xml'}", *extra]
    print(f"== {release}: {shlex.join(argv[2:])}", flush=True)
    start = time.monotonic()
    result = Runner().run(argv, Timeout.RUN_RELEASE_SUITES, cwd=ROOT, label=release)
    status = result.returncode
    if result.timed_out is not None:
        print(f"== {release}: {result.status}", flush=True)
        status = -1
    return status, time.monotonic() - start


def main() -> int:
    log_to_stderr()
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--releases", default=",".join(SERVED),
                        help="comma-separated KubeVirt releases (default: every served "
                             "1.8 and 1.9 release)")
    parser.add_argument("--write-only", action="store_true",
                        help="only write the document from the bundles under "
                             f"{OUTPUT.relative_to(ROOT)}")
    parser.add_argument("pytest_args", nargs="*", help="after --: passed to every run")
    args = parser.parse_args()
    releases = [r.strip() for r in args.releases.split(",") if r.strip()]
    if not args.write_only:
        for release in releases:
            status, seconds = run_release(release, args.pytest_args)
            print(f"== {release}: exit {status} after {seconds:.0f} s", flush=True)
    bundles = [OUTPUT / r / "bundle" for r in releases]
    missing = [str(b) for b in bundles if not b.is_dir()]
    if missing:
        print(f"error: no bundle at {', '.join(missing)}. Fix: run those releases (without "
              "--write-only)", file=sys.stderr)
        return 1
    command = "python scripts/release_matrix.py --releases " + ",".join(releases)
    DOCUMENT.write_text(document([read_run(b) for b in bundles], command))
    print(f"wrote {DOCUMENT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
