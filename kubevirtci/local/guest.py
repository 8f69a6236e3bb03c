"""The hermetic cluster's guest: Debian trixie's cloud kernel and an initramfs with
busybox, booted through KubeVirt's kernel boot
(``spec.domain.firmware.kernelBoot``) from a container image built here. Under QEMU's
TCG it reaches a root shell on the serial console in seconds, and holds what the suites
run in a guest: sysfs reads, ``dd``, the NVMe driver (built into the kernel)."""

from __future__ import annotations

import gzip
import hashlib
import io
import shutil
from pathlib import Path

from core.commands import CommandRunner
from core.errors import SuiteUsageError
from core.profile import GuestImage, KernelBoot
from kubevirtci.local import components, debian, images
from kubevirtci.local.debian import RootRecipe

# ``extract``: the packages' files, nothing configured or run.
GUEST_ROOT = RootRecipe("guest", ("linux-image-cloud-amd64", "busybox-static"),
                        variant="extract")
# The NVMe driver, built into trixie's cloud kernel (cloud disks are NVMe).
BUILTIN_DRIVERS = ("kernel/drivers/nvme/host/nvme.ko",)
KERNEL_PATH, INITRD_PATH = "/boot/vmlinuz", "/boot/initrd.img"
KERNEL_ARGS = "console=ttyS0 quiet panic=-1"
BUSYBOX_APPLETS = ("sh", "mount", "setsid", "cttyhack", "cat", "dd", "echo",
                   "ls", "head", "tail", "sleep", "hostname", "poweroff", "sync", "grep",
                   "tr", "wc", "od", "hexdump", "mkdir", "uname", "sed", "cut")
# The guest is root only: sudo in the suites' commands runs them as they are.
SUDO = b'#!/bin/sh\nexec "$@"\n'
INIT = b"""#!/bin/sh
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
hostname kdc-guest
echo "kdc-guest: up"
export PS1='# ' HOME=/root
while true; do setsid cttyhack sh; done
"""


def _cpio(entries: list[tuple[str, int, bytes]]) -> bytes:
    """A ``newc`` cpio archive of (path, mode, data); symlinks carry their target."""
    out = io.BytesIO()
    for inode, (path, mode, data) in enumerate([*entries, ("TRAILER!!!", 0, b"")], 1):
        name = path.lstrip("/").encode() + b"\0"
        fields = (inode, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(name), 0)
        out.write(b"070701" + b"".join(b"%08X" % f for f in fields) + name)
        out.write(b"\0" * (-(110 + len(name)) % 4) + data + b"\0" * (-len(data) % 4))
    return out.getvalue()


def check_builtin_drivers(root: Path, kernel: str) -> None:
    """The guest loads no modules: what the suites need must be built into the kernel."""
    builtin = (root / "usr/lib/modules" / kernel / "modules.builtin").read_text().split()
    missing = [d for d in BUILTIN_DRIVERS if d not in builtin]
    if missing:
        raise SuiteUsageError(f"the guest kernel {kernel} lacks built-in {', '.join(missing)}",
                              f"pick a Debian kernel package in {GUEST_ROOT.packages} that "
                              "builds them in (trixie's cloud kernel does)")


def initramfs(busybox: Path) -> bytes:
    entries: list[tuple[str, int, bytes]] = [
        (d, 0o040755, b"") for d in ("bin", "dev", "proc", "sys", "root", "tmp")]
    entries += [("init", 0o100755, INIT), ("bin/busybox", 0o100755, busybox.read_bytes()),
                ("bin/sudo", 0o100755, SUDO)]
    entries += [(f"bin/{applet}", 0o120777, b"busybox") for applet in BUSYBOX_APPLETS]
    return gzip.compress(_cpio(entries), compresslevel=6, mtime=0)


def guest_image(name: str, runner: CommandRunner | None = None) -> images.ImageSpec:
    """The kernel-boot image: the kernel and initramfs at KERNEL_PATH and INITRD_PATH
    (KubeVirt copies them out with its container-disk program; nothing in it runs)."""
    root = debian.build_root(GUEST_ROOT, runner)
    kernel = sorted((root / "usr/lib/modules").iterdir())[-1].name
    check_builtin_drivers(root, kernel)
    folder = components.CACHE_ROOT / f"guest-{kernel}-{_recipe_key()}"
    if not (folder / "initrd.img").is_file():
        staging = folder.with_name(folder.name + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        shutil.copy2(root / "boot" / f"vmlinuz-{kernel}", staging / "vmlinuz")
        (staging / "initrd.img").write_bytes(initramfs(root / "usr/bin/busybox"))
        staging.rename(folder)
    return images.ImageSpec(name, files={KERNEL_PATH: folder / "vmlinuz",
                                         INITRD_PATH: folder / "initrd.img"})


def _recipe_key() -> str:
    recipe = hashlib.sha256(Path(__file__).read_bytes())
    recipe.update(GUEST_ROOT.path.name.encode())
    return recipe.hexdigest()[:12]


def image_name() -> str:
    return f"localhost/kdc/guest:{_recipe_key()}"


def guest() -> GuestImage:
    """The guest as the suites boot it: a root shell on the console, no login."""
    return GuestImage(container_disk=None, user="root", password="",
                      kernel_boot=KernelBoot(image_name(), KERNEL_PATH, INITRD_PATH,
                                             KERNEL_ARGS))
