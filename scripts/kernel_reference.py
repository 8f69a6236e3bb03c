"""The kernel reference (``tox -e kernel-reference``): what a real Linux kernel shows of
the devices the hermetic cluster EMULATES, recorded as test data for the emulator.

A throwaway QEMU (TCG) VM boots Debian trixie's own kernel on a machine like a
kubevirtci node: q35 with an emulated IOMMU (``intel-iommu``), QEMU NVMe controllers as
kubevirtci's ``--nvme 1G`` adds them (serial ``nvme-<i>``), and an igb NIC with SR-IOV.
Inside, ``driver/cmd/kernel-reference`` records the devices' sysfs entries, IOMMU groups,
the nvme and block classes, ``/dev`` nodes and what ``lspci``, ``lsblk`` and libvirt's node
device driver show, at boot and after each step of the reference driver's bind sequence
(to vfio-pci and back, step by step and through the driver's own ``pci.Binder``), hot
removal, rescan and SR-IOV. The recording goes to
``driver/emulation/sysfs/reference/kernel-reference.json``: the EMULATED kernel shows each
function as the recording shows it, in each driver state, and its Go test holds the
EMULATED tree against the recording step by step.

    python scripts/kernel_reference.py [--out PATH]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import shutil
import signal
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from core.commands import Runner, check  # noqa: E402
from core.errors import SuiteUsageError  # noqa: E402
from core.log import log_to_stderr  # noqa: E402
from core.timeouts import Timeout  # noqa: E402
from kubevirtci.local import components, debian  # noqa: E402

log = logging.getLogger("kdc.kernel-reference")

# The VM's root, which also runs its QEMU (trixie's, the generation of the launcher's):
# Debian's kernel, systemd and udev as on a node, the tools whose view is recorded.
RECIPE = debian.RootRecipe(
    name="kernel-reference",
    packages=("systemd", "systemd-sysv", "udev", "kmod", "linux-image-amd64",
              "initramfs-tools", "pciutils", "util-linux", "mount", "qemu-system-x86",
              "libvirt-daemon-driver-nodedev", "libvirt-clients"),
)
DISK_SIZE = "4G"  # sparse
DISK_LABEL = "kref-root"
OUTPUT = ROOT / "_output" / "kernel-reference"
DEFAULT_RECORDING = ROOT / "driver" / "emulation" / "sysfs" / "reference" / "kernel-reference.json"
# As kubevirtci's --nvme 1G --nvme 1G: serials nvme-<i>, 1 GiB each.
NVME_BYTES = (1 << 30, 1 << 30)
GUEST_SCRIPT = """#!/bin/sh
# The kernel reference's guest side: systemd runs it from the kernel command line and
# powers off when it ends.
here=$(dirname "$0")
exec >>"$here/guest.log" 2>&1
modprobe vfio-pci
systemctl start libvirtd.service
"$here/kernel-reference" --out "$here/recording.json" --provenance "$here/provenance.json"
echo $? >"$here/status"
"""


def qemu_argv(kernel: Path, initrd: Path, disk: Path) -> list[str]:
    """A kubevirtci node's devices: NVMe on the root complex as its ``--nvme`` adds them,
    behind intel-iommu; an igb NIC (SR-IOV capable) behind a root port."""
    mount = (f"work:{OUTPUT}:9p:trans=virtio,version=9p2000.L,msize=1048576,rw,"
             "x-systemd.before=kernel-command-line.service,"
             "x-systemd.required-by=kernel-command-line.service")
    append = " ".join(["console=ttyS0", f"root=LABEL={DISK_LABEL}", "rw", "panic=-1",
                       "intel_iommu=on", f"systemd.run={OUTPUT / 'guest.sh'}",
                       "systemd.run_success_action=poweroff",
                       "systemd.run_failure_action=poweroff", f"systemd.mount-extra={mount}"])
    argv = ["qemu-system-x86_64", "-machine", "q35", "-accel", "tcg,thread=multi",
            "-cpu", "max", "-smp", "2", "-m", "2G", "-display", "none", "-vga", "none",
            "-nic", "none", "-no-reboot", "-serial", f"file:{OUTPUT / 'console.log'}",
            "-kernel", str(kernel), "-initrd", str(initrd), "-append", append,
            "-device", "intel-iommu",
            "-drive", f"file={disk},format=raw,if=virtio,snapshot=on",
            "-virtfs", f"local,path={OUTPUT},mount_tag=work,security_model=passthrough",
            "-device", "pcie-root-port,id=rp1,chassis=1",
            "-netdev", "user,id=n0,restrict=on", "-device", "igb,bus=rp1,netdev=n0"]
    for i, size in enumerate(NVME_BYTES):
        media = OUTPUT / f"nvme-{i}.img"
        with media.open("wb") as f:
            f.truncate(size)  # sparse
        argv += ["-drive", f"format=raw,id=NVME{i},if=none,file={media}",
                 "-device", f"nvme,drive=NVME{i},serial=nvme-{i}"]
    return argv


def in_root(root: Path, argv: list[str], timeout: Timeout, label: str,
            shown: Path | None = None) -> str:
    """Run ``argv`` chrooted into the root (its QEMU, not the host's), the output folder
    (and ``shown``, such as the VM image's folder) visible at their own paths."""
    script = " ".join(f"'{a}'" for a in argv)
    result = Runner().run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c",
         'mount -t proc proc "$R/proc" && mount --rbind /dev "$R/dev" && '
         'for p in "$OUT" ${SHOWN:+"$SHOWN"}; do mkdir -p "$R$p" && mount --bind "$p" "$R$p"; '
         'done && '
         f'exec chroot "$R" {script}'],
        timeout, env={"R": str(root), "OUT": str(OUTPUT),
                      "SHOWN": str(shown or ""),
                      "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}, label=label)
    check(result, f"see {OUTPUT / 'console.log'} and {OUTPUT / 'guest.log'}")
    return result.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_RECORDING,
                        help=f"where the recording goes (default {DEFAULT_RECORDING})")
    args = parser.parse_args()
    log_to_stderr()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    components.check_host_packages()
    shutil.rmtree(OUTPUT, ignore_errors=True)
    OUTPUT.mkdir(parents=True)
    log.info("the recorder and the emulator, built static from driver/cmd")
    for program in ("kernel-reference", "nvme-sysfs-emulator"):
        check(Runner().run(["go", "build", "-trimpath", "-o", OUTPUT / program,
                            f"./cmd/{program}"], Timeout.GO_BUILD,
                           env={**os.environ, "CGO_ENABLED": "0"},
                           cwd=components.DRIVER_DIR, label="go build"), "see the Go error above")
    root = debian.build_root(RECIPE)
    kernel, initrd, disk = debian.vm_image(root, DISK_LABEL, DISK_SIZE)
    (OUTPUT / "guest.sh").write_text(GUEST_SCRIPT)
    (OUTPUT / "guest.sh").chmod(0o755)
    argv = qemu_argv(kernel, initrd, disk)
    qemu_version = in_root(root, ["qemu-system-x86_64", "--version"], Timeout.LOCAL_COMMAND,
                           "qemu").splitlines()[0]
    _, kernel_package = debian.installed_source(root, "linux-image-amd64")
    (OUTPUT / "provenance.json").write_text(json.dumps({
        "qemu": qemu_version, "qemuArgs": [a.replace(str(OUTPUT), "OUT") for a in argv],
        "debian": f"linux-image-amd64 {kernel_package} (trixie)",
        "recipe": "tox -e kernel-reference"}))
    log.info(f"booting the reference VM ({qemu_version}, TCG); its log: {OUTPUT}/guest.log")
    in_root(root, argv, Timeout.KERNEL_REFERENCE, "reference-vm", shown=disk.parent)
    status = OUTPUT / "status"
    if not status.is_file() or status.read_text().strip() != "0":
        raise SuiteUsageError("the reference VM did not record the kernel's tree",
                              f"see {OUTPUT / 'guest.log'} and {OUTPUT / 'console.log'}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(OUTPUT / "recording.json", args.out)
    log.info(f"recorded: {args.out}")
    return compare_lspci(root, json.loads((OUTPUT / "recording.json").read_text()))


# What differs between two functions of one kind: their addresses, IRQ and group.
ADDRESSES = re.compile(r"^[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]|IRQ [0-9]+|Memory at [0-9a-f]+|"
                       r"IOMMU group: [0-9]+", re.M)


def compare_lspci(root: Path, recording: dict) -> int:
    """The reference VM's own lspci (trixie's pciutils) over an EMULATED machine of
    kubevirtci's controllers prints, for each, what it printed for the kernel's, modulo
    addresses (the Go tests compare trees with this host's pciutils)."""
    emulated = OUTPUT / "emulated"
    check(Runner().run([OUTPUT / "nvme-sysfs-emulator", f"--root={emulated}",
                        f"--device-state={emulated / 'devices'}", "--build-only",
                        *(f"--nvme={size >> 30}G" for size in NVME_BYTES)],
                       Timeout.LOCAL_COMMAND, label="emulator"), "see the emulator's error above")
    differ = 0
    for i, bdf in enumerate(recording["functions"]["nvme"]):
        want = recording["tools"][f"lspci -vvv -nn -k -s {bdf}"]
        got = in_root(root, ["lspci", "-O", f"sysfs.path={emulated}/sys/bus/pci", "-vvv", "-nn",
                             "-k", "-s", f"0000:00:{5 + i:02x}.0"], Timeout.LOCAL_COMMAND, "lspci")
        # libkmod answers from the host's modules, not the VM's
        same = [ADDRESSES.sub("#", text).replace("\tKernel modules: nvme\n", "")
                for text in (got, want)]
        if same[0] != same[1]:
            differ += 1
            log.error(f"lspci of EMULATED 0000:00:{5 + i:02x}.0 differs from the kernel's "
                      f"{bdf}:\n{got}\nkernel:\n{want}")
        else:
            log.info(f"the reference VM's lspci -vvv prints the same for EMULATED "
                     f"0000:00:{5 + i:02x}.0 as for the kernel's {bdf} (modulo addresses)")
    return 1 if differ else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except SuiteUsageError as error:
        print(f"kernel reference: {error}", file=sys.stderr)
        sys.exit(2)
