"""PID 1 of a hermetic node, as a kind node container's init: it builds the node's root
filesystem and then only reaps orphans until it is told to stop.

It is started in the node's network namespace (``nsenter --net=...``); it joins the
node's cgroup (``kdc/<node>`` in every hierarchy), makes new mount, UTS, IPC, PID and
cgroup namespaces and forks the node's PID 1, whose cgroups are rooted at the node's own
(as a kind node's with ``--cgroupns=private``), so that the node's pods are the node's
and go away with it. The node's
root is an overlay of the host's root filesystem (the programs) with a writable layer of
its own, so ``/etc``, ``/var/lib`` and ``/usr/local/bin`` are the node's. On top: its own
``/proc`` (its PID namespace), ``/sys`` (its network namespace), ``/run``, ``/tmp`` and
``/dev`` (no ``/dev/kvm``: the host's KVM cannot boot a stock kernel). The EMULATED
kernel's view of the node's NVMe controllers comes from the node's emulation folder,
where the emulator keeps it live: ``/sys/bus/pci``, ``/sys/devices/pci0000:00``,
``/sys/kernel/iommu_groups`` and ``/sys/block`` are the emulation's; ``/sys/class``,
``/sys/devices/virtual`` and ``/sys/dev/{block,char}`` are the emulation's folders (nvme,
block, vfio classes, nvme subsystems, vfio groups, device numbers) with each of the
kernel's own entries added; ``/dev``
is the emulation's (its nvme, ng, vfio nodes and disk links) with the host's devices
added; and each function's state (``/var/lib/kdc-emulated-pci``) is there too.
``/var/lib/containerd`` is a plain folder, because containerd's overlay snapshotter
cannot work on an overlay.

Standalone on purpose (standard library only): it runs before the node has a root.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import socket
import stat
import sys
from pathlib import Path

# Device nodes a node gets from the host (a container runtime's default set, plus what
# the kubelet and KubeVirt's launcher use). Never kvm.
HOST_DEVICES = ("null", "zero", "full", "random", "urandom", "tty", "kmsg", "fuse",
                "net/tun", "vhost-net", "loop-control")
EMULATED_SYSFS = ("bus/pci", "devices/pci0000:00", "kernel/iommu_groups", "block")
# Folders partly the kernel's, partly EMULATED: the emulation's, with the kernel's
# entries (those the emulation does not have) bound into them.
MERGED_SYSFS = ("class", "devices/virtual", "dev/block", "dev/char")
EMULATED_DEVICE_STATE = "/var/lib/kdc-emulated-pci"  # sysfs.DeviceStateRoot (driver/emulation)
CGROUP_ROOT = Path("/sys/fs/cgroup")
MOUNTINFO = Path("/proc/self/mountinfo")
CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWPID, CLONE_NEWCGROUP = 0x20000000, 0x02000000
# mount(2) and umount2(2) flags (linux/mount.h), and the options mount(8) turns into them
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 0x1, 0x2, 0x4, 0x8
MS_NOATIME, MS_NODIRATIME, MS_BIND, MS_REC = 0x400, 0x800, 0x1000, 0x4000
MS_PRIVATE, MS_SHARED, MS_RELATIME, MS_STRICTATIME = 0x40000, 0x100000, 0x200000, 0x1000000
MS_REMOUNT = 0x20
MNT_DETACH = 0x2
MOUNT_FLAG_OPTIONS = {"ro": MS_RDONLY, "rw": 0, "nosuid": MS_NOSUID, "nodev": MS_NODEV,
                      "noexec": MS_NOEXEC, "noatime": MS_NOATIME,
                      "nodiratime": MS_NODIRATIME, "relatime": MS_RELATIME,
                      "strictatime": MS_STRICTATIME}
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}  # glibc has no wrapper for pivot_root(2)
LIBC = ctypes.CDLL(None, use_errno=True)
LIBC.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong,
                       ctypes.c_char_p]


def cgroup_hierarchies() -> list[tuple[Path, str, str]]:
    """(mount point, filesystem, super options) of every cgroup hierarchy of the host."""
    out = []
    for line in MOUNTINFO.read_text().splitlines():
        fields, _, tail = line.partition(" - ")
        fstype, _, options = tail.split(" ", 2)
        mount_point = Path(fields.split()[4])
        if fstype in ("cgroup", "cgroup2") and mount_point.is_relative_to(CGROUP_ROOT):
            out.append((mount_point, fstype, options))
    return out


def unified_only() -> bool:
    """The host has the unified cgroup v2 hierarchy only (no v1 controllers)."""
    return any(mp == CGROUP_ROOT for mp, _, _ in cgroup_hierarchies())


def cgroup_mode() -> str:
    """The host's cgroup mode, as a run's header names it."""
    kinds = {fstype for _, fstype, _ in cgroup_hierarchies()}
    if unified_only():
        return "v2 (unified hierarchy only)"
    if kinds == {"cgroup", "cgroup2"}:
        return "v1 hybrid (v1 controllers, an empty unified hierarchy beside them)"
    return "v1 (legacy)" if "cgroup" in kinds else "none mounted"


def make_cgroup(mount_point: Path, fstype: str, relative: str) -> Path:
    path = mount_point
    for part in Path(relative).parts:
        parent, path = path, path / part
        path.mkdir(exist_ok=True)
        for name in ("cpuset.cpus", "cpuset.mems"):  # v1 cpuset: empty until copied
            own = path / name
            if fstype == "cgroup" and own.exists() and not own.read_text().strip():
                own.write_text((parent / name).read_text())
    return path


def join_cgroup(relative: str, leaving: str | None = None) -> None:
    """Move this process into ``relative`` in every hierarchy. On v2, moving down out of
    ``leaving`` (the node's cgroup, into its ``init`` leaf) then hands every controller
    of ``leaving`` to the cgroups below it, for the node's pods: the kernel allows that
    only once it holds no process (v2's "no internal processes" rule)."""
    for mount_point, fstype, _ in cgroup_hierarchies():
        path = make_cgroup(mount_point, fstype, relative)
        (path / "cgroup.procs").write_text(str(os.getpid()))
        if fstype == "cgroup2" and leaving is not None:
            left = mount_point / leaving
            wanted = (left / "cgroup.controllers").read_text().split()
            if wanted:  # none in a v1 host's unified hierarchy
                (left / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in wanted))


def remove_cgroup(relative: str) -> list[str]:
    """Remove a stopped node's cgroups, deepest first; returns what was removed."""
    removed = []
    for mount_point, _, _ in cgroup_hierarchies():
        top = mount_point / relative
        if not top.is_dir():
            continue
        below = sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: len(p.parts))
        for path in [*reversed(below), top]:
            try:
                path.rmdir()
                removed.append(str(path))
            except OSError:
                pass
    return removed


