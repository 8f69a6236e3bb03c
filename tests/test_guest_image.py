"""The hermetic guest: a kernel and a busybox initramfs for KubeVirt's kernel boot."""

import dataclasses
import gzip

import pytest

from core.errors import SuiteUsageError
from core.profile import load as load_profile
from fixtures.vms import guest_vmi
from kubevirtci.local import guest
from kubevirtci.local.provider import LocalProvider


def _cpio_members(archive: bytes) -> dict[str, tuple[int, bytes]]:
    members, offset = {}, 0
    while True:
        header = archive[offset:offset + 110]
        assert header[:6] == b"070701"
        fields = [int(header[6 + 8 * i:14 + 8 * i], 16) for i in range(13)]
        mode, size, name_size = fields[1], fields[6], fields[11]
        name_end = offset + 110 + name_size
        name = archive[offset + 110:name_end - 1].decode()
        data_start = name_end + (-name_end % 4)
        if name == "TRAILER!!!":
            return members
        members[name] = (mode, archive[data_start:data_start + size])
        offset = data_start + size + (-(data_start + size) % 4)


def test_the_initramfs_runs_a_shell_on_the_console_with_busybox(tmp_path):
    busybox = tmp_path / "busybox"
    busybox.write_bytes(b"\x7fELF busybox")
    members = _cpio_members(gzip.decompress(guest.initramfs(busybox)))
    assert members["init"][0] == 0o100755 and b"cttyhack sh" in members["init"][1]
    assert members["bin/busybox"][1] == b"\x7fELF busybox"
    assert members["bin/dd"] == (0o120777, b"busybox")
    assert members["bin/sudo"][1] == guest.SUDO  # the suites' sudo, in a root-only guest
    assert {"proc", "sys", "dev"} <= set(members)


def test_a_kernel_without_the_nvme_driver_built_in_is_refused(tmp_path):
    modules = tmp_path / "usr/lib/modules/6.12-generic"
    modules.mkdir(parents=True)
    (modules / "modules.builtin").write_text("kernel/drivers/tty/serial/8250/8250.ko\n")
    with pytest.raises(SuiteUsageError, match="nvme"):
        guest.check_builtin_drivers(tmp_path, "6.12-generic")


def test_the_local_provider_boots_its_own_guest_through_kernel_boot(tmp_path):
    own = LocalProvider(tmp_path).guest()
    assert own is not None and own.kernel_boot is not None
    assert own.kernel_boot.image == guest.image_name()
    profile = dataclasses.replace(load_profile("reference-nvme"), guest=own)
    vmi = guest_vmi("vm", profile)
    boot = vmi["spec"]["domain"]["firmware"]["kernelBoot"]
    assert boot["container"]["image"] == own.kernel_boot.image
    assert boot["kernelArgs"].startswith("console=ttyS0")
    assert vmi["spec"]["volumes"] == []  # no disk, no cloud-init: a root shell on ttyS0
