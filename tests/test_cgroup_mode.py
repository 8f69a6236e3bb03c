"""The host's cgroup mode read from its mount table: every mode the node setup branches
on, and the label a run's header gives it."""
from pathlib import Path

import pytest

from kubevirtci.local import node_init

ROOT_TMPFS = "25 24 0:22 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755"
UNIFIED_BESIDE = ("26 25 0:23 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec shared:10 - "
                  "cgroup2 cgroup2 rw,nsdelegate")
MEMORY_V1 = ("30 25 0:27 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec shared:14 - "
             "cgroup cgroup rw,memory")
UNIFIED_ROOT = ("35 24 0:30 / /sys/fs/cgroup rw,nosuid,nodev,noexec shared:9 - "
                "cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot")
PROC = "22 1 0:5 / /proc rw,nosuid,nodev,noexec shared:12 - proc proc rw"


@pytest.fixture
def mount_table(tmp_path: Path, monkeypatch):
    """Makes the node init read these mountinfo lines as the host's mount table."""
    def given(lines: list[str]) -> None:
        mountinfo = tmp_path / "mountinfo"
        mountinfo.write_text("\n".join(lines) + "\n")
        monkeypatch.setattr(node_init, "MOUNTINFO", mountinfo)
    return given


@pytest.mark.parametrize(("lines", "unified", "mode"), [
    ([PROC, UNIFIED_ROOT], True, "v2 (unified hierarchy only)"),
    ([PROC, ROOT_TMPFS, UNIFIED_BESIDE, MEMORY_V1], False, "v1 hybrid"),
    ([PROC, ROOT_TMPFS, MEMORY_V1], False, "v1 (legacy)"),
    ([PROC], False, "none mounted"),
], ids=["v2", "hybrid", "legacy", "none"])
def test_the_mode_follows_the_hierarchies_mounted(mount_table, lines, unified, mode):
    mount_table(lines)
    assert node_init.unified_only() is unified
    assert node_init.cgroup_mode().startswith(mode)


def test_only_cgroup_hierarchies_under_the_cgroup_root_are_listed(mount_table):
    elsewhere = "40 24 0:31 / /run/other rw - cgroup2 cgroup2 rw"
    mount_table([PROC, ROOT_TMPFS, UNIFIED_BESIDE, MEMORY_V1, elsewhere])
    assert node_init.cgroup_hierarchies() == [
        (Path("/sys/fs/cgroup/unified"), "cgroup2", "rw,nsdelegate"),
        (Path("/sys/fs/cgroup/memory"), "cgroup", "rw,memory")]
