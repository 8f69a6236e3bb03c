"""The cgroup2 lane's host side: what it shares into its throwaway VM and what it tells
the guest, without booting it."""

import logging
from pathlib import Path

import pytest

from core.commands import output, start
from core.errors import SuiteUsageError
from core.timeouts import Timeout
from kubevirtci.local import cgroup2_lane


def _virtfs(argv: list[str]) -> dict[str, str]:
    entries = [argv[i + 1] for i, word in enumerate(argv) if word == "-virtfs"]
    return {dict(o.split("=", 1) for o in e.split(",")[1:])["mount_tag"]: e for e in entries}


def test_only_the_lane_output_is_shared_writable_and_the_disk_stays_as_cached(tmp_path):
    mounts = [("project", tmp_path / "p", False), ("cache", tmp_path / "c", False),
              ("lane", tmp_path / "out", True)]
    argv = cgroup2_lane.qemu_argv(tmp_path / "k", tmp_path / "i", tmp_path / "d", mounts)
    shared = _virtfs(argv)
    assert sorted(shared) == ["cache", "lane", "project"]
    assert [tag for tag, entry in shared.items() if "readonly=on" not in entry] == ["lane"]
    assert "snapshot=on" in argv[argv.index("-drive") + 1]


def test_every_share_is_mounted_at_its_own_path_before_the_guest_command_starts(tmp_path):
    mounts = [("project", Path("/work/x"), False), ("lane", Path("/work/x/_output/l"), True)]
    words = cgroup2_lane.kernel_command_line(mounts).split()
    extra = [w.split("=", 1)[1].split(":") for w in words if w.startswith("systemd.mount-extra=")]
    assert [(tag, where) for tag, where, *_ in extra] == [
        ("project", "/work/x"), ("lane", "/work/x/_output/l")]
    assert all("x-systemd.before=kernel-command-line.service" in opts for *_, opts in extra)
    assert "cgroup_no_v1=all" in words


def test_the_guest_reads_back_the_pytest_arguments_as_given(tmp_path, monkeypatch):
    monkeypatch.setattr(cgroup2_lane, "OUTPUT", tmp_path)
    monkeypatch.setattr(cgroup2_lane, "go_env", lambda name: Path("/go") / name)
    given = ["suites/test_pod_dra.py", "-k", "not slow and 'quoted thing'"]
    cgroup2_lane.write_guest_settings(tmp_path / "venv", given, "v1.8.4")
    script = f'. {tmp_path}/settings.sh; eval "set -- $LANE_PYTEST_ARGS"; printf "%s\\n" "$@"'
    assert output(["sh", "-c", script], Timeout.LOCAL_COMMAND).splitlines() == given
    without = output(["sh", "-c", f". {tmp_path}/settings.sh; echo $KDC_WITHOUT_VMS"],
                     Timeout.LOCAL_COMMAND)
    assert "TCG" in without
    # the guest deploys the KubeVirt the host built for it
    deployed = output(["sh", "-c", f". {tmp_path}/settings.sh; echo $KDC_KUBEVIRT_VERSION"],
                      Timeout.LOCAL_COMMAND)
    assert deployed.strip() == "v1.8.4"


def test_follow_echoes_every_line_the_guest_wrote_before_its_vm_ended(tmp_path, caplog):
    guest_log = tmp_path / "guest.log"
    vm = start(["sh", "-c", f"sleep 0.3; echo one > {guest_log}; sleep 0.3; "
                            f"echo two >> {guest_log}"])
    with caplog.at_level(logging.INFO, logger="kdc.cgroup2-lane"):
        cgroup2_lane.follow(vm, guest_log)
    assert vm.returncode == 0
    assert [r.getMessage() for r in caplog.records] == ["one", "two"]


def test_a_release_the_lane_cannot_build_is_refused_with_a_fix_the_lane_takes():
    with pytest.raises(SuiteUsageError) as refused:
        cgroup2_lane.kubevirt_release("1.9")
    assert "not a release tag" in refused.value.problem
    assert "--kubevirt-source" not in str(refused.value)  # the lane builds no tree
