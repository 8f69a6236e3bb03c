"""KubeVirt's node-side images, virt-handler and virt-launcher, assembled as its own
image definitions assemble them (``cmd/virt-handler`` and ``cmd/virt-launcher``
BUILD.bazel; the package sets ``handlerbase`` and ``launcherbase`` of
``hack/rpm-deps.sh``), on Debian trixie roots instead of CentOS Stream ones: libvirt
11.3 and QEMU 10.0, KubeVirt 1.9's generation.

Two programs are built here against the libraries of the launcher image, inside a
trixie build root: virt-launcher (cgo: libvirt and libnbd, whose Go binding comes from
Debian's libnbd source because the module proxy refuses KubeVirt's pin) and libvirt's
``virtqemud``, which KubeVirt starts by its path and which Debian builds but does not
install: it is built from Debian's unchanged libvirt source with Debian's own
configuration, at exactly the version of the image's libvirt."""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shlex
import shutil
import struct
from collections.abc import Callable
from pathlib import Path

from core.commands import QUIET, CommandRunner, check, output
from core.errors import SuiteUsageError
from core.timeouts import Timeout
from kubevirtci.local import components, debian, images, kubevirt_module
from kubevirtci.local.debian import RootRecipe
from kubevirtci.local.kubevirt_module import BuildModule

log = logging.getLogger("kdc.build")

# The programs and libraries a launcher's build links against, and libvirt's build.
BUILD_ROOT = RootRecipe(
    "build", ("pkg-config", "libvirt-dev", "libnbd-dev", "dpkg-dev", "patchelf",
              "ca-certificates"),
    build_deps_of=("libvirt",), variant="buildd",
)
# launcherbase (libvirt's client and QEMU driver, passt, QEMU, swtpm, firmware, and its
# extra tools) plus centos_main (acl, curl, vim), mapped to Debian's package names;
# virtlogd is a package of its own in Debian; dmidecode is what libvirt reads SMBIOS with.
LAUNCHER_ROOT = RootRecipe("virt-launcher", (
    "libvirt-clients", "libvirt-daemon-driver-qemu", "libvirt-daemon-log", "passt",
    "qemu-system-x86", "swtpm-tools", "ovmf", "seabios", "findutils", "nftables", "ncat",
    "procps", "tar", "virtiofsd", "xorriso", "libnbd0", "acl", "curl", "vim-tiny",
    "dmidecode",
))
# handlerbase (qemu-img and its extra tools) plus centos_main.
HANDLER_ROOT = RootRecipe("virt-handler", (
    "qemu-utils", "findutils", "iproute2", "nftables", "procps", "tar", "util-linux",
    "xorriso", "acl", "curl", "vim-tiny",
))
LAUNCHER_PROGRAMS = ("virt-launcher", "virt-launcher/libvirt-hook-client")
# The programs the launcher image carries in /usr/bin besides virt-launcher.
LAUNCHER_HELPERS = ("virt-freezer", "virt-launcher-monitor", "virt-probe", "virt-tail")
# Debian names the 4 MiB OVMF builds by size; KubeVirt looks for CentOS's names.
OVMF_LINKS = {"OVMF_CODE.fd": "OVMF_CODE_4M.fd", "OVMF_VARS.fd": "OVMF_VARS_4M.fd",
              "OVMF_CODE.secboot.fd": "OVMF_CODE_4M.secboot.fd",
              "OVMF_VARS.secboot.fd": "OVMF_VARS_4M.ms.fd"}
QEMU_UID = 107
# EMULATED: the VFIO hop in front of Debian's /usr/bin/qemu-system-x86_64, found first
# on the PATH virt-launcher gives virtqemud (DEBIAN_PATH).
EMULATED_QEMU_PATH = "/usr/local/bin/qemu-system-x86_64"
# CentOS builds libvirt's client with remote_default_mode=direct: a URI-less virsh (the
# node labeller's) reaches virtqemud. Debian builds it with "legacy" (libvirtd's socket);
# libvirt.conf's documented uri_default gives the same answer without a rebuild.
LIBVIRT_CLIENT_DEFAULT_URI = (
    b'\n# kubevirt-dra-conformance: virsh without -c reaches virtqemud, as on CentOS\n'
    b'uri_default = "qemu:///system"\n'
)
CAP_NET_BIND_SERVICE = 10


