"""Test-only lane: the hermetic cluster on a host with the unified cgroup v2 hierarchy only.

This machine runs cgroup v1 (hybrid) and cannot switch; most CI hosts run v2. So the
lane boots a throwaway VM under QEMU (TCG: no usable KVM here) from a Debian trixie root
made with mmdebstrap and Debian's own kernel, with systemd on the unified hierarchy
(``systemd.unified_cgroup_hierarchy=1 cgroup_no_v1=all``). The project, its tox
environment, the Python it was made with, the Go toolchain and module cache and the
build cache are shared into it read-only over 9p at their own paths; the lane's output
folder is shared writable. Inside, ``scripts/cgroup2_guest.sh`` (run by systemd from the
kernel command line) brings the cluster up and runs the suites that need no running VM;
the VM suites skip with the reason (a VM inside a TCG VM is too slow to be worth it).

    python scripts/cgroup2_lane.py [PYTEST ARGS]     # what ``tox -e cgroup2`` runs
"""

from __future__ import annotations

import logging
import os
import shlex
from pathlib import Path

from core.commands import Process, output
from core.errors import SuiteUsageError
from core.timeouts import Timeout, WaitTimeout
from core.waits import poll
from kubevirtci.kubevirt_code import KubeVirtCode, release_code
from kubevirtci.kubevirt_source import BuiltSource
from kubevirtci.local import components, debian
from kubevirtci.local.cluster import LocalCluster
from kubevirtci.local.provider import LocalProvider

ROOT = Path(__file__).resolve().parents[2]

log = logging.getLogger("kdc.cgroup2-lane")

# The VM's own root: systemd to boot, Debian's kernel, and what the hermetic cluster
# needs on a host (components.APT_REQUIREMENTS), so that nothing is installed inside.
LANE_ROOT = debian.RootRecipe(
    name="cgroup2-lane",
    packages=("systemd", "systemd-sysv", "udev", "kmod", "linux-image-amd64",
              "initramfs-tools", "procps", "e2fsprogs",
              *(package for package, _ in components.APT_REQUIREMENTS)),
)
DISK_SIZE = "48G"  # sparse; the cluster's images and nodes' layers live on it
DISK_LABEL = "lane-root"
MEMORY = "14G"
OUTPUT = ROOT / "_output" / "cgroup2"
NO_VMS_REASON = ("the cgroup2 lane's nodes run in a TCG VM: a VM inside it is too slow "
                 "to be worth it (the main tier runs the VM suites)")
# The suites that need no running VM: cluster basics, pod-level DRA, driver sanity (and
# the driver's lifecycle), admission against KubeVirt's real webhooks.
DEFAULT_SUITES = ("suites/test_cluster_basics.py", "suites/test_pod_dra.py",
                  "suites/test_driver_sanity.py", "suites/test_driver_sanity_negative.py",
                  "suites/test_driver_lifecycle.py", "suites/test_admission.py")


def vm_image() -> tuple[Path, Path, Path]:
    """(kernel, initrd, disk) of the lane's VM, made once per root recipe."""
    return debian.vm_image(debian.build_root(LANE_ROOT), DISK_LABEL, DISK_SIZE)


def kubevirt_release(version: str) -> KubeVirtCode:
    """The release the lane builds for its guest; the lane takes no tree."""
    try:
        return release_code(version)
    except SuiteUsageError as err:
        raise SuiteUsageError(err.problem, "pass a release tag the Go module proxy serves "
                              "(`go list -m -versions kubevirt.io/kubevirt`); the lane "
                              "builds no tree") from None


def build_kubevirt(code: KubeVirtCode, cluster: LocalCluster) -> None:
    """The KubeVirt release the guest deploys, built here on real cores as a run builds
    it (cached by content): the guest, offline, finds the release in the shared module
    cache and its images in the shared build cache."""
    log.info(f"KubeVirt {code.version} for the guest, built here (cached by content)")
    BuiltSource(code).prepare(LocalProvider(OUTPUT, cluster=cluster))


def go_env(name: str) -> Path:
    return Path(output(["go", "env", name], Timeout.GO_MODULES).strip())


