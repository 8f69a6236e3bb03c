"""A KubeVirt tree from the Go module cache, laid out as KubeVirt's repository: the
module kubevirt.io/kubevirt at a release, its staging modules kubevirt.io/api and
kubevirt.io/client-go (published at the same tag) under staging/src/kubevirt.io, as a
git checkout tagged with the release. For trying --kubevirt-source where no clone of
KubeVirt's repository is at hand (docs/releases.md, "Your own KubeVirt tree"):

    python scripts/kubevirt_tree.py /tmp/kubevirt --version v1.9.0
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from core.commands import output  # noqa: E402
from core.errors import SuiteUsageError  # noqa: E402
from core.log import log_to_stderr  # noqa: E402
from core.timeouts import Timeout  # noqa: E402
from kubevirtci.kubevirt_code import MODULE, STAGING, download, release_code  # noqa: E402


def _copy(source: Path, dest: Path) -> None:
    """Copy a module out of the read-only module cache, writable as a checkout is."""
    shutil.copytree(source, dest, copy_function=shutil.copyfile)
    for path in [dest, *dest.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)


def _git(tree: Path, *argv: str) -> None:
    output(["git", "-C", str(tree), "-c", "user.name=kubevirt-dra-conformance",
            "-c", "user.email=kdc@localhost", *argv], Timeout.GIT)


def make_tree(dest: Path, version: str) -> Path:
    if dest.exists():
        raise SuiteUsageError(f"{dest} exists", "pass a path that does not exist yet")
    code = release_code(version)
    _copy(code.source, dest)
    for module, folder in STAGING.items():
        info = download(module, version)
        if info is None:
            shutil.rmtree(dest)
            raise SuiteUsageError(f"the Go module proxy does not serve {module}@{version}",
                                  "pick a release whose api and client-go it serves")
        (dest / folder).parent.mkdir(parents=True, exist_ok=True)
        _copy(Path(str(info["Dir"])), dest / folder)
    _git(dest, "init", "-q")
    _git(dest, "add", "-A")
    _git(dest, "commit", "-q", "-m", f"{MODULE} {version} from the Go module cache")
    _git(dest, "tag", version)
    return dest


def main() -> int:
    log_to_stderr()
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dest", type=Path)
    parser.add_argument("--version", default="v1.9.0", help="a release the proxy serves")
    args = parser.parse_args()
    try:
        print(make_tree(args.dest.resolve(), args.version))
    except SuiteUsageError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