def _file_capability(capability: int) -> bytes:
    """``security.capability`` (VFS_CAP_REVISION_2) granting ``capability`` as
    permitted and effective: what ``setcap cap_...+ep`` writes."""
    revision_2, effective = 0x02000000, 0x000001
    low, high = (1 << capability) & 0xFFFFFFFF, (1 << capability) >> 32
    return struct.pack("<IIIII", revision_2 | effective, low, 0, high, 0)


def virtqemud(runner: CommandRunner | None = None) -> Path:
    """libvirt's virtqemud at the version of the launcher root's libvirt."""
    launcher_root = debian.build_root(LAUNCHER_ROOT, runner)
    source_name, version = debian.installed_source(launcher_root, "libvirt0")
    product = components.CACHE_ROOT / f"virtqemud-{version.replace('+', '_')}" / "virtqemud"
    if product.is_file():
        return product
    build_root = debian.build_root(BUILD_ROOT, runner)
    work = product.parent.with_name(product.parent.name + ".work")
    source = debian.fetch_source(build_root, source_name, version, work, runner)
    # Debian's configuration (debian/rules), then only the daemon's target; the RUNPATH
    # meson gives build-tree programs goes, as an install would drop it.
    log.info(f"virtqemud {version} from Debian's libvirt source (a minute)")
    debian.run_in_root(build_root, f"""
cd {shlex.quote(str(source))}
DEB_BUILD_OPTIONS="nocheck parallel=2" debian/rules override_dh_auto_configure >build.log 2>&1 \
  || {{ tail -40 build.log; exit 1; }}
ninja -C obj-x86_64-linux-gnu src/virtqemud >build.log 2>&1 || {{ tail -40 build.log; exit 1; }}
patchelf --remove-rpath obj-x86_64-linux-gnu/src/virtqemud
strip obj-x86_64-linux-gnu/src/virtqemud
""", binds=[work], runner=runner, label="virtqemud")
    product.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(source / "obj-x86_64-linux-gnu/src/virtqemud", product)
    shutil.rmtree(work)
    return product


