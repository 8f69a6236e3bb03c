"""A node's service is moved into the node's cgroup before it enters the node's
namespaces: checked with real cgroups (root only), on whatever cgroup mode this host runs."""

import os
import sys
import uuid

import pytest

from core.commands import QUIET, check
from core.timeouts import Timeout
from kubevirtci.local.node_init import cgroup_hierarchies, remove_cgroup
from kubevirtci.local.nodes import NODE_SERVICE

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="moving a process needs root")


def test_the_command_runs_in_the_named_cgroup_in_every_hierarchy():
    relative = f"kdc-selftest-{uuid.uuid4().hex[:8]}/services/containerd"
    try:
        out = check(QUIET.run([sys.executable, str(NODE_SERVICE), f"--cgroup={relative}",
                               "--", "cat", "/proc/self/cgroup"], Timeout.NODE_COMMAND)).stdout
    finally:
        removed = remove_cgroup(relative.split("/")[0])
    paths = [line.split(":", 2)[2] for line in out.splitlines()]
    hierarchies = cgroup_hierarchies()
    assert hierarchies, "this host mounts no cgroup hierarchy"
    # One line per hierarchy (v1 controllers may share one), each in the cgroup asked for.
    assert paths and all(p == f"/{relative}" for p in paths), out
    assert len(removed) >= len(hierarchies) * 3  # the whole tree went with the test


def test_a_missing_command_is_refused_before_any_cgroup_is_touched():
    done = QUIET.run([sys.executable, str(NODE_SERVICE), "--cgroup=kdc-never"],
                     Timeout.NODE_COMMAND)
    assert done.returncode == 2 and "no command given" in done.stderr
    assert not any((mp / "kdc-never").exists() for mp, _, _ in cgroup_hierarchies())
