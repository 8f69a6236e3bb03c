"""Container images without a registry: an OCI image layout written by our own code, as
a tarball that ``ctr images import`` takes. Layers are reproducible (fixed mtimes)."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"


@dataclass
class ImageSpec:
    name: str  # fully qualified reference, e.g. localhost/kdc/pause:kdc-1
    files: dict[str, Path] = field(default_factory=dict)  # path in image -> host file
    contents: dict[str, bytes] = field(default_factory=dict)  # path in image -> data (0644)
    symlinks: dict[str, str] = field(default_factory=dict)  # path in image -> target
    entrypoint: list[str] = field(default_factory=list)
    env: list[str] = field(default_factory=lambda: ["PATH=/bin:/usr/bin:/sbin:/usr/sbin"])
    user: str = ""  # the image's default user, as a uid ("" for root)


def _layer(spec: ImageSpec) -> tuple[bytes, str]:
    """(gzipped layer, diff id of the uncompressed tar)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        paths = [*spec.files, *spec.contents, *spec.symlinks]
        dirs = sorted({str(Path(p).parent).lstrip("/") for p in paths} - {""})
        for d in [*dirs, "tmp"]:
            info = tarfile.TarInfo(d)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o1777 if d == "tmp" else 0o755, 0
            tar.addfile(info)
        for path, source in sorted(spec.files.items()):
            data = source.read_bytes()
            info = tarfile.TarInfo(path.lstrip("/"))
            info.size, info.mode, info.mtime = len(data), 0o755, 0
            tar.addfile(info, io.BytesIO(data))
        for path, data in sorted(spec.contents.items()):
            info = tarfile.TarInfo(path.lstrip("/"))
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
        for path, target in sorted(spec.symlinks.items()):
            info = tarfile.TarInfo(path.lstrip("/"))
            info.type, info.linkname, info.mtime = tarfile.SYMTYPE, target, 0
            tar.addfile(info)
    uncompressed = raw.getvalue()
    compressed = gzip.compress(uncompressed, mtime=0)
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
                   **({"User": spec.user} if spec.user else {})},
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
        files={f"/usr/bin/{p}": bin_dir / p for p in ("nvme-dra-driver", "dra-sanity")},
        entrypoint=["/usr/bin/nvme-dra-driver"],
    )


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
