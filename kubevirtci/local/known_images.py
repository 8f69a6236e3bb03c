"""The images this project builds itself, without a registry or a daemon: the reference
driver and the sanity client (from driver/), and the suite itself (Sonobuoy plugin mode).
Each is keyed by the content it is built from, so a cached archive is never stale."""

from __future__ import annotations

import hashlib
import logging
import shutil
import sys
import tomllib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from core.commands import QUIET, Runner, check
from core.errors import SuiteUsageError
from core.timeouts import Timeout
from kubevirtci.local import components, debian, images
from kubevirtci.provider import SANITY_CLIENT_IMAGE, SUITE_IMAGE

log = logging.getLogger("kdc.images")

DRIVER_IMAGE = "localhost/kdc/nvme-dra-driver:dev"  # as driver/deploy names it
PROJECT_DIR = Path(__file__).resolve().parents[2]
# What the suite image carries of this project: the suites and everything they import,
# the profiles and the reference driver's manifests (profiles name them).
SUITE_SOURCES = ("conftest.py", "pyproject.toml", "core", "fixtures", "kubevirtci", "reports",
                 "suites", "profiles", "driver/deploy")
GO_BUILD_MODULES = Path("kubevirtci/local/build")  # what builds from Go; nothing it imports
SUITE_HOME = "/opt/kdc"
SUITE_ROOT = debian.RootRecipe(
    "suite", ("python3", "ca-certificates"), suite="bookworm")  # the host's Python 3.11


def content_hash(named_files: Iterable[tuple[str, Path]], salt: str = "") -> str:
    """A cache key: each file's name and bytes, in the order given, after ``salt``."""
    digest = hashlib.sha256(salt.encode())
    for name, path in named_files:
        digest.update(name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def driver_version() -> str:
    """Content hash of the driver's sources: the cache key of its build."""
    return content_hash(
        (path.relative_to(components.DRIVER_DIR).as_posix(), path)
        for path in sorted(components.DRIVER_DIR.rglob("*"))
        if path.suffix in (".go", ".mod", ".sum") and "_test" not in path.name)


def driver_programs() -> Path:
    """The folder of driver/'s programs, built locally (cached by source version)."""
    return components.build(components.driver_component(driver_version()))


def suite_files() -> dict[str, Path]:
    """Path in the image -> file of this checkout, for every source the suite runs from:
    the files git tracks (nothing a working tree happens to hold), or, outside a git
    checkout, every file but caches and the Go build modules."""
    tracked = QUIET.run(["git", "ls-files", "-z", "--", *SUITE_SOURCES], Timeout.GIT,
                        cwd=PROJECT_DIR)
    if not tracked.failed and tracked.stdout:
        relatives = [Path(p) for p in tracked.stdout.split("\0") if p]
    else:
        relatives = [path.relative_to(PROJECT_DIR) for entry in SUITE_SOURCES
                     for path in ((PROJECT_DIR / entry).rglob("*")
                                  if (PROJECT_DIR / entry).is_dir() else [PROJECT_DIR / entry])]
    files: dict[str, Path] = {}
    for relative in sorted(relatives):
        path = PROJECT_DIR / relative
        if path.is_file() and "__pycache__" not in relative.parts \
                and not relative.is_relative_to(GO_BUILD_MODULES):
            files[f"{SUITE_HOME}/suite/{relative.as_posix()}"] = path
    return files


def suite_dependencies() -> list[str]:
    return tomllib.loads((PROJECT_DIR / "pyproject.toml").read_text())["project"]["dependencies"]


def suite_version() -> str:
    """Content hash of the suite's sources and the recipe of its Debian root."""
    return content_hash(sorted(suite_files().items()), salt=repr(SUITE_ROOT))


def python_packages() -> Path:
    """The suite's Python dependencies, as pip installs them for the image's Python
    (the host's pip, which reaches PyPI; the image's Python is the same 3.11)."""
    key = hashlib.sha256("\n".join(suite_dependencies()).encode()).hexdigest()[:12]
    target = components.CACHE_ROOT / f"suite-python-{key}"
    if not target.is_dir():
        staging = target.with_name(target.name + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        log.info("the suite's Python dependencies, from PyPI")
        result = Runner().run(
            [sys.executable, "-m", "pip", "install", "--quiet", "--no-compile",
             "--python-version", "3.11", "--only-binary=:all:", "--target", str(staging),
             *suite_dependencies()], Timeout.PIP_INSTALL, label="pip")
        check(result, "check that PyPI is reachable (pip's own settings apply)")
        staging.rename(target)
    return target


def suite_image_spec(name: str) -> images.ImageSpec:
    """The suite on Debian's Python, run as ``python3 -m reports.sonobuoy`` by the
    Sonobuoy plugin (docs/profiles.md, Sonobuoy)."""
    packages = python_packages()
    files = suite_files()
    files.update({f"{SUITE_HOME}/python/{p.relative_to(packages).as_posix()}": p
                  for p in sorted(packages.rglob("*")) if p.is_file()})
    return images.ImageSpec(
        name, root=debian.build_root(SUITE_ROOT), files=files,
        env=[debian.DEBIAN_PATH, f"PYTHONPATH={SUITE_HOME}/suite:{SUITE_HOME}/python",
             "PYTHONDONTWRITEBYTECODE=1", "LC_ALL=C.UTF-8", "HOME=/tmp"],
        entrypoint=["python3", "-m", "reports.sonobuoy"],
        working_dir=f"{SUITE_HOME}/suite")


@dataclass(frozen=True)
class KnownImage:
    spec: Callable[[str], images.ImageSpec]
    version: Callable[[], str]  # the content it is built from


KNOWN_IMAGES: dict[str, KnownImage] = {
    DRIVER_IMAGE: KnownImage(lambda name: images.driver_image(name, driver_programs()),
                             driver_version),
    SANITY_CLIENT_IMAGE: KnownImage(
        lambda name: images.sanity_client_image(name, driver_programs()), driver_version),
    SUITE_IMAGE: KnownImage(suite_image_spec, suite_version),
}


def known_image(name: str) -> KnownImage:
    if name not in KNOWN_IMAGES:
        raise SuiteUsageError(f"image {name} is not one this project builds",
                              f"use one of {', '.join(KNOWN_IMAGES)}, or push it yourself")
    return KNOWN_IMAGES[name]


def build_known_archive(name: str, archive: Path) -> Path:
    """A known image as an OCI archive at ``archive``."""
    return images.write_oci_archive(known_image(name).spec(name), archive)
