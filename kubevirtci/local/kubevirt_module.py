"""KubeVirt's build module, derived when the build runs from the code under test: a
release the Go module proxy serves (its own ``go.mod``: requirements and replace lines)
or a KubeVirt tree (replace directives to the tree). What a release needs beyond its own
``go.mod`` is a short list of named exceptions below, each with its reason; each applies
exactly to the releases whose ``go.mod`` asks for what it is about."""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import filelock

from core.errors import SuiteUsageError
from kubevirtci.kubevirt_code import MODULE, STAGING, KubeVirtCode, download, go
from kubevirtci.local.known_images import content_hash

BUILD_DIR = Path(__file__).resolve().parent / "build" / "kubevirt"
# KubeVirt's programs built here: the control plane, the node agents and helpers, and
# the tools of its own build (virt-launcher builds apart, against its image's libvirt).
PROGRAMS = ("cmd/virt-api", "cmd/virt-chroot", "cmd/virt-controller", "cmd/virt-exportproxy",
            "cmd/virt-freezer", "cmd/virt-handler", "cmd/virt-launcher-monitor",
            "cmd/virt-operator", "cmd/virt-probe", "cmd/virt-tail", "tools/csv-generator",
            "tools/manifest-templator")


@dataclass(frozen=True)
class BuildException:
    """A requirement of a release's go.mod that cannot be used here as it asks."""

    name: str
    module: str
    replacement: str  # a version of the same module, or a folder under BUILD_DIR
    reason: str

    def replace_line(self) -> str:
        if self.replacement.startswith("v"):
            return f"{self.module} => {self.module} {self.replacement}"
        return f"{self.module} => {BUILD_DIR / self.replacement}"


# Modules the Go module proxy refuses here at the version a release asks for. Each
# applies when that request is refused (probed when the build runs): the real module is
# used as soon as the proxy serves it.
REFUSED = (
    BuildException("virt-template STAND-IN", "kubevirt.io/virt-template-api",
                   "standin/virt-template-api",
                   "v0.2.0 (KubeVirt v1.9) is refused; the server programs use a small surface "
                   "of it, written here (standin/README.md); virt-template is not deployed"),
    BuildException("virt-template STAND-IN", "kubevirt.io/virt-template-client-go",
                   "standin/virt-template-client-go", "as virt-template-api"),
    BuildException("virt-template-engine v0.1.7", "kubevirt.io/virt-template-engine", "v0.1.7",
                   "v0.2.0 is refused; only virtctl (not built here) imports it, the module "
                   "graph needs a version"),
    BuildException("libnbd placeholder", "libguestfs.org/libnbd", "placeholder/libnbd",
                   "KubeVirt pins a commit the proxy refuses; only virt-launcher imports it and "
                   "links the Go binding of Debian's libnbd source instead"),
)
# virt-launcher of releases that link libnbd (v1.8+) with libvirt's Go binding before
# v1.12: both export the cgo symbol freeCallbackId, so it does not link against Debian's
# libnbd; libvirt's binding renamed it in v1.12 (the one KubeVirt v1.9 requires). Its API
# only grows between releases.
LIBVIRT_BINDING = "libvirt.org/go/libvirt"
LIBVIRT_BINDING_LINKS_WITH_LIBNBD = "v1.12003.0"


def exceptions_for(code: KubeVirtCode) -> list[BuildException]:
    """The named exceptions this code needs: a required version the proxy refuses."""
    needed = []
    for exception in REFUSED:
        wanted = code.requirement(exception.module)
        if wanted is not None and download(exception.module, wanted) is None:
            needed.append(exception)
    return needed


def _replace_lines(code: KubeVirtCode) -> list[str]:
    """The code's own replace lines: those pointing at versions as they are, those
    pointing at folders of a tree made absolute; a release's ./staging ones go (its
    api and client-go are published at the same tag)."""
    lines = []
    block = re.search(r"^replace \((.*?)^\)", code.go_mod, re.DOTALL | re.MULTILINE)
    singles = re.findall(r"^replace (\S+ .*=> .*)$", code.go_mod, re.MULTILINE)
    for line in [*(block.group(1).splitlines() if block else []), *singles]:
        line = line.split("//", 1)[0].strip()
        if "=>" not in line:
            continue
        left, right = (part.strip() for part in line.split("=>", 1))
        if right.startswith(("./", "../")):
            if code.tree:
                lines.append(f"{left} => {(code.source / right).resolve()}")
            continue
        lines.append(f"{left} => {right}")
    return lines


def go_mod_text(code: KubeVirtCode, exceptions: list[BuildException]) -> str:
    """The build module's go.mod: KubeVirt (and its api and client-go) at the release, or
    replaced by the tree's folders, with the code's replace lines and the exceptions."""
    go = re.search(r"^go (\S+)", code.go_mod, re.MULTILINE)
    version = "v0.0.0-00010101000000-000000000000" if code.tree else code.version
    modules = [MODULE, *STAGING]
    replaces = _replace_lines(code)
    if code.tree:
        replaces = [r for r in replaces if r.split(" ", 1)[0] not in modules]
        replaces += [f"{MODULE} => {code.source}",
                     *(f"{m} => {code.source / path}" for m, path in STAGING.items())]
    overridden = {e.module for e in exceptions}
    replaces = [r for r in replaces if r.split(" ", 1)[0] not in overridden]
    replaces += [e.replace_line() for e in exceptions]
    names = ", ".join(sorted({e.name for e in exceptions})) or "none"
    return (f"// Generated by kubevirtci/local/kubevirt_module.py from {MODULE} "
            f"{code.version}'s go.mod; exceptions: {names}.\n"
            "module github.com/kubevirt-dra-conformance/kubevirt-build\n\n"
            f"go {go.group(1) if go else '1.24.0'}\n\n"
            "require (\n" + "".join(f"\t{m} {version}\n" for m in modules) + ")\n\n"
            "replace (\n" + "".join(f"\t{r}\n" for r in replaces) + ")\n")


