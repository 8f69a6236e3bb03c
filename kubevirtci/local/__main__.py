"""``kdc-cluster``: the hermetic cluster by hand (also ``tox -e cluster -- ...``)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from core.commands import CommandFailed
from core.errors import SuiteUsageError
from core.log import log_to_stderr
from kubevirtci.local.cluster import DEFAULT_NVME, LocalCluster
from kubevirtci.local.known_images import DRIVER_IMAGE, KNOWN_IMAGES, build_known_archive


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="kdc-cluster", description=__doc__)
    sub = top.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="build (cached) and start the cluster, or reuse it")
    up.add_argument("--nodes", type=int, default=2, help="kubevirtci runs two")
    up.add_argument("--nvme", action="append", help="emulated controller size (repeat)")
    up.add_argument("--numa-nodes", type=int, default=None,
                    help="make each node a NUMA machine of this many NUMA nodes (default: "
                         "none, as QEMU's machines)")
    down = sub.add_parser("down", help="stop the cluster")
    down.add_argument("--force", action="store_true", help="also remove the state folder")
    sub.add_parser("status", help="nodes, processes and kubeconfig")
    sub.add_parser("kubeconfig", help="print the admin kubeconfig's path")
    load = sub.add_parser("load-image", help="import an image archive into every node")
    load.add_argument("archive", type=Path, help="OCI or `docker save` tarball")
    logs = sub.add_parser("logs", help="last lines of a component's log")
    logs.add_argument("component", nargs="?")
    logs.add_argument("-n", "--lines", type=int, default=40)
    image = sub.add_parser("image", help="build an image this project builds (the driver, "
                           "the sanity client, the suite) as an OCI archive")
    image.add_argument("--out", required=True, type=Path)
    image.add_argument("--name", default=DRIVER_IMAGE, choices=sorted(KNOWN_IMAGES))
    return top


def run(args: argparse.Namespace) -> None:
    if args.command == "up":
        cluster = LocalCluster(nodes=args.nodes, nvme=tuple(args.nvme or DEFAULT_NVME),
                               numa_nodes=args.numa_nodes)
        print(cluster.up())
        return
    cluster = LocalCluster()
    if args.command == "down":
        for item in cluster.down(force=args.force):
            print(f"cleaned {item}")
    elif args.command == "status":
        print(json.dumps(cluster.status(), indent=1))
    elif args.command == "kubeconfig":
        print(cluster.layout.admin_kubeconfig)
    elif args.command == "load-image":
        nodes = cluster.load_image_archive(args.archive)
        print(f"imported {args.archive} into {', '.join(nodes)}" if nodes
              else f"{args.archive}: every node has its images already")
    elif args.command == "image":
        print(build_known_archive(args.name, args.out))
    else:
        names = [args.component] if args.component else cluster.supervisor.names()
        for name in names:
            print(f"==> {cluster.supervisor.log_file(name)} <==")
            print(cluster.supervisor.tail(name, args.lines))


def main(argv: list[str] | None = None) -> int:
    log_to_stderr()
    args = parser().parse_args(argv)
    try:
        run(args)
    except (SuiteUsageError, CommandFailed, RuntimeError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
