"""PID 1 of a hermetic node, as a kind node container's init: it builds the node's root
filesystem and then only reaps orphans until it is told to stop.

It is started in the node's network namespace and in new mount, UTS, IPC and PID
namespaces (``nsenter --net=... unshare --mount --uts --ipc --pid --fork``). The node's
root is an overlay of the host's root filesystem (the programs) with a writable layer of
its own, so ``/etc``, ``/var/lib`` and ``/usr/local/bin`` are the node's. On top: its own
``/proc`` (its PID namespace), ``/sys`` (its network namespace), ``/run``, ``/tmp`` and
``/dev`` (no ``/dev/kvm``: the host's KVM cannot boot a stock kernel). The EMULATED PCI
tree (``/sys/bus/pci``, ``/sys/devices/pci0000:00``, ``/sys/kernel/iommu_groups``) and
``/dev/vfio`` come from the node's emulation folder; ``/var/lib/containerd`` is a plain
folder, because containerd's overlay snapshotter cannot work on an overlay.

Standalone on purpose (standard library only): it runs before the node has a root.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import stat
import subprocess
import sys
from pathlib import Path

# Device nodes a node gets from the host (a container runtime's default set, plus what
# the kubelet and KubeVirt's launcher use). Never kvm.
HOST_DEVICES = ("null", "zero", "full", "random", "urandom", "tty", "kmsg", "fuse",
                "net/tun", "vhost-net", "loop-control")
EMULATED_SYSFS = ("bus/pci", "devices/pci0000:00", "kernel/iommu_groups")


def mount(*args: str) -> None:
    result = subprocess.run(["mount", *args], capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"node init: mount {' '.join(args)}: {result.stderr.strip()}")


def bind(source: Path, target: Path, recursive: bool = False) -> None:
    if source.is_dir():
        target.mkdir(parents=True, exist_ok=True)
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.touch(exist_ok=True)
    mount("--rbind" if recursive else "--bind", str(source), str(target))


def build_dev(dev: Path, emulation: Path) -> None:
    mount("-t", "tmpfs", "-o", "mode=755,nosuid", "tmpfs", str(dev))
    for name in HOST_DEVICES:
        host = Path("/dev") / name
        if not host.exists():
            continue
        info = host.stat()
        target = dev / name
        target.parent.mkdir(parents=True, exist_ok=True)
        os.mknod(target, stat.S_IFCHR | stat.S_IMODE(info.st_mode), info.st_rdev)
    (dev / "pts").mkdir()
    mount("-t", "devpts", "-o", "newinstance,ptmxmode=0666,mode=620,gid=5", "devpts",
          str(dev / "pts"))
    os.symlink("pts/ptmx", dev / "ptmx")
    for name, fs in (("shm", "tmpfs"), ("mqueue", "mqueue")):
        (dev / name).mkdir()
        mount("-t", fs, "-o", "nosuid,nodev", fs, str(dev / name))
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
                         ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2")):
        os.symlink(target, dev / name)
    bind(emulation / "dev" / "vfio", dev / "vfio")


def build_root(node_dir: Path, emulation: Path) -> Path:
    """The node's root filesystem under ``node_dir/rootfs``, ready to pivot into."""
    mount("--make-rprivate", "/")
    root = node_dir / "rootfs"
    layer, work = node_dir / "layer", node_dir / "layer-work"
    for path in (root, layer, work):
        path.mkdir(parents=True, exist_ok=True)
    mount("-t", "overlay", "-o", f"lowerdir=/,upperdir={layer},workdir={work}", "overlay",
          str(root))
    mount("-t", "proc", "proc", str(root / "proc"))
    mount("-t", "sysfs", "sysfs", str(root / "sys"))
    # cgroups stay the host's hierarchy: the kubelet and runc manage them as on any host.
    mount("--rbind", "/sys/fs/cgroup", str(root / "sys/fs/cgroup"))
    for part in EMULATED_SYSFS:
        bind(emulation / "sys" / part, root / "sys" / part)
    build_dev(root / "dev", emulation)
    for tmp in ("run", "tmp"):
        mount("-t", "tmpfs", "-o", "mode=755" if tmp == "run" else "mode=1777", "tmpfs",
              str(root / tmp))
    bind(node_dir / "containerd", root / "var/lib/containerd")
    return root


def pivot(root: Path) -> None:
    old = root / ".host"
    old.mkdir(exist_ok=True)
    os.chdir(root)
    result = subprocess.run(["pivot_root", ".", ".host"], capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"node init: pivot_root: {result.stderr.strip()}")
    os.chroot(".")
    os.chdir("/")
    subprocess.run(["umount", "-l", "/.host"], check=True)
    os.rmdir("/.host")
    # Shared, as systemd makes it on a real host: the kubelet's mount propagation needs it.
    mount("--make-rshared", "/")


def reap_forever() -> None:
    """PID 1's duty: reap orphans (container shims end up here). SIGTERM ends the node:
    when PID 1 exits, the kernel kills every process of the namespace."""
    watched = {signal.SIGCHLD, signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, watched)
    while True:
        info = signal.sigwaitinfo(watched)
        if info.si_signo != signal.SIGCHLD:
            return
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break


def main() -> int:
    parser = argparse.ArgumentParser(prog="node_init")
    parser.add_argument("--name", required=True)
    parser.add_argument("--node-dir", type=Path, required=True)
    parser.add_argument("--emulation", type=Path, required=True)
    args = parser.parse_args()
    if os.getpid() != 1:
        print("node init: must be PID 1 of a new PID namespace", file=sys.stderr)
        return 2
    socket.sethostname(args.name)
    host_dir = os.open(args.node_dir, os.O_DIRECTORY)
    pivot(build_root(args.node_dir, args.emulation))
    # Announce readiness on the host side only now: entering the node lands in its root.
    ready = os.open("ready", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644, dir_fd=host_dir)
    os.close(ready)
    os.close(host_dir)
    print(f"node {args.name}: root ready", flush=True)
    reap_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
