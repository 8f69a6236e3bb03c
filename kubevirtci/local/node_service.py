"""Start one of a hermetic node's services (containerd, the kubelet, ...) inside the
node's cgroup, then exec the command that enters the node's namespaces.

The move happens here, on the host, before the cgroup namespace is entered: on cgroup v2
(mounted ``nsdelegate``, as systemd does) the kernel refuses with ENOENT to move a
process whose cgroup lies outside the mover's cgroup namespace, so a service left in the
host's cgroup could never put its containers into theirs (runc would fail writing
``cgroup.procs``). On v1 it makes the node's services the node's, as a kind node's are.

    node_service.py --cgroup kdc/node01/services/containerd -- nsenter -t PID ... -- CMD

Standalone on purpose (standard library and ``node_init`` only), as ``node_init`` is.
"""

from __future__ import annotations

import argparse
import os

from node_init import join_cgroup


def main() -> None:
    parser = argparse.ArgumentParser(prog="node_service")
    parser.add_argument("--cgroup", required=True,
                        help="the service's cgroup, e.g. kdc/node01/services/kubelet")
    parser.add_argument("argv", nargs=argparse.REMAINDER, help="-- the command to exec")
    args = parser.parse_args()
    argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    if not argv:
        parser.error("no command given after --")
    join_cgroup(args.cgroup)
    os.execvp(argv[0], argv)


if __name__ == "__main__":
    main()