def unshare_and_fork(cgroup: str) -> int | None:
    """In the parent: wait for the node's PID 1 and return its exit status. In the child
    (PID 1 of the new namespaces): return None."""
    join_cgroup(cgroup)
    flags = CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWPID | CLONE_NEWCGROUP
    if LIBC.unshare(flags) != 0:
        raise SystemExit(f"node init: unshare: {os.strerror(ctypes.get_errno())}")
    # The namespace's root is the node's cgroup; its processes live in a leaf of it, as
    # cgroup v2 wants (no processes where pods' cgroups branch off).
    join_cgroup(f"{cgroup}/init", leaving=cgroup)
    child = os.fork()
    if child == 0:
        return None
    signal.signal(signal.SIGTERM, lambda *_: os.kill(child, signal.SIGTERM))
    _, status = os.waitpid(child, 0)
    return os.waitstatus_to_exitcode(status)


def mount(target: Path | str, fstype: str | None = None, source: str | Path | None = None,
          options: str = "", flags: int = 0) -> None:
    """mount(2), as mount(8) calls it: ``options`` that are mount flags become flags,
    the rest is the file system's own data."""
    words = [o for o in options.split(",") if o]
    flags |= sum(MOUNT_FLAG_OPTIONS.get(o, 0) for o in words)
    data = ",".join(o for o in words if o not in MOUNT_FLAG_OPTIONS)
    if LIBC.mount(_c(source if source is not None else fstype), _c(target), _c(fstype),
                  flags, _c(data or None)) != 0:
        what = " ".join(str(word) for word in (fstype, source) if word)
        raise SystemExit(f"node init: mount {what} on {target} ({options or hex(flags)}): "
                         f"{os.strerror(ctypes.get_errno())}")


def _c(value: str | Path | None) -> bytes | None:
    return None if value is None else os.fsencode(value)


def bind(source: Path, target: Path, recursive: bool = False) -> None:
    if source.is_dir():
        target.mkdir(parents=True, exist_ok=True)
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.touch(exist_ok=True)
    mount(target, source=source, flags=MS_BIND | (MS_REC if recursive else 0))


def build_dev(dev: Path, emulation: Path) -> None:
    """The emulation's /dev (its nodes come and go with the drivers bound), with the
    host's devices and the usual mounts and links added (kept from a previous boot)."""
    bind(emulation / "dev", dev)
    mount(dev, flags=MS_REMOUNT | MS_BIND | MS_NOSUID)
    for name in HOST_DEVICES:
        host, target = Path("/dev") / name, dev / name
        if not host.exists() or target.exists():
            continue
        info = host.stat()
        target.parent.mkdir(parents=True, exist_ok=True)
        os.mknod(target, stat.S_IFCHR | stat.S_IMODE(info.st_mode), info.st_rdev)
    (dev / "pts").mkdir(exist_ok=True)
    mount(dev / "pts", "devpts", options="newinstance,ptmxmode=0666,mode=620,gid=5")
    links = {"ptmx": "pts/ptmx", "fd": "/proc/self/fd", "stdin": "/proc/self/fd/0",
             "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2"}
    for name, target in links.items():
        if not (dev / name).is_symlink():
            os.symlink(target, dev / name)
    for name, fs in (("shm", "tmpfs"), ("mqueue", "mqueue")):
        (dev / name).mkdir(exist_ok=True)
        mount(dev / name, fs, options="nosuid,nodev")


