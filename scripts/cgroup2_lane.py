"""The cgroup2 lane (``tox -e cgroup2``): the hermetic cluster on a cgroup v2 host, a
throwaway QEMU (TCG) VM; see kubevirtci/local/cgroup2_lane.py.

    python scripts/cgroup2_lane.py [--kubevirt-version V] [PYTEST ARGS]   # default: the
        suites needing no VM, the suite's default KubeVirt
"""

from __future__ import annotations

import argparse
import logging
import shutil
import signal
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from core.commands import start  # noqa: E402
from core.errors import SuiteUsageError  # noqa: E402
from core.log import log_to_stderr  # noqa: E402
from fixtures.options import DEFAULT_KUBEVIRT_VERSION  # noqa: E402
from kubevirtci.local import components  # noqa: E402
from kubevirtci.local.cgroup2_lane import (  # noqa: E402
    OUTPUT,
    build_kubevirt,
    follow,
    kubevirt_release,
    qemu_argv,
    shares,
    vm_image,
    write_guest_settings,
)
from kubevirtci.local.cluster import LocalCluster  # noqa: E402

log = logging.getLogger("kdc.cgroup2-lane")


def main() -> int:
    # Every argument the lane does not take is the guest's pytest's, wherever it stands.
    parser = argparse.ArgumentParser(
        description=" ".join(__doc__.split("\n\n")[0].split()), allow_abbrev=False,
        epilog="Every other argument goes to the guest's pytest (default: the suites that "
               "need no running VM).")
    parser.add_argument("--kubevirt-version", default=DEFAULT_KUBEVIRT_VERSION,
                        help="the KubeVirt release the guest deploys, built here "
                             f"(default {DEFAULT_KUBEVIRT_VERSION})")
    args, pytest_args = parser.parse_known_args()
    log_to_stderr()
    # SIGTERM (a cancelled CI job) ends the lane through its cleanup, the VM's kill included
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    components.check_host_packages(extra=(("qemu-system-x86", "/usr/bin/qemu-system-x86_64"),))
    venv = Path(sys.prefix)
    # Bad input (a tox Python under /usr, a release the proxy does not serve) before builds
    mounts = shares(venv)
    kubevirt = (None if "--without-kubevirt" in pytest_args
                else kubevirt_release(args.kubevirt_version))
    shutil.rmtree(OUTPUT, ignore_errors=True)
    OUTPUT.mkdir(parents=True)
    # The cluster's programs and KubeVirt are built here, on real cores, not in the TCG VM.
    cluster = LocalCluster()
    cluster.build()
    if kubevirt is not None:
        build_kubevirt(kubevirt, cluster)
    kernel, initrd, disk = vm_image()
    write_guest_settings(venv, pytest_args, args.kubevirt_version)
    log.info("booting the lane's VM (QEMU TCG, cgroup v2 only); the guest's log follows")
    with (OUTPUT / "qemu.log").open("wb") as qemu_log:
        process = start(qemu_argv(kernel, initrd, disk, mounts), log=qemu_log)
        try:
            follow(process, OUTPUT / "guest.log")
        finally:  # however the lane ends, the throwaway VM goes with it
            if process.poll() is None:
                process.kill()
                process.wait()
    status_file = OUTPUT / "status"
    if not status_file.is_file():
        raise SuiteUsageError("the cgroup2 lane's VM stopped before its suites ended",
                              f"see {OUTPUT / 'guest.log'} and {OUTPUT / 'console.log'}")
    return int(status_file.read_text().strip())


if __name__ == "__main__":
    try:
        sys.exit(main())
    except SuiteUsageError as error:
        print(f"cgroup2 lane: {error}", file=sys.stderr)
        sys.exit(2)
