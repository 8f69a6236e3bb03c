"""Debian roots for KubeVirt's node images and for building what links Debian's
libraries: made by ``mmdebstrap`` from the Debian archive, whose sources it takes as
arguments (the host's apt configuration stays untouched), cached by recipe. A program
that links a library of an image is built inside a root of the same suite, so that it
runs against exactly the libraries the image carries."""

from __future__ import annotations

import hashlib
import json
import logging
import shlex
import shutil
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from core.commands import CommandRunner, Runner, check
from core.errors import SuiteUsageError
from core.timeouts import Timeout
from kubevirtci.local.components import CACHE_ROOT

log = logging.getLogger("kdc.debian")

# libvirt 11.3 and QEMU 10.0: the generation KubeVirt 1.9 is built and tested with.
SUITE = "trixie"
MIRROR = "http://deb.debian.org/debian"
DEBIAN_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True)
class RootRecipe:
    """A Debian root: the packages it holds and the source packages whose build
    dependencies it holds (``apt-get build-dep``)."""

    name: str
    packages: tuple[str, ...]
    build_deps_of: tuple[str, ...] = ()
    variant: str = "essential"  # mmdebstrap's: essential, apt, buildd, ...
    suite: str = SUITE

    @property
    def path(self) -> Path:
        key = hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()
        return CACHE_ROOT / f"debian-{self.suite}-{self.name}-{key[:12]}"


def build_root(recipe: RootRecipe, runner: CommandRunner | None = None) -> Path:
    """The root of ``recipe``, made with mmdebstrap when it is not cached."""
    if recipe.path.is_dir():
        return recipe.path
    runner = runner or Runner()
    staging = recipe.path.with_name(recipe.path.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.parent.mkdir(parents=True, exist_ok=True)  # mmdebstrap wants its parent
    log.info(f"{recipe.suite} root '{recipe.name}': {len(recipe.packages)} "
             "packages from the Debian archive (about a minute)")
    argv = ["mmdebstrap", f"--variant={recipe.variant}", "--include=" + ",".join(recipe.packages)]
    argv += [f'--customize-hook=chroot "$1" apt-get build-dep -y -q {shlex.quote(source)}'
             for source in recipe.build_deps_of]
    argv += [recipe.suite, str(staging), f"deb {MIRROR} {recipe.suite} main",
             f"deb-src {MIRROR} {recipe.suite} main"]
    result = runner.run(argv, Timeout.DEBIAN_ROOT, label=f"debian {recipe.name}")
    if result.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
    check(result, f"check that {MIRROR} serves {recipe.suite} (mmdebstrap reads the archive "
                  "itself, with its own apt configuration) and that `mmdebstrap` is installed")
    staging.rename(recipe.path)
    return recipe.path


def run_in_root(root: Path, script: str, binds: Sequence[Path] = (), env: dict[str, str]
                | None = None, runner: CommandRunner | None = None, label: str = "") -> None:
    """Run the shell ``script`` chrooted into ``root``, in a private mount namespace
    (nothing stays mounted), with each of ``binds`` mounted at its own path."""
    mounts = ['mount -t proc proc "$ROOT/proc"', 'mount --rbind /dev "$ROOT/dev"']
    for path in binds:
        (root / str(path).lstrip("/")).mkdir(parents=True, exist_ok=True)
        mounts.append(f'mount --bind {shlex.quote(str(path))} "$ROOT"{shlex.quote(str(path))}')
    environment = [DEBIAN_PATH, "HOME=/root", "LC_ALL=C.UTF-8",
                   *(f"{k}={v}" for k, v in (env or {}).items())]
    outer = " && ".join([*mounts, 'exec chroot "$ROOT" env -i "$@"'])
    argv = ["unshare", "--mount", "--propagation", "private", "sh", "-c", outer, "sh",
            *environment, "sh", "-ec", script]
    result = (runner or Runner()).run(argv, Timeout.DEBIAN_ROOT, env={"ROOT": str(root)},
                                      label=label)
    check(result, f"see the output above; the root is {root} (remove it to rebuild)")


def installed_source(root: Path, package: str) -> tuple[str, str]:
    """(source package, source version) of the binary ``package`` installed in ``root``,
    from dpkg's status file (``Source: name (version)`` when they differ, as after a
    binary-only rebuild)."""
    for stanza in (root / "var/lib/dpkg/status").read_text().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in stanza.splitlines() if ": " in line)
        if fields.get("Package") == package and "installed" in fields.get("Status", ""):
            name, _, version = fields.get("Source", package).partition(" (")
            return name, version.rstrip(")") or fields["Version"]
    raise SuiteUsageError(f"{package} is not installed in {root}",
                          f"remove {root} so that it is built again")