def shares(venv: Path) -> list[tuple[str, Path, bool]]:
    """(tag, host path, writable) of each 9p share, mounted at its own path inside."""
    python = Path(os.path.realpath(venv / "bin" / "python")).parent.parent
    if python == Path("/usr"):  # the guest's own /usr would be hidden
        raise SuiteUsageError(
            f"the lane shares the Python its tox environment was made with into the VM at "
            f"its own path, and {python} is the host's system prefix",
            "run tox with a Python installed outside /usr (pyenv, as on this project's "
            "CI machines)")
    return [("project", ROOT, False), ("python", python, False),
            ("goroot", go_env("GOROOT"), False), ("gomodcache", go_env("GOMODCACHE"), False),
            ("cache", components.CACHE_ROOT, False), ("lane", OUTPUT, True)]


def kernel_command_line(mounts: list[tuple[str, Path, bool]]) -> str:
    words = ["console=ttyS0", f"root=LABEL={DISK_LABEL}", "rw", "panic=-1",
             "systemd.unified_cgroup_hierarchy=1", "cgroup_no_v1=all",
             f"systemd.run={ROOT / 'scripts' / 'cgroup2_guest.sh'}",
             "systemd.run_success_action=poweroff", "systemd.run_failure_action=poweroff"]
    for tag, path, writable in mounts:
        options = ["trans=virtio", "version=9p2000.L", "msize=1048576",
                   "rw" if writable else "ro",
                   # mounted before the lane's command starts, whatever systemd thinks 9p is
                   "x-systemd.before=kernel-command-line.service",
                   "x-systemd.required-by=kernel-command-line.service"]
        words.append(f"systemd.mount-extra={tag}:{path}:9p:{','.join(options)}")
    return " ".join(words)


def qemu_argv(kernel: Path, initrd: Path, disk: Path, mounts: list[tuple[str, Path, bool]]
              ) -> list[str]:
    argv = ["qemu-system-x86_64", "-machine", "q35", "-accel", "tcg,thread=multi",
            "-cpu", "max", "-smp", str(os.cpu_count() or 2), "-m", MEMORY,
            "-display", "none", "-no-reboot", "-serial", f"file:{OUTPUT / 'console.log'}",
            "-kernel", kernel, "-initrd", initrd,
            "-append", kernel_command_line(mounts),
            # the disk stays as cached: every write goes to a throwaway snapshot
            "-drive", f"file={disk},format=raw,if=virtio,snapshot=on",
            "-nic", "user,model=virtio-net-pci,restrict=on"]
    for tag, path, writable in mounts:
        argv += ["-virtfs", f"local,path={path},mount_tag={tag},security_model=passthrough"
                 + ("" if writable else ",readonly=on")]
    return [str(a) for a in argv]


def write_guest_settings(venv: Path, pytest_args: list[str], kubevirt_version: str) -> None:
    """What the guest side reads: its environment, as shell assignments."""
    settings = {"KDC_CACHE": str(components.CACHE_ROOT), "LANE_OUTPUT": str(OUTPUT),
                "KDC_KUBEVIRT_VERSION": kubevirt_version,
                "PROJECT": str(ROOT), "HOME": str(Path.home()),
                "PATH": f"{venv}/bin:{go_env('GOROOT')}/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                "GOMODCACHE": str(go_env("GOMODCACHE")), "GOPROXY": "off",
                # nodes in a TCG VM: every named wait gets three times as long
                "KDC_TIMEOUT_SCALE": "3",
                "KDC_WITHOUT_VMS": NO_VMS_REASON,
                "LANE_PYTEST_ARGS": shlex.join(pytest_args or list(DEFAULT_SUITES))}
    (OUTPUT / "settings.sh").write_text(
        "".join(f"export {key}={shlex.quote(value)}\n" for key, value in settings.items()))


def follow(process: Process, guest_log: Path) -> None:
    """Echo the guest's log as it grows while the VM runs; the VM's exit ends it."""
    position = 0

    def echo_until_exit() -> bool:
        nonlocal position
        exited = process.poll() is not None  # before reading: the last lines are then in
        if guest_log.is_file():
            with guest_log.open(errors="replace") as stream:
                stream.seek(position)
                for line in stream:
                    log.info(line.rstrip("\n"))
                position = stream.tell()
        return exited

    try:
        poll(echo_until_exit, Timeout.CGROUP2_LANE, "the cgroup2 lane's VM to finish")
    except WaitTimeout as err:
        raise SuiteUsageError(str(err).splitlines()[0],
                              f"see {guest_log} and {OUTPUT / 'console.log'}") from None
