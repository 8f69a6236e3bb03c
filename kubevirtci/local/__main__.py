"""``python -m kubevirtci.local up|down|status|logs``: the hermetic cluster by hand."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from fixtures.errors import SuiteUsageError
from kubevirtci.local.cluster import LocalCluster, build_driver_archive
from kubevirtci.runner import CommandFailed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kubevirtci.local")
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="build (cached) and start the cluster, or reuse it")
    up.add_argument("--nodes", type=int, default=2, help="kubevirtci runs two")
    up.add_argument("--nvme", action="append", help="emulated controller size (repeat)")
    down = sub.add_parser("down", help="stop the cluster")
    down.add_argument("--force", action="store_true",
                      help="also sweep a crashed run: containers, mounts, bridges, state")
    sub.add_parser("status", help="processes and kubeconfig")
    logs = sub.add_parser("logs", help="last lines of a component's log")
    logs.add_argument("component", nargs="?")
    logs.add_argument("-n", "--lines", type=int, default=40)
    image = sub.add_parser("driver-image", help="build the driver image as an OCI archive")
    image.add_argument("--out", required=True)
    image.add_argument("--name", default="localhost/kdc/nvme-dra-driver:dev")
    args = parser.parse_args(argv)

    try:
        if args.command == "up":
            cluster = LocalCluster(nodes=args.nodes, nvme=tuple(args.nvme or ("1G", "1G")))
            print(cluster.up())
        elif args.command == "down":
            for item in LocalCluster().down(force=args.force):
                print(f"cleaned {item}")
        elif args.command == "driver-image":
            print(build_driver_archive(args.name, Path(args.out)))
        elif args.command == "status":
            print(json.dumps(LocalCluster().status(), indent=1))
        else:
            cluster = LocalCluster()
            names = [args.component] if args.component else cluster.supervisor.names()
            for name in names:
                print(f"==> {cluster.supervisor.log_file(name)} <==")
                print(cluster.supervisor.tail(name, args.lines))
    except (SuiteUsageError, CommandFailed, RuntimeError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