def fetch_source(root: Path, package: str, version: str, work: Path,
                 runner: CommandRunner | None = None) -> Path:
    """Debian's source of ``package`` at ``version``, unpacked with Debian's
    patches applied, in ``work/<package>`` (the same path inside the root). Each
    file is checked against the checksum of the signed Sources index: the archive here
    does not always serve the ``.dsc`` that ``dpkg-source -x`` would check instead."""
    shutil.rmtree(work / package, ignore_errors=True)
    work.mkdir(parents=True, exist_ok=True)
    script = f"""
cd {shlex.quote(str(work))}
apt-get update -qq
apt-get source -q --download-only {shlex.quote(f"{package}={version}")} || true
showsrc="apt-cache showsrc --only-source {shlex.quote(package)}"
version={shlex.quote(version)}
upstream=${{version#*:}}; upstream=${{upstream%-*}}
$showsrc | awk -v v="$version" '/^Version: /{{keep=($2==v)}} /^Checksums-Sha256:/{{on=keep;next}}
  /^[^ ]/{{on=0}} on{{print $1"  "$3}}' > {shlex.quote(package)}.sha256
sha256sum -c --ignore-missing {shlex.quote(package)}.sha256
mkdir {shlex.quote(package)}
tarball() {{ ls {shlex.quote(package)}_"$1".tar.* | grep -v '[.]asc$'; }}
tar -xf "$(tarball "$upstream".orig)" -C {shlex.quote(package)} --strip-components=1
tar -xf "$(tarball "${{version#*:}}".debian)" -C {shlex.quote(package)}
cd {shlex.quote(package)} && dpkg-source --before-build . >/dev/null
"""
    run_in_root(root, script, binds=[work], runner=runner, label=f"source {package}")
    if not (work / package / "debian").is_dir():
        raise SuiteUsageError(f"Debian's source of {package} did not unpack in {work}",
                              "see the output above")
    return work / package


def vm_image(root: Path, label: str, size: str) -> tuple[Path, Path, Path]:
    """(kernel, initrd, disk) of a VM booting ``root``: its Debian kernel and initrd, and
    an ext4 disk labelled ``label`` made from the root folder (``size``, sparse), made once
    per root and cached beside it."""
    cached = CACHE_ROOT / f"{root.name}-vm"
    kernel, initrd, disk = cached / "vmlinuz", cached / "initrd.img", cached / "disk.raw"
    if disk.is_file():
        return kernel, initrd, disk
    staging = cached.with_name(cached.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    shutil.copy(next((root / "boot").glob("vmlinuz-*")), staging / "vmlinuz")
    shutil.copy(next((root / "boot").glob("initrd.img-*")), staging / "initrd.img")
    log.info(f"the VM's disk from {root} (ext4, {size} sparse)")
    check(Runner().run(["mke2fs", "-q", "-t", "ext4", "-L", label, "-d", root,
                        staging / "disk.raw", size], Timeout.DEBIAN_ROOT, label="mke2fs"),
          "mke2fs (e2fsprogs) makes the disk from the root folder")
    staging.rename(cached)
    return kernel, initrd, disk
