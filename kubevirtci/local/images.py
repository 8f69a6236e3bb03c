"""Container images without a registry: an OCI image layout written by our own code, as
a tarball that ``ctr images import`` takes. Layers are reproducible (fixed mtimes)."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"


# Never taken from a root into an image: the runtime mounts these, apt's caches are dead weight.
_ROOT_EXCLUDED = ("dev/", "proc/", "sys/", "var/cache/apt/", "var/lib/apt/lists/")


@dataclass(frozen=True)
class FileAttributes:
    """Ownership, mode and extended attributes (such as ``security.capability``) of a
    file that an image definition sets explicitly."""

    mode: int = 0o755
    uid: int = 0
    gid: int = 0
    xattrs: tuple[tuple[str, bytes], ...] = ()


@dataclass
class ImageSpec:
    name: str  # fully qualified reference, e.g. localhost/kdc/pause:kdc-1
    root: Path | None = None  # a directory tree (a Debian root) that the entries below overlay
    files: dict[str, Path] = field(default_factory=dict)  # path in image -> host file
    contents: dict[str, bytes] = field(default_factory=dict)  # path in image -> data (0644)
    symlinks: dict[str, str] = field(default_factory=dict)  # path in image -> target
    directories: tuple[str, ...] = ()  # empty directories the image holds
    attributes: dict[str, FileAttributes] = field(default_factory=dict)  # path -> attributes
    entrypoint: list[str] = field(default_factory=list)
    env: list[str] = field(default_factory=lambda: ["PATH=/bin:/usr/bin:/sbin:/usr/sbin"])
    user: str = ""  # the image's default user, as a uid ("" for root)
    working_dir: str = ""  # the container's working directory ("" for /)


def _entry(name: str, **fields: object) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name.lstrip("/"))
    info.mtime = 0
    for key, value in fields.items():
        setattr(info, key, value)
    return info


def _apply(info: tarfile.TarInfo, attributes: FileAttributes | None) -> tarfile.TarInfo:
    if attributes is not None:
        info.mode, info.uid, info.gid = attributes.mode, attributes.uid, attributes.gid
        # Binary values travel as surrogate escapes: tarfile then writes hdrcharset=BINARY.
        info.pax_headers = {f"SCHILY.xattr.{key}": value.decode("utf-8", "surrogateescape")
                            for key, value in attributes.xattrs}
    return info


def _add_root(tar: tarfile.TarFile, root: Path, overlaid: set[str]) -> None:
    def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        name = info.name
        if name in overlaid or any(name.startswith(p) for p in _ROOT_EXCLUDED):
            return None
        info.uname = info.gname = ""  # numeric ids: the host's names mean nothing here
        return info
    for child in sorted(os.listdir(root)):
        tar.add(root / child, arcname=child, filter=keep)


def _layer(spec: ImageSpec) -> tuple[bytes, str]:
    """(gzipped layer, diff id of the uncompressed tar)."""
    raw = io.BytesIO()
    overlay = [*spec.files, *spec.contents, *spec.symlinks, *spec.directories]
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        if spec.root is not None:
            _add_root(tar, spec.root, {p.lstrip("/") for p in overlay})
        parents = {str(Path(p).parent).lstrip("/") for p in overlay} | {"tmp"}
        parents |= {p.lstrip("/") for p in spec.directories}
        for d in sorted(parents - {""}):
            if spec.root is not None and (spec.root / d).is_dir():
                continue
            mode = 0o1777 if d == "tmp" else 0o755
            tar.addfile(_apply(_entry(d, type=tarfile.DIRTYPE, mode=mode),
                               spec.attributes.get("/" + d)))
        for path, source in sorted(spec.files.items()):
            data = source.read_bytes()
            info = _apply(_entry(path, size=len(data), mode=0o755), spec.attributes.get(path))
            tar.addfile(info, io.BytesIO(data))
        for path, data in sorted(spec.contents.items()):
            info = _apply(_entry(path, size=len(data), mode=0o644), spec.attributes.get(path))
            tar.addfile(info, io.BytesIO(data))
        for path, target in sorted(spec.symlinks.items()):
            tar.addfile(_entry(path, type=tarfile.SYMTYPE, linkname=target))
    uncompressed = raw.getvalue()
    # A whole root is hundreds of megabytes: the fastest level keeps an image build short.
    compressed = gzip.compress(uncompressed, compresslevel=1 if spec.root else 9, mtime=0)
    return compressed, "sha256:" + hashlib.sha256(uncompressed).hexdigest()


def _blob(blobs: dict[str, bytes], data: bytes) -> dict[str, object]:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    blobs[digest] = data
    return {"digest": digest, "size": len(data)}


def write_oci_archive(spec: ImageSpec, archive: Path) -> Path:
    blobs: dict[str, bytes] = {}
    layer, diff_id = _layer(spec)
    layer_desc = {"mediaType": OCI_LAYER, **_blob(blobs, layer)}
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Entrypoint": spec.entrypoint, "Env": spec.env,
                   **({"User": spec.user} if spec.user else {}),
                   **({"WorkingDir": spec.working_dir} if spec.working_dir else {})},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
    }
    config_desc = {"mediaType": OCI_CONFIG,
                   **_blob(blobs, json.dumps(config, sort_keys=True).encode())}
    manifest = {"schemaVersion": 2, "mediaType": OCI_MANIFEST, "config": config_desc,
                "layers": [layer_desc]}
    manifest_desc = {
        "mediaType": OCI_MANIFEST,
        **_blob(blobs, json.dumps(manifest, sort_keys=True).encode()),
        "annotations": {"io.containerd.image.name": spec.name,
                        "org.opencontainers.image.ref.name": spec.name.rsplit(":", 1)[-1]},
        "platform": {"architecture": "amd64", "os": "linux"},
    }
    index = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [manifest_desc]}
    archive.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive, "w") as tar:
        entries = {
            "oci-layout": json.dumps({"imageLayoutVersion": "1.0.0"}).encode(),
            "index.json": json.dumps(index, sort_keys=True).encode(),
        }
        entries |= {f"blobs/sha256/{d.split(':', 1)[1]}": data for d, data in blobs.items()}
        for name, data in entries.items():
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), 0
            tar.addfile(info, io.BytesIO(data))
    return archive


def archive_images(archive: Path) -> dict[str, str]:
    """{image name: manifest digest} of an OCI archive (what ``ctr images ls`` shows once
    it is imported); empty for other formats (``docker save``), whose import is not
    skipped."""
    try:
        with tarfile.open(archive) as tar:
            index = json.load(tar.extractfile("index.json"))  # type: ignore[arg-type]
    except (KeyError, tarfile.TarError, json.JSONDecodeError):
        return {}
    return {m["annotations"]["io.containerd.image.name"]: m["digest"]
            for m in index.get("manifests", [])
            if "io.containerd.image.name" in m.get("annotations", {})}


BUSYBOX_APPLETS = ("sh", "ls", "cat", "env", "sleep", "test", "echo", "grep", "find", "stat",
                   "dd", "mount", "true", "head", "wc", "nc", "httpd", "tail", "ps",
                   "hostname", "readlink", "mkdir", "basename", "tr")


def pause_image(name: str, pause_binary: Path) -> ImageSpec:
    return ImageSpec(name, files={"/pause": pause_binary}, entrypoint=["/pause"])


def driver_image(name: str, bin_dir: Path) -> ImageSpec:
    return ImageSpec(
        name,
        files={"/usr/bin/nvme-dra-driver": bin_dir / "nvme-dra-driver"},
        entrypoint=["/usr/bin/nvme-dra-driver"],
    )


def sanity_client_image(name: str, bin_dir: Path) -> ImageSpec:
    return ImageSpec(name, files={"/usr/bin/dra-sanity": bin_dir / "dra-sanity"},
                     entrypoint=["/usr/bin/dra-sanity"])


def busybox_image(name: str, busybox: Path = Path("/bin/busybox")) -> ImageSpec:
    return ImageSpec(
        name, files={"/bin/busybox": busybox},
        symlinks={f"/bin/{a}": "busybox" for a in BUSYBOX_APPLETS},
        entrypoint=["/bin/sh"],
    )


def dra_example_driver_image(name: str, bin_dir: Path) -> ImageSpec:
    """The programs where the example driver's own image puts them (its
    deployments/container/Dockerfile); its chart names the command to run."""
    return ImageSpec(
        name,
        files={f"/usr/bin/dra-example-{p}": bin_dir / f"dra-example-{p}"
               for p in ("kubeletplugin", "controller", "webhook")},
    )