def launcher_programs(module: BuildModule, runner: CommandRunner | None = None) -> Path:
    """virt-launcher and libvirt-hook-client from the KubeVirt code's build module, and its
    C program container-disk (``gcc -static``, as its cc_binary), built in the trixie
    build root against the launcher root's libvirt and libnbd."""
    code = module.code
    launcher_root = debian.build_root(LAUNCHER_ROOT, runner)
    libnbd_source, libnbd = debian.installed_source(launcher_root, "libnbd0")
    bin_dir = (components.CACHE_ROOT / f"kubevirt-launcher-{code.version}-{module.key}"
               f"-libnbd{libnbd.replace('+', '_')}" / "bin")
    programs = ("virt-launcher", "libvirt-hook-client", "container-disk")
    if all((bin_dir / p).is_file() for p in programs):
        return bin_dir
    build_root = debian.build_root(BUILD_ROOT, runner)
    work = bin_dir.parent / "work"
    binding = debian.fetch_source(build_root, libnbd_source, libnbd, work, runner) / "golang"
    modfile = module.launcher_modfile(binding, work)
    staging = bin_dir.with_name("bin.partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    packages = [f"kubevirt.io/kubevirt/cmd/{p}" for p in LAUNCHER_PROGRAMS]
    # The modules these packages need are fetched here, with this host's network and trust
    # store (listing them downloads them); the build root only reads the module cache.
    check(QUIET.run(["go", "list", f"-modfile={modfile}", "-mod=mod", "-deps", *packages],
                    Timeout.GO_MODULES, env={**os.environ, "CGO_ENABLED": "1"},
                    cwd=module.folder),
          "check that the Go module proxy is reachable (virt-launcher's modules)")
    go_env = _go_env()
    log.info(f"virt-launcher {code.version} against trixie's libvirt and "
             "libnbd (minutes when cold)")
    out = shlex.quote(str(work / "build.log"))
    debian.run_in_root(build_root, f"""
cd {shlex.quote(str(module.folder))}
go build -modfile={shlex.quote(str(modfile))} -trimpath \\
  -ldflags {shlex.quote(code.ldflags)} -o {shlex.quote(str(staging))}/ \\
  {" ".join(packages)} \\
  >{out} 2>&1 || {{ grep -v -e warning: -e note: -e '^ *[0-9]* |' {out} | tail -40; exit 1; }}
gcc -static -O2 -o {shlex.quote(str(staging))}/container-disk \\
  {shlex.quote(str(code.source / "cmd/container-disk-v2alpha/main.c"))}
""", binds=[Path(go_env["GOROOT"]), Path(go_env["GOMODCACHE"]), Path(go_env["GOCACHE"]),
            module.folder, kubevirt_module.BUILD_DIR, bin_dir.parent,
            *([code.source] if code.tree else [])],
        env={**go_env, "PATH": f"{go_env['GOROOT']}/bin:/usr/bin:/bin", "CGO_ENABLED": "1",
             "GOFLAGS": "-mod=mod", "GOPROXY": "off"},
        runner=runner, label="build virt-launcher")
    shutil.rmtree(bin_dir, ignore_errors=True)
    staging.rename(bin_dir)
    shutil.rmtree(work)
    return bin_dir


def _go_env() -> dict[str, str]:
    keys = ("GOROOT", "GOMODCACHE", "GOCACHE", "GOTOOLCHAIN")
    values = output(["go", "env", *keys], Timeout.GO_MODULES, "install Go 1.26 (README)"
                    ).splitlines()
    return {key: value for key, value in zip(keys, values, strict=True) if value}


def _merged(entries: list[str], debian_file: Path) -> bytes:
    """KubeVirt's entries, then those of the Debian root's other users or groups: its
    packages' programs look up the users they were built for (Debian's libvirt refuses
    to start without its compiled-in default user, ``libvirt-qemu``)."""
    names = {entry.split(":", 1)[0] for entry in entries}
    others = [line for line in debian_file.read_text().splitlines()
              if line and line.split(":", 1)[0] not in names]
    return "".join(f"{line}\n" for line in [*entries, *others]).encode()


def _version_and_users(version: str, root: Path, qemu_home: str) -> dict[str, bytes]:
    """/.version and KubeVirt's passwd_file and group_file entries (qemu 107, root)."""
    passwd = [f"qemu:x:{QEMU_UID}:{QEMU_UID}::{qemu_home}:/bin/bash",
              "root:x:0:0:root:/root:/bin/bash"]
    group = [f"qemu:x:{QEMU_UID}:", "root:x:0:"]
    return {"/.version": f"{version}\n".encode(),
            "/etc/passwd": _merged(passwd, root / "etc/passwd"),
            "/etc/group": _merged(group, root / "etc/group")}


def launcher_image(name: str, version: str, root: Path, module: Path, node_bin: Path,
                   launcher_bin: Path, virtqemud_binary: Path, emulated_qemu: Path
                   ) -> images.ImageSpec:
    """cmd/virt-launcher's image: the launcherbase root, KubeVirt's libvirt configuration,
    users, nsswitch.conf and qemu hook, the programs in /usr/bin (virt-launcher-monitor
    with cap_net_bind_service), /var/run as a relative link, and the release's user (107
    from v1.9, root before). Added here: the EMULATED VFIO hop in front of QEMU, first
    on libvirt's PATH (driver/cmd/emulated-vfio-qemu)."""
    source = module / "cmd" / "virt-launcher"
    files = {"/usr/bin/virt-launcher": launcher_bin / "virt-launcher",
             "/usr/bin/libvirt-hook-client": launcher_bin / "libvirt-hook-client",
             "/usr/bin/container-disk": launcher_bin / "container-disk",
             "/usr/bin/node-labeller.sh": source / "node-labeller" / "node-labeller.sh",
             "/etc/libvirt/hooks/qemu": source / "qemu",
             "/usr/sbin/virtqemud": virtqemud_binary,
             EMULATED_QEMU_PATH: emulated_qemu,
             **{f"/usr/bin/{p}": node_bin / p for p in LAUNCHER_HELPERS}}
    contents = {**_version_and_users(version, root, "/home/qemu"),
                "/etc/nsswitch.conf": (source / "nsswitch.conf").read_bytes(),
                "/etc/libvirt/qemu.conf": (source / "qemu.conf").read_bytes(),
                "/etc/libvirt/virtqemud.conf": (source / "virtqemud.conf").read_bytes(),
                "/etc/libvirt/libvirt.conf": (root / "etc/libvirt/libvirt.conf").read_bytes()
                + LIBVIRT_CLIENT_DEFAULT_URI}
    return images.ImageSpec(
        name, root=root, files=files, contents=contents,
        symlinks={"/var/run": "../run",
                  **{f"/usr/share/OVMF/{name}": target for name, target in OVMF_LINKS.items()}},
        directories=("/usr/lib64/qemu-kvm",),
        attributes={
            # qemu-hook-tar's owner: virt-launcher (user 107) replaces the hook with
            # libvirt-hook-client when LibvirtHooksServerAndClient is on (beta, default).
            "/etc/libvirt/hooks": images.FileAttributes(uid=QEMU_UID, gid=QEMU_UID),
            "/etc/libvirt/hooks/qemu": images.FileAttributes(uid=QEMU_UID, gid=QEMU_UID),
            "/usr/bin/virt-launcher-monitor": images.FileAttributes(xattrs=(
                ("security.capability", _file_capability(CAP_NET_BIND_SERVICE)),)),
        },
        entrypoint=["/usr/bin/virt-launcher"],
        user=bazel_image_user(source, "virt-launcher-image"),
        env=[debian.DEBIAN_PATH],
    )


def bazel_image_user(package: Path, image: str) -> str:
    """The ``user`` of the ``oci_image`` named ``image`` in ``package``/BUILD.bazel, ""
    when it sets none (root). KubeVirt's node-labeller init container runs as this user
    on releases whose operator does not set one (v1.8)."""
    rules = (package / "BUILD.bazel").read_text().split("\n)")
    rule = next((r for r in rules if f'name = "{image}"' in r), None)
    if rule is None:
        raise SuiteUsageError(f"{package}/BUILD.bazel defines no image {image!r}",
                              "check the KubeVirt build module (`go mod download`)")
    user = re.search(r'^\s*user = "([^"]*)"', rule, re.MULTILINE)
    return user.group(1) if user else ""


def handler_image(name: str, version: str, root: Path, module: Path, node_bin: Path,
                  passt_repair: Path) -> images.ImageSpec:
    """cmd/virt-handler's image: the handlerbase root, users, nsswitch.conf, passt-repair
    (taken from passt, mode 0744), virt-handler and virt-chroot, run as root."""
    return images.ImageSpec(
        name, root=root,
        files={"/usr/bin/virt-handler": node_bin / "virt-handler",
               "/usr/bin/virt-chroot": node_bin / "virt-chroot",
               "/usr/bin/passt-repair": passt_repair},
        contents={**_version_and_users(version, root, ""),
                  "/etc/nsswitch.conf": (module / "cmd/virt-handler/nsswitch.conf").read_bytes()},
        attributes={"/usr/bin/passt-repair": images.FileAttributes(mode=0o744)},
        entrypoint=["/usr/bin/virt-handler"],
        env=[debian.DEBIAN_PATH],
    )


def image_archives(module: BuildModule, image_name: Callable[[str], str],
                   emulated_qemu: Path, runner: CommandRunner | None = None) -> list[Path]:
    """OCI archives of virt-handler and virt-launcher of the module's code under the
    names ``image_name(program)``, built when they are not cached (keyed by the code's
    build, the names, the roots' recipes and the EMULATED QEMU front ``emulated_qemu``)."""
    version, source = module.code.version, module.code.source
    node_bin = components.build(components.kubevirt_node_component(module), runner)
    launcher_bin = launcher_programs(module, runner)
    daemon = virtqemud(runner)
    folder = components.CACHE_ROOT / f"kubevirt-images-{version}-{module.key}"
    archives = []
    launcher_root = debian.build_root(LAUNCHER_ROOT, runner)
    handler_root = debian.build_root(HANDLER_ROOT, runner)
    specs = {
        "virt-launcher": lambda: launcher_image(image_name("virt-launcher"), version,
                                                launcher_root, source, node_bin,
                                                launcher_bin, daemon, emulated_qemu),
        "virt-handler": lambda: handler_image(image_name("virt-handler"), version,
                                              handler_root, source, node_bin,
                                              launcher_root / "usr/bin/passt-repair"),
    }
    # The images change with their inputs and with how this module assembles them.
    recipe = hashlib.sha256(Path(__file__).read_bytes())
    recipe.update(f"{launcher_root} {handler_root} {daemon} {launcher_bin}".encode())
    recipe.update(emulated_qemu.read_bytes())
    for program, spec in specs.items():
        key = hashlib.sha256(f"{image_name(program)} {recipe.hexdigest()}".encode()
                             ).hexdigest()[:12]
        archive = folder / f"{program}-{key}.tar"
        if not archive.is_file():
            log.info(f"{image_name(program)}: writing its OCI archive")
            partial = archive.with_suffix(".partial")
            images.write_oci_archive(spec(), partial)
            partial.rename(archive)
        archives.append(archive)
    return archives
