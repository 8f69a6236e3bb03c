"""Which KubeVirt code a run judges: a release the Go module proxy serves, or a KubeVirt
tree (a checkout with KubeVirt's layout), named as KubeVirt's own build stamps it
(hack/version.sh: ``git describe``, commit, tree state)."""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from core.commands import NOT_FOUND, QUIET, CommandResult
from core.errors import SuiteUsageError
from core.timeouts import Timeout

MODULE = "kubevirt.io/kubevirt"
STAGING = {"kubevirt.io/api": "staging/src/kubevirt.io/api",
           "kubevirt.io/client-go": "staging/src/kubevirt.io/client-go"}
DIRTY_MARKER = "dirty"


@dataclass(frozen=True)
class KubeVirtCode:
    """KubeVirt's code: a release from the module proxy, or a tree."""

    version: str  # the release, or the tree's `git describe` (+ -dirty-<content hash>)
    source: Path  # the module's folder in the module cache, or the tree's root
    commit: str
    date: str
    tree: bool = False
    dirty: bool = False
    content_hash: str = ""  # a tree's sources (git-tracked and untracked, not ignored)

    @property
    def go_mod(self) -> str:
        return (self.source / "go.mod").read_text()

    @property
    def ldflags(self) -> str:
        """The version stamp of KubeVirt's hack/version.sh."""
        stamp = "kubevirt.io/client-go/version"
        state = DIRTY_MARKER if self.dirty else "clean"
        return (f"-s -w -X {stamp}.gitVersion={self.version} -X {stamp}.gitCommit={self.commit}"
                f" -X {stamp}.gitTreeState={state} -X {stamp}.buildDate={self.date}")

    def requirement(self, module: str) -> str | None:
        """The version this code's go.mod requires of ``module``, None when none."""
        found = re.search(rf"^\s*(?:require\s+)?{re.escape(module)} (v\S+)", self.go_mod,
                          re.MULTILINE)
        return found.group(1) if found else None


def go(argv: list[str], cwd: Path) -> CommandResult:
    """A go command that fetches or lists modules; its result whatever its exit status,
    but one that cannot start or runs out of time is an error naming the fix."""
    result = QUIET.run(["go", *argv], Timeout.GO_MODULES, cwd=cwd, env=dict(os.environ))
    if result.timed_out is not None or result.returncode == NOT_FOUND:
        raise SuiteUsageError(result.summary(), "install Go 1.26 (README) and check that "
                              "the Go module proxy is reachable (`go env GOPROXY`)")
    return result


def download(module: str, version: str) -> dict[str, object] | None:
    """`go mod download -json module@version`; None when the proxy refuses it."""
    result = go(["mod", "download", "-json", f"{module}@{version}"], Path.cwd())
    if result.returncode != 0:
        return None
    return json.loads(result.stdout)


def release_code(version: str) -> KubeVirtCode:
    """A KubeVirt release as the module proxy serves it, or one error naming the fix."""
    if not re.fullmatch(r"v\d+\.\d+\.\d+", version):
        raise SuiteUsageError(f"--kubevirt-version {version!r} is not a release tag",
                              "pass a tag such as v1.9.0, or --kubevirt-source PATH for a tree")
    info = download(MODULE, version)
    if info is None:
        raise SuiteUsageError(
            f"the Go module proxy does not serve {MODULE}@{version}, so it cannot be built "
            "here",
            "pick a release it serves (`go list -m -versions kubevirt.io/kubevirt`), or "
            "pass --kubevirt-source with a KubeVirt checkout")
    origin = info.get("Origin") or {}
    assert isinstance(origin, dict)
    stamp = json.loads(Path(str(info["Info"])).read_text())
    return KubeVirtCode(version, Path(str(info["Dir"])), str(origin.get("Hash", "")),
                        str(stamp.get("Time", "")))


def check_tree_layout(path: Path) -> None:
    """A KubeVirt checkout: module kubevirt.io/kubevirt with its staging modules."""
    fix = ("pass the root of a KubeVirt checkout (git clone https://github.com/kubevirt/"
           "kubevirt), or --kubevirt-version for a release")
    if not (path / "go.mod").is_file():
        raise SuiteUsageError(f"--kubevirt-source {path} has no go.mod", fix)
    if not re.search(rf"^module {re.escape(MODULE)}\s*$", (path / "go.mod").read_text(),
                     re.MULTILINE):
        raise SuiteUsageError(f"--kubevirt-source {path} is not module {MODULE}", fix)
    missing = [p for p in STAGING.values() if not (path / p / "go.mod").is_file()]
    if missing:
        raise SuiteUsageError(f"--kubevirt-source {path} lacks {', '.join(missing)}", fix)
    if not (path / ".git").exists():
        raise SuiteUsageError(
            f"--kubevirt-source {path} is not a git checkout (its build is stamped from "
            "`git describe`)", "run `git init && git add -A && git commit -m base` in it, "
            "or pass a clone")


def _git(tree: Path, *argv: str) -> str:
    result = QUIET.run(["git", "-C", str(tree), *argv], Timeout.GIT)
    if result.failed:
        raise SuiteUsageError(f"{result.summary()} (in {tree})",
                              "check that git is installed and the tree is a readable checkout")
    return result.stdout


def content_hash(tree: Path) -> str:
    """The tree's sources as git sees them (tracked and untracked, not ignored): a
    change to any file changes it, a build output git ignores does not."""
    listed = _git(tree, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
    digest = hashlib.sha256()
    for name in sorted(set(filter(None, listed.split("\0")))):
        path = tree / name
        if path.is_file() and not path.is_symlink():
            digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
        elif path.is_symlink():
            digest.update(name.encode() + b"\0->" + os.readlink(path).encode() + b"\0")
    return digest.hexdigest()


def tree_code(path: Path) -> KubeVirtCode:
    """A KubeVirt tree, stamped as KubeVirt stamps its builds: ``git describe``, plus
    ``-dirty-<content hash>`` when it has changes."""
    tree = path.resolve()
    check_tree_layout(tree)
    describe = _git(tree, "describe", "--tags", "--always", "--abbrev=14", "HEAD").strip()
    commit = _git(tree, "rev-parse", "HEAD").strip()
    date = _git(tree, "log", "-1", "--format=%cI", "HEAD").strip()
    dirty = bool(_git(tree, "status", "--porcelain", "--untracked-files=normal").strip())
    digest = content_hash(tree)
    version = f"{describe}-{DIRTY_MARKER}-{digest[:12]}" if dirty else describe
    return KubeVirtCode(version, tree, commit, date, tree=True, dirty=dirty,
                        content_hash=digest)