def merge_sysfs(kernel: Path, emulated: Path) -> None:
    """Show ``emulated`` at ``kernel``, with each entry of the kernel's folder that the
    emulation lacks added: a folder bound into it (in this mount namespace only: the
    emulator's view of its folder is untouched), a link copied. The entries added are
    listed beside, so that a later boot tells them from the emulation's own (an empty
    folder may be either)."""
    emulated.mkdir(parents=True, exist_ok=True)
    listed = emulated.with_name(emulated.name + ".kernel-entries")
    added = set(listed.read_text().split()) if listed.exists() else set()
    for entry in sorted(kernel.iterdir()):
        own = emulated / entry.name
        if entry.name not in added and (own.exists() or own.is_symlink()):
            continue  # the emulation's own
        added.add(entry.name)
        if entry.is_symlink():
            if own.is_symlink():
                own.unlink()
            os.symlink(os.readlink(entry), own)
        else:
            bind(entry, own)
    listed.write_text("".join(f"{name}\n" for name in sorted(added)))
    bind(emulated, kernel, recursive=True)


def build_root(node_dir: Path, emulation: Path) -> Path:
    """The node's root filesystem under ``node_dir/rootfs``, ready to pivot into."""
    mount("/", flags=MS_REC | MS_PRIVATE)
    root = node_dir / "rootfs"
    layer, work = node_dir / "layer", node_dir / "layer-work"
    for path in (root, layer, work):
        path.mkdir(parents=True, exist_ok=True)
    mount(root, "overlay", options=f"lowerdir=/,upperdir={layer},workdir={work}")
    mount(root / "proc", "proc")
    mount(root / "sys", "sysfs")
    mount_cgroups(root)
    for part in EMULATED_SYSFS:
        (emulation / "sys" / part).mkdir(parents=True, exist_ok=True)
        bind(emulation / "sys" / part, root / "sys" / part)
    for part in MERGED_SYSFS:
        merge_sysfs(root / "sys" / part, emulation / "sys" / part)
    build_dev(root / "dev", emulation)
    # Each function's own state (identity, media), which nri-emulated-pci shows the
    # containers holding its VFIO group.
    bind(emulation / "devices", root / EMULATED_DEVICE_STATE.lstrip("/"))
    for tmp in ("run", "tmp"):
        mount(root / tmp, "tmpfs", options="mode=755" if tmp == "run" else "mode=1777")
    bind(node_dir / "containerd", root / "var/lib/containerd")
    return root


def mount_cgroups(root: Path) -> None:
    """The host's hierarchies mounted afresh in the node's cgroup namespace: each shows
    the node's cgroup as its root (cgroup v1 and v2 alike)."""
    hierarchies = cgroup_hierarchies()
    target = root / "sys/fs/cgroup"
    if unified_only():
        mount(target, "cgroup2", options="nosuid,nodev,noexec")
        return
    mount(target, "tmpfs", options="mode=755,nosuid,nodev,noexec")
    for mount_point, fstype, options in hierarchies:
        super_options = [o for o in options.split(",") if o not in ("rw", "ro")]
        where = target / mount_point.relative_to(CGROUP_ROOT)
        where.mkdir(parents=True, exist_ok=True)
        opts = ",".join(["nosuid", "nodev", "noexec", *super_options])
        mount(where, fstype, options=opts)


def pivot(root: Path) -> None:
    old = root / ".host"
    old.mkdir(exist_ok=True)
    os.chdir(root)
    if LIBC.syscall(SYS_PIVOT_ROOT[os.uname().machine], b".", b".host") != 0:
        raise SystemExit(f"node init: pivot_root: {os.strerror(ctypes.get_errno())}")
    os.chroot(".")
    os.chdir("/")
    if LIBC.umount2(b"/.host", MNT_DETACH) != 0:
        raise SystemExit(f"node init: umount /.host: {os.strerror(ctypes.get_errno())}")
    os.rmdir("/.host")
    # Shared, as systemd makes it on a real host: the kubelet's mount propagation needs it.
    mount("/", flags=MS_REC | MS_SHARED)


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
    parser.add_argument("--cgroup", required=True, help="the node's cgroup, e.g. kdc/node01")
    args = parser.parse_args()
    status = unshare_and_fork(args.cgroup)
    if status is not None:
        return status
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