def tools_go() -> str:
    return ("//go:build tools\n\n// Package tools names the KubeVirt programs built here.\n"
            "package tools\n\nimport (\n"
            + "".join(f'\t_ "{MODULE}/{p}"\n' for p in PROGRAMS) + ")\n")


def _standin_files(exceptions: list[BuildException]) -> list[tuple[str, Path]]:
    """The files of the folders the exceptions replace modules with, for the cache key."""
    folders = [BUILD_DIR / e.replacement for e in exceptions
               if (BUILD_DIR / e.replacement).is_dir()]
    return [(path.relative_to(BUILD_DIR).as_posix(), path)
            for folder in folders for path in sorted(folder.rglob("*")) if path.is_file()]


@dataclass(frozen=True)
class BuildModule:
    """The generated module: where ``go build`` runs, and what it was made with."""

    code: KubeVirtCode
    folder: Path
    exceptions: tuple[BuildException, ...]

    @property
    def key(self) -> str:
        return self.folder.name.rsplit("-", 1)[-1]

    def launcher_libvirt_binding(self) -> str | None:
        """The libvirt Go binding virt-launcher links instead of the code's own, where
        the code's would clash with libnbd's (None: the code's own)."""
        wanted = self.code.requirement(LIBVIRT_BINDING)
        if self.code.requirement("libguestfs.org/libnbd") and wanted and \
                _version_tuple(wanted) < _version_tuple(LIBVIRT_BINDING_LINKS_WITH_LIBNBD):
            return LIBVIRT_BINDING_LINKS_WITH_LIBNBD
        return None

    def notes(self) -> list[str]:
        """Each exception this build made, with its reason, for the report header."""
        notes = [f"{e.name}: {e.module} {self.code.requirement(e.module)} -> "
                 f"{e.replacement.rsplit('/', 1)[-1]} ({e.reason})" for e in self.exceptions]
        if raised := self.launcher_libvirt_binding():
            notes.append(f"virt-launcher links {LIBVIRT_BINDING} {raised} instead of "
                         f"{self.code.requirement(LIBVIRT_BINDING)} (the older binding's cgo "
                         "symbol freeCallbackId clashes with libnbd's)")
        return notes

    def launcher_modfile(self, libnbd_binding: Path, work: Path) -> Path:
        """go.mod and go.sum for virt-launcher (``-modfile``): libnbd points at Debian's
        binding, and libvirt's binding is raised where it would clash with it."""
        text = (self.folder / "go.mod").read_text()
        text = re.sub(r"(libguestfs\.org/libnbd => ).*", rf"\g<1>{libnbd_binding}", text)
        if raised := self.launcher_libvirt_binding():
            text += f"\nreplace {LIBVIRT_BINDING} => {LIBVIRT_BINDING} {raised}\n"
        work.mkdir(parents=True, exist_ok=True)
        modfile = work / "launcher.mod"
        modfile.write_text(text)
        shutil.copyfile(self.folder / "go.sum", work / "launcher.sum")
        return modfile


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", version.split("-", 1)[0]))


def build_module(code: KubeVirtCode, cache_root: Path) -> BuildModule:
    """The build module for ``code``, generated (and tidied) once per content: keyed by
    its go.mod, KubeVirt's go.sum and the stand-ins' sources."""
    exceptions = exceptions_for(code)
    mod = go_mod_text(code, exceptions)
    sums = (code.source / "go.sum").read_text()
    # Not keyed by where this checkout sits: the same code builds the same everywhere.
    keyed = mod.replace(str(BUILD_DIR), "<build>") + tools_go() + sums
    key = content_hash(_standin_files(exceptions), salt=keyed)
    folder = cache_root / "kubevirt-module" / f"{code.version}-{key}"
    folder.parent.mkdir(parents=True, exist_ok=True)
    with filelock.FileLock(str(folder) + ".lock"):  # xdist workers and the controller
        if not (folder / "tidy.done").is_file():
            _generate(code, folder, mod, sums)
    return BuildModule(code, folder, tuple(exceptions))


def refused_modules(stderr: str) -> list[str]:
    """module@version of each download the proxy refused (403, 404, 410), except the
    libnbd placeholder's, whose package nothing outside virt-launcher imports."""
    found = re.findall(r"(\S+@v[^\s:]+): reading \S+: (?:403|404|410)", stderr)
    return sorted({m for m in found if not m.startswith("libguestfs.org/libnbd@")})


def _generate(code: KubeVirtCode, folder: Path, mod: str, sums: str) -> None:
    staging = folder.with_name(folder.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    (staging / "go.mod").write_text(mod)
    (staging / "go.sum").write_text(sums)  # KubeVirt's own hashes, checked by the sumdb
    (staging / "tools.go").write_text(tools_go())
    # -e: the libnbd placeholder provides no package (only virt-launcher imports it);
    # any other module that cannot be had is named below, before a build starts.
    result = go(["mod", "tidy", "-e"], staging)
    refused = refused_modules(result.stderr)
    if result.returncode != 0 or refused:
        shutil.rmtree(staging, ignore_errors=True)
        why = (f"the Go module proxy refuses {', '.join(refused)}" if refused
               else result.stderr.strip()[-400:])
        raise SuiteUsageError(
            f"KubeVirt {code.version} cannot be built here: {why}",
            "serve the module through GOPROXY, or add a named exception for it in "
            "kubevirtci/local/kubevirt_module.py (REFUSED)")
    (staging / "tidy.done").write_text("")
    shutil.rmtree(folder, ignore_errors=True)
    staging.rename(folder)
